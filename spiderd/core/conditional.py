"""Conditional GET on recrawl (RFC 9110 8.8, 13.1): a page's validators, and the requests that send them back.

A page fetched again (a hub, or a page of a recrawled kind) is asked for with
``If-None-Match`` (its last ``ETag``) and ``If-Modified-Since`` (its last
``Last-Modified``); a ``304 Not Modified`` says it did not change.  The pool
keeps the validators of such pages in a few bytes: the ETag as sent (at most
MAX_ETAG characters, printable ASCII without spaces, which a valid entity tag
is) and Last-Modified as Unix seconds (4 bytes), sent back as an IMF-fixdate.
An ETag or a date that does not fit is not kept.  Sans I/O.
"""

from __future__ import annotations

import email.utils
import re
from dataclasses import dataclass

from spiderd.core.httpdate import header_text, http_date

NOT_MODIFIED = 304
MAX_ETAG = 128
_ETAG = re.compile(r"[\x21-\x7e]{1,%d}" % MAX_ETAG)  # W/"x" or "x" (servers send unquoted tags too: kept as sent)
_MAX_SECONDS = 2**32 - 1
_NO_DATE = b"\x00\x00\x00\x00"


@dataclass(frozen=True, slots=True)
class Validators:
    """A page's ``ETag`` (as sent) and ``Last-Modified`` (Unix seconds); at least one of them is set."""

    etag: str | None = None
    last_modified: int | None = None

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The request headers that make a GET conditional on them."""
        out = []
        if self.etag is not None:
            out.append((b"If-None-Match", self.etag.encode("ascii")))
        if self.last_modified is not None:
            out.append((b"If-Modified-Since", email.utils.formatdate(self.last_modified, usegmt=True).encode()))
        return out

    def described(self) -> dict[str, str | int | None]:
        """As ``why`` shows them: ``{"etag": ..., "last_modified": Unix seconds}`` (None where absent)."""
        return {"etag": self.etag, "last_modified": self.last_modified}

    def updated(self, newer: Validators | None) -> Validators:
        """These validators with those a 304 carried instead (it may send a new ETag or date, or none)."""
        if newer is None:
            return self
        return Validators(newer.etag if newer.etag is not None else self.etag,
                          newer.last_modified if newer.last_modified is not None else self.last_modified)


def parse_etag(value: bytes | str | None) -> str | None:
    """An ``ETag`` header's value if the pool can keep it (printable ASCII, no space, at most MAX_ETAG), else None."""
    text = header_text(value)
    return text if text is not None and _ETAG.fullmatch(text) else None


def parse_http_date(value: bytes | str | None) -> int | None:
    """An HTTP date (``Last-Modified``) as Unix seconds, or None if absent, bad or outside 1970..2106."""
    seconds = http_date(value)
    return int(seconds) if seconds is not None and 0 < seconds <= _MAX_SECONDS else None


def from_headers(etag: bytes | str | None, last_modified: bytes | str | None) -> Validators | None:
    """The validators of an answer's ``ETag`` and ``Last-Modified`` values; None if neither can be kept."""
    tag, date = parse_etag(etag), parse_http_date(last_modified)
    return None if tag is None and date is None else Validators(tag, date)


# -- how the pools keep them ---------------------------------------------------------------------------------


def pack(v: Validators) -> bytes:
    """The embedded pool's value: Last-Modified in 4 bytes (0: none), then the ETag (ASCII)."""
    date = _NO_DATE if v.last_modified is None else v.last_modified.to_bytes(4, "big")
    return date + (v.etag or "").encode("ascii")


def unpack(value: bytes | None) -> Validators | None:
    """The validators of a :func:`pack` value (None for None or nothing kept)."""
    if not value or len(value) < 4:
        return None
    seconds = int.from_bytes(value[:4], "big")
    return _made(value[4:].decode("ascii", "replace") or None, seconds or None)


def to_text(v: Validators) -> str:
    """The Redis pool's value: ``<seconds or -> <etag>`` (an entity tag has no space)."""
    return f"{'-' if v.last_modified is None else v.last_modified} {v.etag or ''}"


def from_text(value: str | bytes | None) -> Validators | None:
    """The validators of a :func:`to_text` value (None for None, "" or a bad one)."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not value:
        return None
    date, _, tag = value.partition(" ")
    return _made(tag or None, int(date) if date.isdigit() else None)


def _made(etag: str | None, last_modified: int | None) -> Validators | None:
    return None if etag is None and last_modified is None else Validators(etag, last_modified)
