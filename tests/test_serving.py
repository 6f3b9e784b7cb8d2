"""The one Site of spiderd's APIs (spiderd.core.net.serving): deadlines for headers and idle connections."""

from __future__ import annotations

from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.trial import unittest
from twisted.web.resource import Resource

from spiderd.core.net.serving import JsonSite, MalformedForm, form_args

from .helpers import ClockedReactor


class Hello(Resource):
    isLeaf = True

    def render_GET(self, request: Any) -> bytes:
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


def deferLater() -> Deferred[None]:
    """One turn of the real reactor (the bytes written reach the server)."""
    d: Deferred[None] = Deferred()
    reactor.callLater(0.01, d.callback, None)
    return d


def test_form_args_reads_multipart_and_urlencoded_bodies() -> None:
    """A multipart/form-data body gives its named parts (a repeated name twice, an unnamed part none), as an
    urlencoded body gives its fields; a multipart body that is not one is MalformedForm."""
    ctype = b"multipart/form-data; boundary=b0"
    parts = [(b'name="setting"', b"A=1"), (b'name="setting"', b"B=2"), (b"filename=x", b"skipped"),
             (b'name="spider"', b"demo\r\nshop")]
    body = b"".join(b"--b0\r\nContent-Disposition: form-data; %s\r\n\r\n%s\r\n" % p for p in parts) + b"--b0--\r\n"
    assert form_args(ctype, body) == {b"setting": [b"A=1", b"B=2"], b"spider": [b"demo\r\nshop"]}
    assert form_args(b"application/x-www-form-urlencoded", b"a=1&a=&b=2") == {b"a": [b"1", b""], b"b": [b"2"]}
    try:
        form_args(ctype, b"garbage")
    except MalformedForm as e:
        assert "multipart" in str(e)
    else:
        raise AssertionError("a body that is not multipart was read")
