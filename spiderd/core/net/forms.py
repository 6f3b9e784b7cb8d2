"""A form body decoded a step at a time, so that a big one never holds the reactor for long.

Twisted decodes a form body (``application/x-www-form-urlencoded``) in one call when the request has
arrived.  The decode is pure Python, about 0.1 s per megabyte of percent-escapes: a ``schedule.json`` of
60,000 start URLs is 3.5 MB with 540,000 escapes, 0.3 s.  A thread does not help: the decode holds the
GIL, and the reactor thread waits up to a switch interval for it after every system call it makes.
:func:`decode_form` is the same decode as Twisted's (``http.parse_qs(body, keep_blank_values=1)``),
as an iterator that yields after every ``step`` bytes or so; run it one step per turn of the reactor.
:func:`decode_multipart` does the same for a ``multipart/form-data`` body (the standard library's MIME
parser, also pure Python, fed a step's bytes at a time), and says why a malformed one is (Twisted answers
a bare 400).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from email.feedparser import BytesFeedParser
from email.message import Message
from email.utils import collapse_rfc2231_value
from typing import cast
from urllib.parse import unquote_to_bytes

STEP = 32 * 1024  # bytes decoded per step: a few milliseconds of percent-escapes
FIELD_COST = 32  # what a field costs beyond its bytes, counted in bytes (a body of many tiny fields)
_FIELD = re.compile(rb"[^&;]+")  # Twisted splits on both separators and drops empty fields

Form = dict[bytes, list[bytes]]


class MalformedForm(ValueError):
    """A form body that cannot be decoded (a multipart/form-data one that is not multipart)."""


class _Budget:
    """The bytes left in the current step."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.left = step

    def spend(self, cost: int) -> Iterator[None]:
        """Count ``cost`` bytes; yields once when the step is spent (a new one then begins)."""
        self.left -= cost
        if self.left <= 0:
            self.left = self.step
            yield None


def decode_form(body: bytes, into: Form, step: int = STEP) -> Iterator[None]:
    """Decode ``body`` into ``into`` (name: its values, in order) as Twisted's ``http.parse_qs(body, 1)``
    does; yields after about every ``step`` bytes."""
    budget = _Budget(step)
    for field in _FIELD.finditer(body):
        name, sep, value = field.group().partition(b"=")
        if sep:  # a field without "=" is dropped, as Twisted does
            key = yield from _unquote(name, budget)
            into.setdefault(key, []).append((yield from _unquote(value, budget)))
        yield from budget.spend(FIELD_COST)


def _unquote(raw: bytes, budget: _Budget) -> Generator[None, None, bytes]:
    """``unquote_to_bytes`` of ``raw`` with "+" as a space, a step's bytes at a time."""
    raw = raw.replace(b"+", b" ")
    pieces = []
    start = 0
    while start < len(raw):
        end = _cut(raw, start + max(budget.left, 3))  # the rest of the step; an escape that begins a piece is in it
        pieces.append(unquote_to_bytes(raw[start:end]))
        yield from budget.spend(end - start)
        start = end
    return b"".join(pieces)


def _cut(raw: bytes, at: int) -> int:
    """Where to end a piece near ``at``: never inside an escape "%XX" (a "%" decodes by the two bytes after
    it alone, so a piece may end just before any "%", or where none is among its last two bytes)."""
    if at >= len(raw):
        return len(raw)
    escape = raw.rfind(b"%", at - 2, at)
    return escape if escape != -1 else at


def decode_multipart(ctype: bytes, body: bytes, into: Form, step: int = STEP) -> Iterator[None]:
    """The named parts of a multipart/form-data ``body`` into ``into``, read as Twisted reads them: the standard
    library's MIME parser with the request's content type (boundary included) as its header, here fed ``step``
    bytes at a time; yields after each step.  MalformedForm if the body is not multipart."""
    parser = BytesFeedParser()
    parser.feed(b"MIME-Version: 1.0\r\nContent-Type: " + ctype + b"\r\n")
    for start in range(0, len(body), step):
        parser.feed(body[start:start + step])
        yield None
    message = parser.close()
    if not message.is_multipart():
        raise MalformedForm("malformed multipart/form-data body")
    budget = _Budget(step)
    for part in cast(list[Message], message.get_payload()):
        name = part.get_param("name", header="content-disposition")
        if name:
            payload = cast(bytes, part.get_payload(decode=True))
            into.setdefault(collapse_rfc2231_value(name).encode("utf-8"), []).append(payload)
            yield from budget.spend(len(payload) + FIELD_COST)
