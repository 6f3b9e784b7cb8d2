"""A response body read without a bound it does not set: at most ``limit`` bytes raw and inflated (gzip,
deflate, and br where a Brotli package that bounds its output is installed), the transfer stopped past it."""

from __future__ import annotations

import typing
import zlib
from typing import cast

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol
from twisted.python.failure import Failure
from twisted.web._newclient import ResponseDone
from twisted.web.http import PotentialDataLoss

from spiderd.fetch import brotli_body


# how a body that came whole ends (Twisted's ResponseDone; PotentialDataLoss for a body framed by the close)
_ENDED = (ResponseDone, PotentialDataLoss)


class TooLarge(Exception):
    """The body passed ``max_body_size`` (raw or inflated)."""


class BodyReader(Protocol):
    """Collects a body up to ``limit`` bytes (raw and inflated), inflating gzip/deflate/br as it comes.

    Its transport (from ``Response.deliverBody``) is a push producer, whatever ``Protocol`` declares."""

    def __init__(self, limit: int, encoding: bytes, truncate: bool = False) -> None:
        self.finished: Deferred[bytes] = Deferred(self._cancel)
        self._limit = limit
        self._truncate = truncate  # past the limit: end with the first ``limit`` bytes instead of failing
        self._chunks: list[bytes] = []
        self._size = 0
        self._raw = 0
        self._inflater = _inflater(encoding)
        self._done = False

    @property
    def received(self) -> int:
        """Bytes of the body read so far, as they came (before inflating)."""
        return self._raw

    def dataReceived(self, data: bytes) -> None:
        if self._done:
            return
        self._raw += len(data)
        if self._inflater is None:
            self._take(data)
            return
        try:
            chunk = self._inflater.decompress(data, self._limit - self._size + 1)
        except _DECODE_ERRORS as e:
            self._abort(ValueError(f"bad compressed body: {e}"))
            return
        self._take(chunk)
        if not self._done and self._inflater.unconsumed_tail:
            self._over_limit(TooLarge(f"inflated body of more than {self._limit} bytes"))

    def _take(self, chunk: bytes) -> None:
        room = self._limit - self._size
        self._size += len(chunk)
        if self._size > self._limit or self._raw > self._limit:
            if self._truncate:
                self._chunks.append(chunk[: max(room, 0)])
            self._over_limit(TooLarge(f"more than {self._limit} bytes"))
        else:
            self._chunks.append(chunk)

    def _over_limit(self, reason: Exception) -> None:
        """Past the limit: fail, or (truncating) end with what fits."""
        if not self._truncate:
            self._abort(reason)
            return
        self._done = True
        cast(IPushProducer, self.transport).stopProducing()
        self.finished.callback(Truncated(b"".join(self._chunks)[: self._limit]))

    def _abort(self, reason: Exception) -> None:
        self._done = True
        self._chunks = []
        cast(IPushProducer, self.transport).stopProducing()
        self.finished.errback(reason)

    def _cancel(self, _: Deferred[bytes]) -> None:
        self._done = True
        self._chunks = []
        if self.transport is not None:
            cast(IPushProducer, self.transport).stopProducing()

    def connectionLost(self, reason: Failure = ResponseDone) -> None:  # type: ignore[assignment]  # Twisted's default
        if self._done:
            return
        if not isinstance(reason.value, _ENDED):  # (Failure.check names every class of the value's MRO: slow)
            self._done = True
            self.finished.errback(reason)
            return
        if self._inflater is not None:
            try:
                self._take(self._inflater.flush())
            except _DECODE_ERRORS as e:
                self._abort(ValueError(f"bad compressed body: {e}"))
            if self._done:
                return
        self._done = True
        self.finished.callback(b"".join(self._chunks))


class Truncated(bytes):
    """The first bytes of a body that was longer (``fetch_raw(truncate=True)``)."""


class Discard(Protocol):
    """Reads nothing of a body: the transfer stops at once."""

    def connectionMade(self) -> None:
        cast(IPushProducer, self.transport).stopProducing()


class _Inflater(typing.Protocol):
    """What inflates a body: zlib's decompressor, or ``_Deflate``."""

    @property
    def unconsumed_tail(self) -> bytes: ...

    def decompress(self, data: bytes, max_length: int, /) -> bytes: ...

    def flush(self) -> bytes: ...


def accept_encoding() -> bytes:
    """The encodings the fetcher inflates: gzip and deflate, and br when a bounding Brotli package is here."""
    return b"gzip, deflate, br" if brotli_body.available() else b"gzip, deflate"


_DECODE_ERRORS = (zlib.error, brotli_body.BrotliError)


def _inflater(encoding: bytes) -> _Inflater | None:
    if encoding in (b"gzip", b"x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == b"deflate":
        return _Deflate()
    if encoding == b"br" and brotli_body.available():
        return brotli_body.BrotliInflater()
    return None


class _Deflate:
    """``deflate`` as servers send it: zlib-wrapped, or raw when the zlib header is missing."""

    def __init__(self) -> None:
        self._inner: _Inflater | None = None
        self.unconsumed_tail = b""

    def decompress(self, data: bytes, max_length: int) -> bytes:
        if self._inner is None:
            wrapped = len(data) >= 2 and (data[0] & 0x0F) == 8 and ((data[0] << 8) | data[1]) % 31 == 0
            self._inner = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        out = self._inner.decompress(data, max_length)
        self.unconsumed_tail = self._inner.unconsumed_tail
        return out

    def flush(self) -> bytes:
        return self._inner.flush() if self._inner is not None else b""
