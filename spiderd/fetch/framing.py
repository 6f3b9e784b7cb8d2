"""HTTP/1.1 answers held to their framing: each malformed one named, and no connection reused out of step.

Twisted's client protocol (``HTTP11ClientProtocol``) hides most framing faults behind the connection's close: a
header line over its 16 KiB line limit closes the connection, so the fetch fails as a clean close; a body cut
short fails with ``ResponseFailed`` whose first reason is that close (the ``_DataLoss`` that says so comes
second, with no count); a bad chunk is a private exception.  It bounds no header block as a whole.  And it ignores
bytes past the end of an answer (``rest``, "ignored" until it pipelines) and pools the connection all the same.
Bytes that come while a connection is idle in the pool make it give the connection up (its ``dataReceived``
meets no parser), but bytes that come once the connection carries the next request (a server that sends them
late, and works that request after them) are read as that request's answer.

:class:`Protocol`, the pool's protocol (:mod:`spiderd.fetch.connections`: the fetcher's pools, and its proxies'
and tunnels'), names the faults of a status line and headers (:class:`Malformed`), bounds the header block
(``MAX_HEAD``) and never pools a connection whose answer had bytes past its end or was framed oddly
(Transfer-Encoding and Content-Length both, Content-Length repeated).  At the end of each body the fetcher asks
:func:`checked` (bytes past the end: :class:`Malformed` on a connection's first answer, :class:`OutOfStep` on a
reused one, which the answer may not be its request's) and :func:`body_failure` (a body cut short:
:class:`CutShort` on a clean close, :class:`LostMidBody` on a reset).  The faults left, a late answer that comes
whole in a read of its own while its victim waits, cannot be told from an answer: see :class:`Protocol`.

This reaches into Twisted: ``_parser``, ``_currentRequest``, ``_giveUp``, ``_finishResponse_WAITING``, the
parser's ``lineLengthExceeded`` and ``connHeaders``, and ``HTTPConnectionPool._factory`` (there since Twisted 12);
tests/test_fetch_framing.py and tests/test_fetch_poisoned.py pin the behaviour on real connections.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

from twisted.internet import error
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import client
from twisted.web._newclient import BODY, HEADER, STATUS, BadResponseVersion, HTTPClientParser, ParseError
from twisted.web.http import _MalformedChunkedDataError
from twisted.web.iweb import IResponse

from spiderd.fetch.cycles import unlink

log = Logger()

MAX_LINE: int = HTTPClientParser.MAX_LENGTH  # Twisted's limit of one status or header line (16 KiB)
MAX_HEAD = 256 * 1024  # bytes of status line and headers, at most (as Chrome's limit; Twisted sets none)
_HEAD = (STATUS, HEADER)
_SHOWN = 80  # characters of a bad line shown in a reason
SPLIT_AT = 2048  # a read of at least this many bytes that begins an answer is given to the parser head, then body
NO_BODY: frozenset[int] = frozenset(HTTPClientParser.NO_BODY_CODES)  # 204 and 304: Twisted reads no body

# answers followed by bytes past their end: (how many, on a reused connection), until the body has been read
_PAST_END: weakref.WeakKeyDictionary[Any, tuple[int, bool]] = weakref.WeakKeyDictionary()


class Framing(Exception):
    """A fault of an answer's framing, said in words (the message is the whole detail of the reason)."""


class Malformed(Framing):
    """The answer breaks HTTP/1.1's syntax or framing: the server's fault, every time (``MALFORMED``)."""


class CutShort(Framing):
    """The server closed the connection cleanly before the end the answer's framing announced (``CUT_SHORT``)."""


class LostMidBody(Framing):
    """The connection was reset or lost before the end of the body (``CONNECTION_LOST``: retried)."""


class OutOfStep(Framing):
    """Bytes came past the end of an answer on a reused connection: the answer may have been sent for an earlier
    request (``OUT_OF_STEP``: retried, the connection closed)."""


