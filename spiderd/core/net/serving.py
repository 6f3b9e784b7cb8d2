"""Serving HTTP: the one Site of every spiderd API (the node's and the worker's).

- request bodies capped (413 before the body is read, in JSON);
- a header deadline: a connection that has not finished a request's headers
  ``header_timeout`` seconds after it began is closed (slowloris), and an idle
  connection after ``idle_timeout`` seconds; those closes are counted and logged as one line a minute
  (:mod:`.closed`), not one line a connection;
- a request line or header line over 16 KiB answered 414 or 431, in JSON
  (Twisted would close the connection without a word);
- a form body (``application/x-www-form-urlencoded``) of FORM_IN_STEPS bytes or more decoded a step per
  turn of the reactor (:mod:`.forms`), not in one call (a ``schedule.json`` of 60,000 start URLs is 3.5 MB
  to decode, 0.3 s of pure Python), on the reactor thread (a decode on a thread holds the GIL: the reactor
  waits for it all the same);
- a ``multipart/form-data`` body decoded here (a big one in steps too), with the standard library's MIME
  parser as Twisted uses it, so a malformed one gets a JSON 400 where Twisted answers a bare one;
- requests logged at debug level, without query strings; no tracebacks shown.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any, cast

from twisted.internet import defer, task
from twisted.internet.interfaces import IDelayedCall, IReactorTime, ITCPTransport
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http, server
from twisted.web.resource import IResource

from spiderd.core.net.closed import DeadlineCloses
from spiderd.core.net.forms import Form, MalformedForm, decode_form, decode_multipart

log = Logger()
_ENCODER = json.JSONEncoder(ensure_ascii=True)
HEADER_TIMEOUT = 30.0  # seconds a connection may take over a request's headers ([api] / [worker] header_timeout)
IDLE_TIMEOUT = 60.0  # seconds a connection may stay idle ([api] / [worker] idle_timeout)
BACKLOG = 1024  # each API's listen queue ([api] / [worker] backlog; Twisted's default is 50)
FORM_IN_STEPS = 64 * 1024  # form bodies at least this long are decoded a step per turn of the reactor
URLENCODED, MULTIPART = b"application/x-www-form-urlencoded", b"multipart/form-data"


def json_body(data: dict[str, Any], node_name: str) -> bytes:
    """The bytes of an answer: ``data`` plus ``node_name``, one line of JSON."""
    return _ENCODER.encode({**data, "node_name": node_name}).encode("ascii") + b"\n"


def error_body(message: str, node_name: str) -> bytes:
    """The bytes of an error answer."""
    return json_body({"status": "error", "message": message}, node_name)


class ApiError(Exception):
    """An error answer ``{"status": "error", "message": ...}``; ``code`` None: the API's own default (400 for the
    node's API; 200 for the worker's, as Scrapyd answers a client's mistake)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class JsonSite(server.Site):
    """A Site for a JSON API: capped bodies, header and idle deadlines, quiet logs."""

    noisy = False

    def __init__(self, resource: IResource, max_body_size: int, node_name: str, label: str, *,
                 header_timeout: float = HEADER_TIMEOUT, idle_timeout: float = IDLE_TIMEOUT,
                 reactor: IReactorTime | None = None) -> None:
        super().__init__(resource, timeout=idle_timeout, reactor=reactor)
        clock = self.reactor
        self.steps = task.Cooperator(terminationPredicateFactory=lambda: _one_step,
                                     scheduler=lambda work: clock.callLater(0, work))  # big form bodies' decodes
        self.protocol = _DeadlineChannel  # type: ignore[assignment]  # Site's attribute is a class
        self.requestFactory = CappedRequest
        self.max_body_size = max_body_size
        self.node_name = node_name
        self.label = label
        self.header_timeout = header_timeout
        self.closes = DeadlineCloses(clock, label, header_timeout, idle_timeout)
        self.displayTracebacks = False

    def stopFactory(self) -> None:
        """The port closed: log the deadline closes not summed up yet."""
        self.closes.flush()
        super().stopFactory()

    def log(self, request: Any) -> None:
        log.debug("{label}: {method} {path} {code}", label=self.label, method=_text(request.method),
                  path=_text(request.path), code=request.code)


