"""The one Site of spiderd's APIs (spiderd.core.net.serving): deadlines for headers and idle connections."""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import quote_from_bytes

from twisted.internet import defer, reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.trial import unittest
from twisted.web.http import parse_qs
from twisted.web.resource import Resource

from spiderd.core.net.forms import STEP
from spiderd.core.net.serving import FORM_IN_STEPS, JsonSite

from .helpers import ClockedReactor


class Hello(Resource):
    isLeaf = True

    def render_GET(self, request: Any) -> bytes:
        return b'{"status": "ok"}'


class FormEcho(Resource):
    """Answers a POST with ok, and keeps the form it was given and the thread that rendered it."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[dict[bytes, list[bytes]], str]] = []

    def render_POST(self, request: Any) -> bytes:
        self.forms.append((dict(request.args), threading.current_thread().name))
        return b'{"status": "ok"}'


class Client(Protocol):
    """A raw client: what the server says, and when it closes."""

    def __init__(self) -> None:
        self.data = b""
        self.closed: Deferred[None] = Deferred()
        self.answered: Deferred[None] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.data += data
        if b'"ok"' in self.data and not self.answered.called:
            self.answered.callback(None)

    def connectionLost(self, reason: Any = None) -> None:
        self.closed.callback(None)


class DeadlineTests(unittest.TestCase):
    """A real port; the Site's timers on a Clock."""

    def setUp(self) -> None:
        self.clock = Clock()
        site = JsonSite(Hello(), 1000, "node", "Test API", header_timeout=30, idle_timeout=60,
                        reactor=ClockedReactor(reactor, self.clock))
        self.port = reactor.listenTCP(0, site, interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)

    @defer.inlineCallbacks
    def connect(self) -> Any:
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", self.port.getHost().port)
        client = Client()
        yield connectProtocol(endpoint, client)
        return client

    @defer.inlineCallbacks
    def test_headers_that_never_finish_are_cut(self) -> Any:
        """A client sending headers a line at a time (slowloris) is closed at the header deadline, however
        often it sends a byte."""
        client = yield self.connect()
        client.transport.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for _ in range(5):
            yield deferLater()
            self.clock.advance(10)  # 50 s in all, a line every 10 s: the idle timer never fires
            client.transport.write(b"X-Slow: 1\r\n")
        yield client.closed
        self.assertEqual(client.data, b"")

    @defer.inlineCallbacks
    def test_a_prompt_request_is_answered_and_idle_connections_close(self) -> Any:
        """Headers in time get their answer; the connection then stays open until the idle timeout."""
        client = yield self.connect()
        client.transport.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        yield client.answered
        self.clock.advance(59)
        yield deferLater()
        self.assertFalse(client.closed.called)
        self.clock.advance(2)
        yield client.closed


class FormTests(unittest.TestCase):
    """A big form body on a real port; the Site's calls on a Clock, and its calls for the next turn counted."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.turns = 0  # calls made for the next turn of the reactor (callLater(0))
        clocked = ClockedReactor(reactor, self.clock)
        clocked.callLater = self.call_later
        self.echo = FormEcho()
        site = JsonSite(self.echo, 4 * FORM_IN_STEPS, "node", "Test API", reactor=clocked)
        self.channels: list[Any] = []  # the server's side of each connection
        build = site.buildProtocol

        def built(addr: Any) -> Any:
            self.channels.append(build(addr))
            return self.channels[-1]

        site.buildProtocol = built  # type: ignore[method-assign]
        self.port = reactor.listenTCP(0, site, interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)

    def call_later(self, delay: float, f: Any, *args: Any, **kwargs: Any) -> Any:
        self.turns += delay == 0
        return self.clock.callLater(delay, f, *args, **kwargs)

    def due(self) -> bool:
        """Something waits for the next turn of the site's reactor (a step of a decode)."""
        return any(call.getTime() <= self.clock.seconds() for call in self.clock.getDelayedCalls())

    @defer.inlineCallbacks
    def post(self, body: bytes) -> Any:
        """A client that has sent ``body`` as a form to the site, once the site has it all."""
        endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", self.port.getHost().port)
        client = Client()
        yield connectProtocol(endpoint, client)
        client.transport.write(b"POST /schedule.json HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/"
                               b"x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        while not self.due() and not self.echo.forms:
            yield deferLater()  # the body reaches the server
        return client

    @defer.inlineCallbacks
    def test_a_big_form_is_decoded_a_step_per_turn(self) -> Any:
        """A form of FORM_IN_STEPS bytes or more is not decoded when it arrives but a step per turn of the
        reactor, on the reactor thread, and the resource gets the fields as Twisted decodes them (escapes,
        ";", non-ASCII)."""
        value = quote_from_bytes("caf\u00e9 \"/%".encode() * (FORM_IN_STEPS // 8)).encode()
        body = b"project=spiderd;spider=shop&setting=A%3D" + value + b"&empty=&bare"
        client = yield self.post(body)
        self.assertEqual(self.echo.forms, [])
        self.clock.advance(0)  # every turn the decode asks for
        yield client.answered
        self.assertGreaterEqual(self.turns, len(body) // STEP)
        self.assertEqual(self.echo.forms, [(parse_qs(body, 1), threading.main_thread().name)])
        client.transport.loseConnection()
        yield client.closed

    @defer.inlineCallbacks
    def test_a_decode_stops_when_its_client_goes_away(self) -> Any:
        """A client that closes its connection in the middle of the decode ends the decode: no more turns, no
        answer."""
        client = yield self.post(b"setting=" + b"%41" * FORM_IN_STEPS)
        client.transport.loseConnection()
        yield client.closed
        while not self.channels[0].transport.disconnected:
            yield deferLater()  # until the server has seen the connection closed
        turns = self.turns
        self.clock.advance(0)
        self.assertEqual((self.turns - turns, self.echo.forms), (0, []))


def deferLater() -> Deferred[None]:
    """One turn of the real reactor (the bytes written reach the server)."""
    d: Deferred[None] = Deferred()
    reactor.callLater(0.01, d.callback, None)
    return d

