"""The one redaction of passwords in URIs and text, and the one loopback rule (spiderd.core.secrets)."""

from __future__ import annotations

import pytest

from spiderd.core.secrets import (
    is_loopback,
    is_loopback_host_header,
    mask_secret,
    redact,
    redact_text,
    redact_value,
)

PASSWORDS = ["s3cret", "pa ssLEAK2", "it's", 'say"hi', "back\\slash", "<tag>", "p@ss", "pa/ss", "p#ss?x", "p%40ss"]


@pytest.mark.parametrize("password", PASSWORDS)
def test_any_password_is_masked(password: str) -> None:
    """Whatever a password holds (spaces, quotes, @, /, #, ?), a URI shows it as *** and keeps the rest."""
    uri = f"ftp://feeduser:{password}@127.0.0.1:2121/in/%(batch)s.jl"
    assert redact(uri) == "ftp://feeduser:***@127.0.0.1:2121/in/%(batch)s.jl"
    assert redact_value(uri) == "ftp://feeduser:***@127.0.0.1:2121/in/%(batch)s.jl"
    text = f"refused {uri} (550 denied) and mail ops@example.org"
    shown = redact_text(text)
    assert password not in shown.replace("ops@example.org", ""), shown
    assert shown.endswith("(550 denied) and mail ops@example.org") or "/" in password or "#" in password


@pytest.mark.parametrize(
    "uri, shown",
    [
        ("ftp://spark:s3cret@host:21/a/b.jl", "ftp://spark:***@host:21/a/b.jl"),
        ("ftp://u:p@ss@host/x@y.jl", "ftp://u:***@host/x@y.jl"),  # an @ in the path stays
        ("mysql://u:pw@h:1/db", "mysql://u:***@h:1/db"),
        ("redis://:secret@10.0.0.5:6379/0", "redis://:***@10.0.0.5:6379/0"),
        ("http://127.0.0.1:6800", "http://127.0.0.1:6800"),  # no userinfo
        ("ftp://host/in/a@b.jl", "ftp://host/in/a@b.jl"),
        ("http://user@h/", "http://user@h/"),  # a user name, no password
        ("not a uri", "not a uri"),
    ],
)
def test_uris(uri: str, shown: str) -> None:
    """What is kept and what is masked."""
    assert redact(uri) == shown


def test_text_with_several_uris() -> None:
    """Each URI of a line is masked on its own; the words around them stay."""
    text = "from ftp://a:one@h1/x to ftp://b:two@h2 then\nredis://:three@r:6379/0 done"
    assert redact_text(text) == "from ftp://a:***@h1/x to ftp://b:***@h2 then\nredis://:***@r:6379/0 done"


def test_loopback() -> None:
    """Loopback addresses and names, with and without brackets and ports (Host headers)."""
    for address in ("127.0.0.1", "127.3.4.5", "::1", "[::1]", "localhost", "LOCALHOST"):
        assert is_loopback(address), address
    for address in ("10.0.0.1", "0.0.0.0", "", "example.com", "127.0.0.1.evil.com"):
        assert not is_loopback(address), address
    assert is_loopback_host_header("127.0.0.1:6810") and is_loopback_host_header("[::1]:6800")
    assert is_loopback_host_header("localhost") and not is_loopback_host_header("evil.example:6810")


def test_a_known_secret_is_masked_wherever_it_stands() -> None:
    """A known password is *** wherever the text quotes it, inside a URI or not; no password changes nothing."""
    text = "530 login refused for s3cret (ftp://u:s3cret@h/x)"
    assert mask_secret(text, "s3cret") == "530 login refused for *** (ftp://u:***@h/x)"
    assert mask_secret(text, "") == text
