"""The worker's HTTP plumbing: a Site whose requests refuse bodies over a size cap, JSON answers, basic auth.

Twisted reads a whole request body (to memory or a temp file) before any
resource sees it, so the cap is enforced where the body arrives: a declared
``Content-Length`` over the cap is refused as soon as the headers are in, a
chunked body as soon as it passes the cap.  The refusal is a ``413`` with a
JSON body and ``Connection: close``; the rest of a body that is at most twice
the cap is read and dropped first (so the client sees the answer rather than a
reset), anything bigger is not read at all.
"""

from __future__ import annotations

import hmac
import json
from typing import Any

from twisted.logger import Logger
from twisted.web import http, server

log = Logger()
_ENCODER = json.JSONEncoder(ensure_ascii=True)


class ApiError(Exception):
    """An error answer: ``{"status": "error", "message": ...}`` with an HTTP code (200, as Scrapyd, by default)."""

    def __init__(self, message: str, code: int = http.OK) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def json_body(data: dict[str, Any], node_name: str) -> bytes:
    """The bytes of an answer: ``data`` plus ``node_name``, one line of JSON."""
    return _ENCODER.encode({**data, "node_name": node_name}).encode("ascii") + b"\n"


def error_body(message: str, node_name: str) -> bytes:
    """The bytes of an error answer."""
    return json_body({"status": "error", "message": message}, node_name)


def check_credentials(request: server.Request, username: str, password: str) -> bool:
    """True if the request carries these basic-auth credentials (compared in constant time)."""
    user_ok = hmac.compare_digest(request.getUser(), username.encode("utf-8"))
    password_ok = hmac.compare_digest(request.getPassword(), password.encode("utf-8"))
    return user_ok and password_ok


class WorkerSite(server.Site):
    """The API's Site: capped request bodies, no access log lines with query strings."""

    noisy = False
    label = "Worker API"  # in log lines

    def __init__(self, resource: Any, max_body_size: int, node_name: str) -> None:
        super().__init__(resource)
        self.requestFactory = CappedRequest
        self.max_body_size = max_body_size
        self.node_name = node_name
        self.displayTracebacks = False

    def log(self, request: Any) -> None:
        log.debug("Worker API: {method} {path} {code}", method=_text(request.method),
                  path=_text(request.path), code=request.code)


class CappedRequest(server.Request):
    """A request whose body may not exceed its site's ``max_body_size``."""

    _refused = False
    _received = 0
    _drain_limit = 0

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
        if command == b"POST" and _bad_multipart(self):
            # Twisted would answer a bare "400 Bad Request"; say why, in JSON
            self._raw_answer(b"400 Bad Request", "malformed multipart/form-data body")
            self.channel.loseConnection()
            return
        super().requestReceived(command, path, version)

    def _cap(self) -> int:
        return int(getattr(self._site(), "max_body_size", 16 * 1024 * 1024))

    def _site(self) -> Any:
        return getattr(self.channel, "site", None)

    def _refuse(self, drain: int) -> None:
        """Answer 413 now; read and drop up to ``drain`` body bytes (0: close at once)."""
        self._refused = True
        self._received = 0
        self._drain_limit = drain
        self.requestHeaders.removeHeader(b"expect")  # no "100 Continue" after the answer
        cap = self._cap()
        channel: Any = self.channel
        log.warn("{label}: refused a request body over {cap} bytes from {peer}", cap=cap,
                 label=getattr(self._site(), "label", "Worker API"), peer=str(channel.transport.getPeer()))
        self._raw_answer(b"413 Payload Too Large", f"request body too large: the limit is {cap} bytes")
        if not drain:
            self.channel.loseConnection()

    def _raw_answer(self, status: bytes, message: str) -> None:
        """An error answer written straight to the connection (the request was never parsed)."""
        body = error_body(message, str(getattr(self._site(), "node_name", "")))
        head = b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
        channel: Any = self.channel
        channel.transport.write(head % (status, len(body)) + body)


def _bad_multipart(request: server.Request) -> bool:
    """True for a multipart/form-data body Twisted cannot parse (it would answer 400 with no body)."""
    ctype = (request.requestHeaders.getRawHeaders(b"content-type") or [b""])[0]
    if not ctype.lower().lstrip().startswith(b"multipart/form-data"):
        return False
    try:
        from twisted.web.http import _getMultiPartArgs, _MultiPartParseException
    except ImportError:  # a Twisted without them: its own bare 400 stands
        return False
    body: Any = request.content
    end = body.tell()  # requestReceived takes the body's length from the position
    body.seek(0)
    content = body.read()
    body.seek(end)
    if not content:
        return False
    try:
        _getMultiPartArgs(content, ctype)
    except _MultiPartParseException:
        return True
    return False


def _text(value: bytes | None) -> str:
    return (value or b"").decode("latin-1")
