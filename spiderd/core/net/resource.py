"""The JSON resource base of both APIs: routing by path and method, handlers that may return Deferreds,
answers written once (or not at all when the client left), errors as JSON.

A subclass gives ``routes`` (path -> (method, handler)), ``admit`` (auth and the browser guard), how its
answers and errors are encoded, and what a handler is called with.  Handlers return a dict (or a
Deferred of one); an :class:`~.serving.ApiError` is a refusal with its message.
"""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from spiderd.core.net.serving import ApiError

log = Logger()
Route = tuple[bytes, Callable[[Any], Any]]


class JsonResource(Resource):
    """Every endpoint as one leaf resource."""

    isLeaf = True
    label = "API"
    refusal_code = http.BAD_REQUEST  # the code of an ApiError that names none

    def __init__(self) -> None:
        super().__init__()
        self.routes: dict[bytes, Route] = {}

    # -- what a subclass gives ------------------------------------------------------------------------------

    def admit(self, request: Request) -> bytes | None:
        """An answer refusing the request (credentials, the browser guard), or None to go on."""
        return None

    def path_of(self, request: Request) -> bytes:
        return request.path.rstrip(b"/") or b"/"

    def not_found(self, request: Request, path: bytes) -> bytes:
        return self.error(request, f"no such endpoint: {path.decode('latin-1')}", http.NOT_FOUND)

    def wrong_method(self, request: Request, path: bytes, method: bytes) -> bytes | int:
        request.setHeader(b"Allow", method + (b", HEAD" if method == b"GET" else b""))
        message = f"{request.method.decode('latin-1')} not allowed on {path.decode()}: use {method.decode()}"
        return self.error(request, message, http.NOT_ALLOWED)

    def argument(self, request: Request) -> Any:
        """What handlers are called with (the request itself by default)."""
        return request

    def ok(self, request: Request, data: Any) -> bytes | int:
        """The bytes of a handler's answer."""
        raise NotImplementedError

    def error(self, request: Request, message: str, code: int) -> bytes:
        """The bytes of an error answer."""
        raise NotImplementedError

    def unexpected(self, failure: Failure, request: Request) -> bytes:
        """A handler failed with something that is not a refusal: logged, answered 500."""
        log.failure("{label}: {path} failed", failure, label=self.label, path=request.path.decode("latin-1"))
        kind = failure.type.__name__ if failure.type is not None else "Error"
        return self.error(request, f"{kind}: {failure.getErrorMessage()}",
                          http.INTERNAL_SERVER_ERROR)

    # -- dispatch -------------------------------------------------------------------------------------------

    def render(self, request: Request) -> bytes | int:
        refused = self.admit(request)
        if refused is not None:
            return refused
        path = self.path_of(request)
        route = self.routes.get(path)
        if route is None:
            return self.not_found(request, path)
        method, handler = route
        if request.method != method and not (request.method == b"HEAD" and method == b"GET"):
            return self.wrong_method(request, path, method)
        return self.call(request, handler)

    def call(self, request: Request, handler: Callable[[Any], Any]) -> bytes | int:
        """Run ``handler``; a Deferred answer is written when it fires, unless the client has gone."""
        try:
            result = handler(self.argument(request))
        except Exception:
            return self.failed(Failure(), request)
        if not isinstance(result, Deferred):
            return self.ok(request, result)
        gone: list[bool] = []
        request.notifyFinish().addErrback(lambda _: gone.append(True))
        result.addCallback(lambda data: self.ok(request, data))
        result.addErrback(self.failed, request)
        result.addCallback(lambda body: None if gone or body == NOT_DONE_YET else _finish(request, body))
        result.addErrback(lambda f: log.failure("{label}: answering failed", f, label=self.label))
        return NOT_DONE_YET

    def failed(self, failure: Failure, request: Request) -> bytes:
        refusal = failure.value
        if isinstance(refusal, ApiError):
            return self.error(request, refusal.message, refusal.code or self.refusal_code)
        return self.unexpected(failure, request)


def send(request: Request, code: int, content_type: bytes, body: bytes) -> bytes:
    """Set the status and headers of an answer of ``body``; the bytes to return from render (none for HEAD)."""
    request.setResponseCode(code)
    request.setHeader(b"Content-Type", content_type)
    request.setHeader(b"Content-Length", str(len(body)).encode())
    request.setHeader(b"Cache-Control", b"no-store")
    return b"" if request.method == b"HEAD" else body


def _finish(request: Request, body: bytes) -> None:
    request.write(body)
    request.finish()