class _DeadlineChannel(http.HTTPChannel):
    """An HTTPChannel that closes a connection whose request headers do not arrive in time, and says so when a
    line of them is too long."""

    _deadline: IDelayedCall | None = None
    _in_body = False
    _head_lines = 0  # lines of the current request's head received so far

    def connectionMade(self) -> None:
        super().connectionMade()
        self._headers_due()

    def dataReceived(self, data: bytes) -> None:
        if self._deadline is None and not self._in_body:
            self._headers_due()
        super().dataReceived(data)

    def lineReceived(self, line: bytes) -> None:
        self._head_lines += 1
        super().lineReceived(line)

    def lineLengthExceeded(self, line: bytes) -> None:
        """A request line (414) or header line (431) over ``MAX_LENGTH`` bytes: answer in JSON, then close."""
        status, what = (b"414 URI Too Long", "request line") if not self._head_lines else (
            b"431 Request Header Fields Too Large", "header line")
        message = f"{what} too long: the limit is {self.MAX_LENGTH} bytes"
        transport = self.transport
        if transport is not None:
            transport.write(raw_answer(status, message, self._site().node_name))
        self.loseConnection()

    def allHeadersReceived(self) -> None:
        self._cancel_deadline()
        self._in_body = True
        self._head_lines = 0
        super().allHeadersReceived()

    def allContentReceived(self) -> None:
        self._in_body = False
        super().allContentReceived()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._cancel_deadline()
        super().connectionLost(reason)

    def _site(self) -> JsonSite:
        return cast(JsonSite, self.factory)  # the JsonSite that made it (its protocol)

    def _headers_due(self) -> None:
        self._deadline = self.callLater(self._site().header_timeout, self._too_slow)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        self._site().closes.closed("headers")
        cast(ITCPTransport, self.transport).abortConnection()  # a connected channel: TCP (or a UNIX socket)

    def timeoutConnection(self) -> None:
        """Idle too long: counted in the site's summary, and closed as Twisted does (aborted if the client does
        not let go within ``abortTimeout``), without Twisted's line a connection."""
        self._site().closes.closed("idle")
        if self.abortTimeout is not None:
            self._abortingCall = self.callLater(self.abortTimeout, self.forceAbortClient)
        self.loseConnection()


