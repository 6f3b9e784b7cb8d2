"""Canonical URLs, their 64-bit fingerprints, hosts and registered domains.

The canonical form is spiderd's own and is pinned by tests, so a fingerprint
computed today matches one computed after an upgrade of w3lib:

- surrounding whitespace stripped, fragment dropped;
- scheme and host lower-cased, the host IDNA-encoded, the default port removed;
- percent-escapes upper-cased, escapes of unreserved characters decoded,
  characters that are not allowed percent-encoded (UTF-8), dot segments
  resolved, an empty path made ``/``;
- query arguments sorted by key, then value; empty arguments dropped.

Most URLs found on real pages take a fast path (a regular expression and a
sort); the rest go through w3lib's ``safe_url_string`` first (imported on the first of them: its module imports
``urllib.request``, a third of a parse child's start, about 30 ms, before its first page).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, AnyStr
from urllib.parse import urlsplit

import farmhash

from spiderd.core.secrets import redact

if TYPE_CHECKING:
    from publicsuffixlist import PublicSuffixList

MAX_URL_LENGTH = 2083
SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}

_FAST = re.compile(
    r"(https?)://((?!-)[a-z0-9-]{1,63}(?<!-)(?:\.(?!-)[a-z0-9-]{1,63}(?<!-))*)(?::([0-9]{1,5}))?"
    r"(/[A-Za-z0-9\-_~/.]*)?(?:\?([A-Za-z0-9\-_~.=&]*))?(?:#.*)?",
    re.ASCII | re.DOTALL,
)
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_BARE_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


class BadURL(ValueError):
    """A URL spiderd will not crawl; ``reason`` is a short machine-readable word."""

    def __init__(self, reason: str, url: str) -> None:
        url = redact(url)  # what is shown of a rejected URL never holds its password
        super().__init__(f"{reason}: {url[:200]!r}")
        self.reason = reason
        self.url = url


@dataclass(frozen=True, slots=True)
class URL:
    """A canonical URL with what the pool keys on."""

    url: str
    host: str
    fingerprint: int


def canonicalize(url: str, max_length: int = MAX_URL_LENGTH) -> str:
    """Return the canonical form of ``url`` or raise :class:`BadURL`."""
    if not isinstance(url, str):
        raise BadURL("not-a-string", repr(url))
    if len(url) > max_length:
        raise BadURL("too-long", url)
    url = url.strip()
    match = _FAST.fullmatch(url)
    if match is not None and "/." not in (match.group(4) or ""):
        try:
            result = _from_parts(match.group(1), match.group(2), match.group(3), match.group(4), match.group(5))
        except BadURL as e:  # it names the part (a port of 99999): show the URL
            raise BadURL(e.reason, url) from None
    else:
        result = _canonicalize_slow(url)
    if len(result) > max_length:
        raise BadURL("too-long", url)
    return result


def parse(url: str, max_length: int = MAX_URL_LENGTH) -> URL:
    """Canonicalise ``url`` and compute its host and fingerprint."""
    canonical = canonicalize(url, max_length)
    return URL(canonical, host_of(canonical), fingerprint(canonical))


def fingerprint(canonical: str) -> int:
    """The unsigned 64-bit farmhash ``fingerprint64`` of a canonical URL."""
    value: int = farmhash.fingerprint64(canonical)
    return value


def to_signed64(fp: int) -> int:
    """The signed 64-bit integer with the same bits as the unsigned fingerprint ``fp`` (the feed's ``urlhash``)."""
    return fp - 2**64 if fp >= 2**63 else fp


def host_of(canonical: str) -> str:
    """The host (with a non-default port) of a canonical URL: the politeness key."""
    start = canonical.index("//") + 2
    end = canonical.find("/", start)
    netloc = canonical[start:] if end < 0 else canonical[start:end]
    return netloc.rpartition("@")[2]


@lru_cache(maxsize=65536)
def registered_domain(host: str) -> str:
    """The registered domain of a host (``www.example.co.uk`` -> ``example.co.uk``)."""
    hostname = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if hostname.startswith("[") or _is_ipv4(hostname):
        return hostname
    return _psl().privatesuffix(hostname) or hostname


def _from_parts(scheme: str, host: str, port: str | None, path: str | None, query: str | None) -> str:
    netloc = host if host[-1] != "." else host.rstrip(".")
    if not netloc or len(netloc) > 253:
        raise BadURL("bad-host", host)
    if port is not None:
        number = int(port)
        if number > 65535:
            raise BadURL("bad-port", port)
        if number != DEFAULT_PORTS[scheme]:
            netloc = f"{netloc}:{number}"
    result = f"{scheme}://{netloc}{path or '/'}"
    if query:
        result += _sort_query(query)
    return result


def _canonicalize_slow(url: str) -> str:
    from w3lib.url import safe_url_string

    try:
        parts = urlsplit(safe_url_string(url))
        scheme = parts.scheme.lower()
        host = parts.hostname
        port = parts.port
    except (ValueError, UnicodeError) as e:
        raise BadURL("unparseable", url) from e
    if scheme not in SCHEMES:
        raise BadURL("bad-scheme", url)
    if not host:
        raise BadURL("no-host", url)
    host = host.rstrip(".")
    if not _valid_host(host):
        raise BadURL("bad-host", url)
    if "@" in parts.netloc:  # a password would be stored, shown and sent: spiderd crawls no such URL
        raise BadURL("credentials", url)
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    path = _remove_dot_segments(_normalize_escapes(parts.path)) or "/"
    result = f"{scheme}://{netloc}{path}"
    if parts.query:
        result += _sort_query(_normalize_escapes(parts.query))
    return result


_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)", re.ASCII)


