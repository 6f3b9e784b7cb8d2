"""HTTP byte ranges (RFC 9110 14): a ``Range: bytes=...`` request of a body held in memory, answered 206 with the part
asked for, as Twisted's ``static.File`` (which Scrapyd serves its logs with) answers one range.

A header that is not one well-formed byte range (another unit, a syntax error, several ranges) is ignored, and the
whole body is sent with 200, as RFC 9110 allows; a range that starts past the end is answered 416.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ONE_RANGE = re.compile(rb"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*")


@dataclass(frozen=True)
class ByteRange:
    """What to send of a body of ``size`` bytes: ``body[first:last + 1]``, or nothing (``satisfiable`` False)."""

    first: int
    last: int
    size: int

    @property
    def satisfiable(self) -> bool:
        return self.first <= self.last

    def content_range(self) -> bytes:
        """The ``Content-Range`` value of the answer (206, or 416 with ``*``)."""
        if not self.satisfiable:
            return b"bytes */%d" % self.size
        return b"bytes %d-%d/%d" % (self.first, self.last, self.size)


def byte_range(header: bytes | None, size: int) -> ByteRange | None:
    """The range ``header`` asks of a body of ``size`` bytes; None: no header, or one to ignore (send it all)."""
    if header is None:
        return None
    match = _ONE_RANGE.fullmatch(header)
    if match is None:
        return None
    first, last = match.group(1), match.group(2)
    if not first and not last:
        return None
    if not first:  # "-N": the last N bytes
        suffix = int(last)
        return ByteRange(max(0, size - suffix), size - 1, size) if suffix else ByteRange(size, size - 1, size)
    start = int(first)
    end = min(int(last), size - 1) if last else size - 1
    if last and int(last) < start:
        return None  # "5-2" is no valid range: the header is ignored
    return ByteRange(start, end, size) if start < size else ByteRange(size, size - 1, size)