class Protocol(client.HTTP11ClientProtocol):
    """Twisted's HTTP/1.1 client protocol, held to the answer's framing (see the module's docstring).

    What it cannot catch: a stray answer that comes whole in a read of its own after the next request went out
    (a server that sends bytes late and works that request after them) is, on the wire, that request's answer;
    if the true answer then comes in a read of its own too, the connection is dropped (it meets no request), but
    the stray answer has been given.  Keying connections per origin (:mod:`spiderd.fetch.proxy`) keeps such bytes
    to the site that sent them."""

    def __init__(self, quiescentCallback: Callable[[Any], object]) -> None:
        super().__init__(quiescentCallback)
        self._head = 0  # bytes of the current answer's status line and headers read so far
        self._answers = 0  # answers read whole on this connection
        self._tail: bytes | None = None  # the bytes after a head being parsed (see _feed)

    def request(self, request: Any) -> Any:
        if self.state != "QUIESCENT":  # refused (RequestNotSent): the request in flight keeps its parser
            return super().request(request)
        self._head = 0
        d = super().request(request)
        parser: Any = self._parser
        if parser is not None:
            parser.lineLengthExceeded = _line_too_long
        return d

    def dataReceived(self, data: bytes) -> None:
        parser = self._parser
        if parser is None:  # no request out (idle in the pool): Twisted's own gives the connection up too
            log.debug("{count} bytes came with no request out: the connection is closed", count=len(data))
            self.abort()  # (out of the pool's hands at once: the pool takes QUIESCENT connections only)
            return
        heading = parser.state in _HEAD
        try:
            self._feed(parser, data)
            if heading and parser.state in _HEAD:
                self._head += len(data)
                if self._head > MAX_HEAD:
                    raise Malformed(f"headers too long: more than {MAX_HEAD} bytes")
        except Exception as e:
            known = named(e, parser)
            self._giveUp(Failure() if known is None else Failure(known))

    def _feed(self, parser: Any, data: bytes) -> None:
        """``parser.dataReceived(data)``; a read that begins an answer with its head and body goes in as the head,
        then the body.

        Twisted's line reader cuts each header line off the front of what it holds, a copy of the rest every line:
        of the body too when it came in the same read (a 40 KB page and ten header lines: 400 KB copied).  Given
        the head alone, it copies the head's bytes only.  The same parser then gets the rest as it would have:
        the body; or, when the answer ended with its head, the rest is that answer's ``rest`` (bytes past its
        end: :meth:`_finishResponse_WAITING` takes them from ``_tail``); or, when the parser stopped early (its
        connection lost), it holds them unread, as it would have."""
        end = data.find(b"\r\n\r\n") if parser.state == STATUS and len(data) >= SPLIT_AT else -1
        if end < 0 or end + 4 == len(data):
            parser.dataReceived(data)
            return
        self._tail = data[end + 4:]
        try:
            parser.dataReceived(data[:end + 4])
        finally:
            tail, self._tail = self._tail, None
        if tail is not None and self._parser is parser:  # (else taken as the answer's rest, or the parser gone)
            self._feed_rest(parser, tail)

    @staticmethod
    def _feed_rest(parser: Any, tail: bytes) -> None:
        if parser._buffer or parser.paused:  # stopped before the end of the head: it holds the rest unread
            parser._buffer += tail
        else:
            parser.dataReceived(tail)

    def _finishResponse_WAITING(self, rest: bytes) -> None:
        if self._tail is not None:  # the answer ended with the head _feed gave alone: the rest is the read's too
            rest, self._tail = rest + self._tail, None
        parser, request = self._parser, self._currentRequest
        if parser is not None and request is not None:
            self._answers += 1
            if rest or odd(parser.connHeaders):
                request.persistent = False  # Twisted then closes the connection instead of pooling it
            if rest.strip():  # (whitespace past the end, a CRLF some servers add, closes it and is no fault)
                _PAST_END[parser.response] = (len(rest), self._answers > 1)
        super()._finishResponse_WAITING(rest)

    _finishResponse_TRANSMITTING = _finishResponse_WAITING

    def connectionLost(self, reason: Any = None) -> None:
        transport = self.transport
        super().connectionLost(reason)
        unlink(transport)  # freed at once, not left to the garbage collector