class CappedRequest(server.Request):
    """A request whose body may not exceed its site's ``max_body_size``."""

    _refused = False
    _received = 0
    _drain_limit = 0
    _form_type: Sequence[bytes] | None = None  # the content type of a form body decoded here, until it is

    def gotLength(self, length: int | None) -> None:
        cap = self._cap()
        super().gotLength(length if length is None or length <= cap else 0)
        if length is not None and length > cap:
            self._refuse(length if length <= 2 * cap else 0)

    def handleContentChunk(self, data: bytes) -> None:
        if self._refused:
            self._received += len(data)
            if self._received > self._drain_limit:
                self.channel.loseConnection()
            return
        self._received += len(data)
        if self._received > self._cap():
            self._refuse(0)
            return
        super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if self._refused:
            self.channel.loseConnection()
            return
        if command == b"POST" and self._decodes_form():
            self._form_type = self.requestHeaders.getRawHeaders(b"content-type")
            self.requestHeaders.removeHeader(b"content-type")  # Twisted then leaves the body alone
        super().requestReceived(command, path, version)

    def process(self) -> None:
        """Go on with the request; a form body decoded here is decoded first (a big one a step per turn of the
        reactor)."""
        if self._form_type is None:
            super().process()
            return
        ctype = self._form_type[0]
        self.requestHeaders.setRawHeaders(b"content-type", self._form_type)
        self._form_type = None
        content = self.content
        assert content is not None, "a request's body is read before it is processed"
        content.seek(0)
        body = content.read()
        content.seek(0)
        args: Form = {}
        decoding = self._decoding(ctype, body, args)
        if len(body) >= FORM_IN_STEPS:
            done = self._site().steps.coiterate(decoding)
        else:  # a small body: in one call, as Twisted would
            done = defer.maybeDeferred(deque, decoding, 0)
        done.addCallbacks(lambda _: self._form_decoded(args), self._form_failed)

    def _decoding(self, ctype: bytes, body: bytes, args: Form) -> Iterator[None]:
        """The steps of the body's decode (multipart or urlencoded), until the client goes away."""
        kind = _media_type([ctype])
        for step in decode_multipart(ctype, body, args) if kind == MULTIPART else decode_form(body, args):
            if self.channel is None:
                return
            yield step

    def _form_decoded(self, args: Form) -> None:
        merged: dict[bytes, list[bytes]] = dict(cast(Any, self.args) or {})
        merged.update(args)  # as Twisted does: the body's fields over the query string's
        self.args = cast(Any, merged)
        if self.channel is not None:
            super().process()

    def _form_failed(self, failure: Failure) -> None:
        if self.channel is None:
            return
        if failure.check(MalformedForm):  # Twisted would answer a bare "400 Bad Request"; say why, in JSON
            self._raw_answer(b"400 Bad Request", failure.getErrorMessage())
        else:
            log.failure("Decoding a form body", failure)
            self._raw_answer(b"500 Internal Server Error", "the form body could not be decoded")
        self.channel.loseConnection()

    def _decodes_form(self) -> bool:
        """True when this request decodes its POST body itself (Twisted then leaves it alone): a multipart one
        (not empty), or an urlencoded one of FORM_IN_STEPS bytes or more."""
        kind = _media_type(self.requestHeaders.getRawHeaders(b"content-type"))
        if kind == MULTIPART:
            return self._received > 0
        return kind == URLENCODED and self._received >= FORM_IN_STEPS

    def _cap(self) -> int:
        return self._site().max_body_size

    def _site(self) -> JsonSite:
        return cast(JsonSite, self.channel.factory)  # the JsonSite whose requestFactory this is

    def _refuse(self, drain: int) -> None:
        """Answer 413 now; read and drop up to ``drain`` body bytes (0: close at once)."""
        self._refused = True
        self._received = 0
        self._drain_limit = drain
        self.requestHeaders.removeHeader(b"expect")  # no "100 Continue" after the answer
        cap = self._cap()
        channel: Any = self.channel
        log.warn("{label}: refused a request body over {cap} bytes from {peer}", cap=cap,
                 label=self._site().label, peer=str(channel.transport.getPeer()))
        self._raw_answer(b"413 Payload Too Large", f"request body too large: the limit is {cap} bytes")
        if not drain:
            self.channel.loseConnection()

    def _raw_answer(self, status: bytes, message: str) -> None:
        """An error answer written straight to the connection (the request was never parsed)."""
        channel: Any = self.channel
        channel.transport.write(raw_answer(status, message, self._site().node_name))


def raw_answer(status: bytes, message: str, node_name: str) -> bytes:
    """The bytes of a whole error answer (status line, headers, JSON body) for a request never parsed."""
    body = error_body(message, node_name)
    head = b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
    return head % (status, len(body)) + body


def _media_type(ctype: Sequence[bytes] | None) -> bytes:
    """The media type of a Content-Type header's first value, lower case, without its parameters."""
    return (ctype or [b""])[0].partition(b";")[0].strip().lower()


def _one_step() -> bool:
    """A Cooperator's slice: one step of one decode per turn of the reactor, whatever the clock says."""
    return True


def _text(value: bytes | None) -> str:
    return (value or b"").decode("latin-1")
