"""Raw HTTP peers on loopback that write exact bytes: scripted answers, the late-bytes server of issue 35, a server
that holds its answers, and a plain proxy that passes an origin's bytes through as they come."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from twisted.internet import defer, reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import Factory, Protocol

FIRST = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789"  # /first's answer: whole, and honest
STRAY = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\ninjected"  # what comes 50 ms after it, unasked
LATE = 0.05


def page(path: bytes) -> bytes:
    """An honest answer naming ``path``: ``page of /x``."""
    body = b"page of " + path
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


class Peers(Factory):
    """A server's connections: the paths asked on each, waiters for the requests to come and for all to close."""

    noisy = False

    def __init__(self) -> None:
        self.connections: list[list[bytes]] = []
        self.open: list[Protocol] = []
        self._waiters: list[tuple[Callable[[], bool], Deferred[None]]] = []

    def when(self, predicate: Callable[[], bool]) -> Deferred[None]:
        """Fires once ``predicate()`` holds (checked at each request and each close)."""
        d: Deferred[None] = Deferred()
        self._waiters.append((predicate, d))
        self.changed()
        return d

    def asked(self, count: int) -> Deferred[None]:
        """Fires once ``count`` requests have come in all."""
        return self.when(lambda: sum(map(len, self.connections)) >= count)

    def all_closed(self) -> Deferred[None]:
        return self.when(lambda: not self.open)

    def changed(self) -> None:
        for waiter in list(self._waiters):
            if waiter[0]():
                self._waiters.remove(waiter)
                waiter[1].callback(None)


class _Peer(Protocol):
    """Splits requests (heads only: GETs), records their paths, and hands each to ``answer``."""

    factory: Peers

    def connectionMade(self) -> None:
        self.paths: list[bytes] = []
        self.buffer = b""
        self.factory.connections.append(self.paths)
        self.factory.open.append(self)

    def dataReceived(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            path = head.split(b" ", 2)[1]
            self.paths.append(path)
            self.answer(path)
            self.factory.changed()

    def answer(self, path: bytes) -> None:
        raise NotImplementedError

    def connectionLost(self, reason: Any = None) -> None:
        self.factory.open.remove(self)
        self.factory.changed()


class _Scripted(_Peer):
    def answer(self, path: bytes) -> None:
        written, then = self.factory.answers[path]  # type: ignore[attr-defined]
        transport: Any = self.transport
        if then == "reset":  # the bytes go out first (abortConnection drops what is not sent yet), then a reset
            transport.getHandle().sendall(written)
            transport.abortConnection()
            return
        transport.write(written)
        if then == "close":
            transport.loseConnection()


class Scripted(Peers):
    """Answers each path with the exact bytes ``answers[path]`` gives, then keeps the connection ("keep"),
    closes it ("close") or resets it once they are sent ("reset")."""

    protocol = _Scripted

    def __init__(self, answers: dict[bytes, tuple[bytes, str]]) -> None:
        super().__init__()
        self.answers = answers


class _Late(_Peer):
    def connectionMade(self) -> None:
        super().connectionMade()
        self.queue: list[bytes] = []
        self.late = False  # the stray bytes are still to come: later answers wait for them

    def answer(self, path: bytes) -> None:
        self.queue.append(path)
        self._answer_queued()

    def _answer_queued(self) -> None:
        while self.queue and not self.late:
            path = self.queue.pop(0)
            if path == b"/first":
                self.transport.write(FIRST)  # type: ignore[union-attr]
                self.late = True
                self.factory.clock.callLater(LATE, self._stray)  # type: ignore[attr-defined]
            else:
                self.transport.write(page(path))  # type: ignore[union-attr]

    def _stray(self) -> None:
        self.transport.write(STRAY)  # type: ignore[union-attr]  # (nothing, once closed)
        self.late = False
        self._answer_queued()


class LateBytes(Peers):
    """The server of issue 35: ``/first`` is a whole ``Content-Length: 10`` answer, and ``LATE`` seconds later (on
    ``clock``) an unasked answer (``STRAY``) follows on the same connection; it works its requests in turn, so an
    answer asked meanwhile comes after those bytes.  Other paths get ``page(path)`` at once."""

    protocol = _Late

    def __init__(self, clock: IReactorTime) -> None:
        super().__init__()
        self.clock = clock


class _Held(_Peer):
    def answer(self, path: bytes) -> None:
        self.factory.held.append((self, path))  # type: ignore[attr-defined]


class Held(Peers):
    """Answers nothing until ``release()``, then ``page(path)`` to every request held."""

    protocol = _Held

    def __init__(self) -> None:
        super().__init__()
        self.held: list[tuple[_Held, bytes]] = []

    def release(self) -> None:
        held, self.held = self.held, []
        for peer, path in held:
            peer.transport.write(page(path))  # type: ignore[union-attr]


class _Up(Protocol):
    """The pipe's connection to an origin: whatever comes goes back to the client as it is."""

    def __init__(self, front: _Pipe) -> None:
        self.front = front

    def dataReceived(self, data: bytes) -> None:
        self.front.transport.write(data)  # type: ignore[union-attr]
        self.front.factory.relayed.append(data)
        self.front.factory.changed()

    def connectionLost(self, reason: Any = None) -> None:
        if self.front.transport is not None:
            self.front.transport.loseConnection()


class _Pipe(_Peer):
    """A client's connection to the pipe: each request goes to its origin (one connection per origin)."""

    factory: Pipe

    def connectionMade(self) -> None:
        super().connectionMade()
        self.ups: dict[str, Deferred[_Up]] = {}

    def dataReceived(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            method, uri, rest = head.split(b" ", 2)
            parts = urlsplit(uri.decode("ascii"))
            self.paths.append(uri)
            self._send(parts.netloc, method + b" " + parts.path.encode() + b" " + rest + b"\r\n\r\n")
            self.factory.changed()

    def _send(self, origin: str, request: bytes) -> None:
        up = self.ups.get(origin)
        if up is None:
            host, _, port = origin.rpartition(":")
            up = self.ups[origin] = connectProtocol(TCP4ClientEndpoint(reactor, host, int(port)), _Up(self))
        up.addCallback(_write, request)

    def connectionLost(self, reason: Any = None) -> None:
        for up in self.ups.values():
            up.addCallback(_close)
        super().connectionLost(reason)


def _write(up: _Up, data: bytes) -> _Up:
    up.transport.write(data)  # type: ignore[union-attr]
    return up


def _close(up: _Up) -> _Up:
    up.transport.loseConnection()  # type: ignore[union-attr]
    return up


class Pipe(Peers):
    """A plain HTTP proxy with no framing of its own: an origin's bytes come back as they come (a stray answer
    included), on the client connection that asked that origin.  ``connections`` lists the absolute URIs asked on
    each client connection; ``relayed`` every piece of bytes passed back."""

    protocol = _Pipe

    def __init__(self) -> None:
        super().__init__()
        self.relayed: list[bytes] = []

    def passed(self, data: bytes) -> Deferred[None]:
        """Fires once ``data`` has been passed back to a client."""
        return self.when(lambda: any(data in piece for piece in self.relayed))


def listen(factory: Factory, address: str = "127.0.0.1") -> Any:
    """``factory`` listening on ``address``, a free port (stop the port when done)."""
    return reactor.listenTCP(0, factory, interface=address)


def closed(*peers: Peers) -> Deferred[Any]:
    """Fires when every connection of ``peers`` is closed."""
    return defer.gatherResults([peer.all_closed() for peer in peers])