class Factory(client._HTTP11ClientFactory):
    """Builds :class:`Protocol` for a pool (``HTTPConnectionPool._factory``)."""

    def buildProtocol(self, addr: Any) -> Protocol:
        return Protocol(self._quiescentCallback)


def _line_too_long(line: bytes) -> None:
    raise Malformed(f"headers too long: a line of more than {MAX_LINE} bytes")


def odd(headers: Any) -> bool:
    """Whether an answer's connection headers frame it oddly: Content-Length repeated, or with Transfer-Encoding
    (RFC 9112 6.3: a sign of response splitting; Transfer-Encoding wins, and the connection is not reused)."""
    lengths = headers.getRawHeaders(b"content-length") or []
    if len(lengths) > 1 or any(b"," in value for value in lengths):
        return True
    return bool(lengths) and headers.hasHeader(b"transfer-encoding")


def named(e: Exception, parser: Any) -> Framing | None:
    """The fault of the status line, headers or chunks that raised ``e`` in ``parser``, named; None if ``e`` is
    not one (an error of the code reading the body)."""
    if isinstance(e, Framing):
        return e
    if isinstance(e, BadResponseVersion):
        return Malformed(f"bad HTTP version: {_shown(e.args[-1])}")
    if isinstance(e, ParseError):
        return Malformed(f"bad status line: {_shown(e.args[-1])}")
    if parser.state == BODY and isinstance(e, _MalformedChunkedDataError):
        return Malformed(f"bad chunk: {e}")
    if parser.state != HEADER or not isinstance(e, (KeyError, ValueError)):
        return None
    if isinstance(e, KeyError):  # the one Transfer-Encoding Twisted knows is chunked
        return Malformed(f"unknown Transfer-Encoding: {_shown(e.args[0])}")
    partial = b"".join(getattr(parser, "_partialHeader", None) or [])
    if partial and b":" not in partial:
        return Malformed(f"bad header line: {_shown(partial)}")
    lengths = parser.connHeaders.getRawHeaders(b"content-length")
    if lengths:
        return Malformed("bad Content-Length: " + ", ".join(_shown(value) for value in lengths))
    return Malformed(f"bad headers: {e}")


def checked(body: bytes, response: IResponse) -> bytes:
    """``body``, read whole; past its answer's end came bytes: :class:`Malformed` on the connection's first
    answer (longer than it said; but a 204's or 304's, the body such answers have none of, is let be),
    :class:`OutOfStep` on a reused one."""
    past = _PAST_END.pop(response, None)
    if past is None:
        return body
    count, reused = past
    if not reused and response.code in NO_BODY:
        return body
    if reused:
        raise OutOfStep(f"{count} bytes came past the end of an answer on a reused connection (it may have been "
                        "an earlier request's)")
    raise Malformed(f"{count} bytes past the end of the answer ({_framing(response)})")


def body_failure(failure: Failure, received: int, response: IResponse) -> Failure:
    """A body's failure, named: Twisted's ``ResponseFailed`` (data lost) as the fault it wraps (a bad chunk),
    :class:`CutShort` (a clean close) or :class:`LostMidBody` (a reset), ``received`` bytes of it read; any other
    failure as it is."""
    if not failure.check(client.ResponseFailed):
        return failure
    reasons: list[Failure] = list(failure.value.reasons)
    for reason in reasons:
        if reason.check(Framing):
            return reason
    length = response.length
    if reasons and reasons[0].check(error.ConnectionDone):
        if isinstance(length, int):
            return Failure(CutShort(f"body shorter than Content-Length ({received} of {length} bytes)"))
        return Failure(CutShort(f"chunked body closed before its last chunk ({received} bytes came)"))
    if reasons and reasons[0].check(error.ConnectionLost):
        what = f"{received} of the {length} bytes" if isinstance(length, int) else f"{received} bytes"
        return Failure(LostMidBody(f"connection lost after {what} of the body ({reasons[0].type.__name__})"))
    return failure


def _framing(response: IResponse) -> str:
    return f"Content-Length {response.length}" if isinstance(response.length, int) else "chunked"


def _shown(value: bytes | str) -> str:
    text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    return repr(text[:_SHOWN])