def _valid_host(host: str) -> bool:
    """An IP literal, or a name of IDNA-encoded labels (letters, digits, '-', '_'), at most 253 long."""
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
            return True
        except ValueError:
            return False
    if not host or len(host) > 253:
        return False
    return all(_LABEL.fullmatch(label) for label in host.split("."))


def _sort_query(query: str) -> str:
    """``?`` and the non-empty arguments sorted by key, then value, or ``""``."""
    args = [a for a in query.split("&") if a]
    if not args:
        return ""
    if len(args) > 1:
        args.sort(key=lambda arg: arg.partition("="))
    return "?" + "&".join(args)


def _normalize_escapes(text: str) -> str:
    """Upper-case escapes, decode escaped unreserved characters, escape a bare ``%``."""
    if "%" not in text:
        return text
    text = _BARE_PERCENT.sub("%25", text)
    return _ESCAPE.sub(_escape_repl, text)


def _escape_repl(match: re.Match[str]) -> str:
    code = int(match.group(1), 16)
    return chr(code) if code in _UNRESERVED else "%" + match.group(1).upper()


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4, for an absolute path."""
    if "." not in path:
        return path
    out: list[str] = []
    segments = path.split("/")
    for segment in segments[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    trailing = segments[-1] in (".", "..")
    return "/" + "/".join(out) + ("/" if trailing and out else "")


def _is_ipv4(host: str) -> bool:
    pieces = host.split(".")
    return len(pieces) == 4 and all(p.isdigit() for p in pieces)


@lru_cache(maxsize=1)
def _psl() -> PublicSuffixList:
    """The bundled public suffix list (loaded once; never fetched at run time)."""
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


_HTTP = ("http://", "https://")
_HTTP_BYTES = (b"http://", b"https://")


def origin_end(url: str | bytes) -> int:
    """Where an ``http://`` or ``https://`` URL's scheme and authority end, as urlsplit ends the netloc: at its first
    '/', '?' or '#' past the '//' (its length if none); -1 for any other URL."""
    if isinstance(url, bytes):
        return _first_of(url, (b"/", b"?", b"#"), url.index(b"//") + 2) if url.startswith(_HTTP_BYTES) else -1
    return _first_of(url, ("/", "?", "#"), url.index("//") + 2) if url.startswith(_HTTP) else -1


def _first_of(text: AnyStr, stops: tuple[AnyStr, ...], start: int) -> int:
    end = len(text)
    for stop in stops:
        found = text.find(stop, start, end)
        if found >= 0:
            end = found
    return end
