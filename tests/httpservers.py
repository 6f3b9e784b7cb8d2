"""Servers as they are, for the tests: Python's http.server in a thread, and a raw HTTP server on the reactor."""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from twisted.internet import defer, threads
from twisted.internet.defer import Deferred
from twisted.internet.protocol import Factory, Protocol


class HTTP10Handler(SimpleHTTPRequestHandler):
    """http.server as it comes: HTTP/1.0, the connection closed after each answer, no ``Connection`` header."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


class ClosingHandler(HTTP10Handler):
    """HTTP/1.1 answers that promise keep-alive, then a close: a server whose keep-alive timeout is zero."""

    protocol_version = "HTTP/1.1"

    def handle_one_request(self) -> None:
        super().handle_one_request()
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128
    connections = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        self.connections += 1  # only the serving thread counts
        super().process_request(request, client_address)


class ThreadedServer:
    """``handler`` serving ``directory`` on 127.0.0.1 from a thread; ``stop()`` waits for it off the reactor."""

    def __init__(self, directory: str | Path, handler: type[SimpleHTTPRequestHandler]) -> None:
        self.httpd = _Server(("127.0.0.1", 0), functools.partial(handler, directory=str(directory)))
        self.root = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="test-httpd", daemon=True)
        self._thread.start()

    @property
    def connections(self) -> int:
        """Connections accepted so far."""
        return self.httpd.connections

    def stop(self) -> Deferred[None]:
        def stop() -> None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self._thread.join()

        return threads.deferToThread(stop)


ANSWERS = {
    "/new": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "/close": b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
    "/old": b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "/old-moved": b"HTTP/1.0 302 Found\r\nLocation: /old\r\nContent-Length: 0\r\n\r\n",
}


class _RawHTTP(Protocol):
    factory: "RawServer"

    def connectionMade(self) -> None:
        self.paths: list[str] = []
        self._buffer = b""
        self.factory.connections.append(self.paths)
        self.factory.open.append(self)

    def dataReceived(self, data: bytes) -> None:
        self._buffer += data
        while b"\r\n\r\n" in self._buffer:
            head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
            path = head.split(b" ", 2)[1].decode()
            self.paths.append(path)
            if path == "/reset":
                self.transport.abortConnection()
                return
            self.transport.write(ANSWERS[path])

    def connectionLost(self, reason: Any = None) -> None:
        self.factory.open.remove(self)
        waiting, self.factory.waiting = self.factory.waiting, []
        for d in waiting:
            d.callback(None)


class RawServer(Factory):
    """Answers each request with ``ANSWERS[path]`` as written and never closes first; ``/reset`` aborts unanswered.

    ``connections`` lists, per connection accepted, the paths requested on it.
    """

    protocol = _RawHTTP
    noisy = False

    def __init__(self) -> None:
        self.connections: list[list[str]] = []
        self.open: list[_RawHTTP] = []
        self.waiting: list[Deferred[None]] = []

    def all_closed(self) -> Deferred[None]:
        """Fires when no connection is open (at once if none is)."""
        if not self.open:
            return defer.succeed(None)
        d: Deferred[None] = Deferred()
        self.waiting.append(d)
        return d.addCallback(lambda _: self.all_closed())

    def abort_all(self) -> None:
        for connection in list(self.open):
            connection.transport.abortConnection()
