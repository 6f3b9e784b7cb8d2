"""Tests for spiderd.core.urls: the canonical form, fingerprints, hosts and rejections."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as s

from spiderd.core import urls
from spiderd.core.urls import BadURL, canonicalize
from spiderd.core.secrets import redact


@pytest.mark.parametrize(
    "raw, canonical",
    [
        ("http://Example.COM", "http://example.com/"),
        ("  http://example.com/a?b=2&a=1#frag ", "http://example.com/a?a=1&b=2"),
        ("http://example.com:80/x", "http://example.com/x"),
        ("https://example.com:443/x", "https://example.com/x"),
        ("https://example.com:8443/x", "https://example.com:8443/x"),
        ("HTTP://example.com/a/./b/../c", "http://example.com/a/c"),
        ("http://example.com/%7euser/%2f", "http://example.com/~user/%2F"),
        ("http://example.com/caf\u00e9", "http://example.com/caf%C3%A9"),
        ("http://b\u00fccher.example/", "http://xn--bcher-kva.example/"),
        ("http://example.com/?&&a=1&", "http://example.com/?a=1"),
        ("http://example.com/a b", "http://example.com/a%20b"),
        ("http://example.com/100%", "http://example.com/100%25"),
        ("http://ex_ample.com/", "http://ex_ample.com/"),
        ("http://[::1]:8080/a", "http://[::1]:8080/a"),
    ],
)
def test_canonical_form(raw: str, canonical: str) -> None:
    """Each documented rule of the canonical form holds on a known example."""
    assert canonicalize(raw) == canonical


@pytest.mark.parametrize(
    "raw, reason",
    [
        ("ftp://example.com/", "bad-scheme"),
        ("mailto:someone@example.com", "bad-scheme"),
        ("javascript:alert(1)", "bad-scheme"),
        ("http:///path", "no-host"),
        ("/relative/path", "bad-scheme"),
        ("http://example.com:99999/", "bad-port"),
        ("http://[::1/", "unparseable"),
        ("http://example.com/" + "a" * 3000, "too-long"),
        ("http://user:secretpw@example.com/", "credentials"),
        ("http://user@example.com/", "credentials"),
        ("http://127.0.0.1\x00.evil.com/", "bad-host"),
        ("http://exa mple.com/", "bad-host"),
        ("http://-a.example/", "bad-host"),
        ("http://a..b/", "bad-host"),
        ("http://" + "a" * 64 + ".example/", "bad-host"),
        ("http://x.com/\ud800", "unparseable"),
    ],
)
def test_rejections(raw: str, reason: str) -> None:
    """Bad URLs raise BadURL with a short reason instead of anything else."""
    with pytest.raises(BadURL) as info:
        canonicalize(raw)
    assert info.value.reason == reason
    assert info.value.url == redact(raw)  # the URL as given (not the part found wrong), without its password
    assert "secretpw" not in str(info.value)


def test_non_string_rejected() -> None:
    """A non-string is a BadURL, not a TypeError."""
    with pytest.raises(BadURL):
        canonicalize(b"http://example.com/")  # type: ignore[arg-type]


def test_fingerprint_is_stable() -> None:
    """The fingerprint is farmhash fingerprint64, pinned to a known value."""
    assert urls.fingerprint("http://example.com/") == 4588560778023479487
    assert urls.parse("HTTP://EXAMPLE.com:80").fingerprint == 4588560778023479487


def test_host_and_domain() -> None:
    """The politeness key keeps a non-default port; the registered domain uses the public suffix list."""
    assert urls.host_of("http://u:p@www.example.co.uk:8080/a") == "www.example.co.uk:8080"
    assert urls.registered_domain("www.example.co.uk:8080") == "example.co.uk"
    assert urls.registered_domain("127.0.0.1:8080") == "127.0.0.1"
    assert urls.registered_domain("localhost") == "localhost"


_safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_~."
_simple_urls = s.builds(
    lambda scheme, host, port, path, query: f"{scheme}://{host}{port}{path}{query}",
    s.sampled_from(["http", "https"]),
    s.from_regex(r"[a-z0-9]{1,10}(\.[a-z0-9-]{1,10}){0,3}", fullmatch=True),
    s.sampled_from(["", ":80", ":443", ":8080"]),
    s.lists(s.text(_safe, min_size=0, max_size=8), max_size=5).map(lambda p: "/" + "/".join(p)),
    s.lists(s.tuples(s.text(_safe, max_size=5), s.text(_safe, max_size=5)), max_size=4).map(
        lambda q: ("?" + "&".join(f"{k}={v}" for k, v in q)) if q else ""
    ),
)


@settings(max_examples=400, deadline=None)
@given(_simple_urls)
def test_fast_path_agrees_with_slow_path(url: str) -> None:
    """The fast path gives exactly what the general path gives, so the form does not depend on the path taken."""
    try:
        slow = urls._canonicalize_slow(url)
    except BadURL:
        return
    assert canonicalize(url) == slow


@settings(max_examples=800, deadline=None)
@given(s.one_of(_simple_urls, s.text(max_size=120), s.text(max_size=60).map(lambda t: "http://example.com/" + t)))
def test_canonicalize_never_crashes_and_is_idempotent(url: str) -> None:
    """Any string either raises BadURL or gives a form that canonicalises to itself."""
    try:
        once = canonicalize(url)
    except BadURL:
        return
    assert canonicalize(once) == once
    assert once.startswith(("http://", "https://"))
