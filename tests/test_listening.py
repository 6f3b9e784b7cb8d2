"""Where and how the APIs listen: endpoint strings (a UNIX socket), the listen backlog, the header and idle
deadlines as settings, and the summary of the connections those deadlines close; real ports on 127.0.0.1."""

from __future__ import annotations

import errno
import json
import select
import shutil
import socket
import subprocess
import tempfile
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, UNIXClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial import unittest
from twisted.web.resource import Resource

from spiderd.config.sections import ApiSection
from spiderd.core.net.serving import JsonSite
from spiderd.ops.web import ApiService, api_service

from .helpers import ClockedReactor
from .webnode import make_node


class Client(Protocol):
    """A raw client: what the server says, and when it closes."""

    def __init__(self) -> None:
        self.data = b""
        self.closed: Deferred[bytes] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.data += data

    def connectionLost(self, reason: Any = None) -> None:
        self.closed.callback(self.data)


class Hello(Resource):
    isLeaf = True

    def render_GET(self, request: Any) -> bytes:
        return b'{"status": "ok"}'


def turn() -> Deferred[None]:
    """One turn of the real reactor (bytes written reach the other side)."""
    d: Deferred[None] = Deferred()
    reactor.callLater(0.01, d.callback, None)
    return d


class ApiCase(unittest.TestCase):
    """An API of a fresh node built from an ``[api]`` section, its timers on a Clock."""

    def start(self, **api: Any) -> ApiService:
        self.clock = Clock()
        self.clock.advance(1_000_000)
        service = api_service(ApiSection(**api), ClockedReactor(reactor, self.clock), make_node(self.clock))
        service.startService()
        self.addCleanup(service.stopService)
        return service

    @defer.inlineCallbacks
    def connect(self, service: ApiService) -> Any:
        host, port = service.address
        client = Client()
        yield connectProtocol(TCP4ClientEndpoint(reactor, host, port), client)
        return client


class UnixSocketTests(ApiCase):
    """``listen = "unix:PATH"``."""

    @defer.inlineCallbacks
    def test_the_api_answers_on_a_unix_socket(self) -> Any:
        """An API listening on a UNIX socket answers there (HTTP over the socket) and logs where it listens."""
        directory = tempfile.mkdtemp(prefix="spiderd-sock-")
        self.addCleanup(shutil.rmtree, directory, True)
        path = f"{directory}/api.sock"
        with capturedLogs() as events:
            service = self.start(listen=f"unix:{path}:mode=600")
        self.assertEqual(service.url, f"unix:{path}")
        self.assertIn(f"API on unix:{path} ", [formatEvent(e) for e in events if "API on" in formatEvent(e)][0])
        client = Client()
        yield connectProtocol(UNIXClientEndpoint(reactor, path), client)
        client.transport.write(b"GET /api/status HTTP/1.0\r\nHost: localhost\r\n\r\n")
        answer = yield client.closed
        head, _, body = answer.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.0 200"), head)
        self.assertEqual(json.loads(body)["role"], "all")


class BacklogTests(ApiCase):
    """``backlog``: the listen queue the kernel keeps for connections not accepted yet."""

    timeout = 60

    def queue_limit(self, port: int) -> int:
        """The kernel's backlog of the listening socket on ``port`` (``ss``: Send-Q of a LISTEN socket)."""
        ss = shutil.which("ss")
        if ss is None:
            raise unittest.SkipTest("ss (iproute2) is not installed: the kernel's backlog cannot be read")
        out = subprocess.run([ss, "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
        return int(out.split()[2])

    def test_the_backlog_reaches_listen(self) -> None:
        """The API listens with a queue of 1024 by default (Twisted's is 50), and of ``backlog`` when set; the
        kernel caps it at net.core.somaxconn."""
        self.assertEqual(self.queue_limit(self.start(port=0).address[1]), min(1024, somaxconn()))
        self.assertEqual(self.queue_limit(self.start(port=0, backlog=300).address[1]), min(300, somaxconn()))

    @defer.inlineCallbacks
    def test_a_burst_of_200_connects_is_queued(self) -> Any:
        """200 connects at once while the API accepts none all complete their handshake (they wait in the
        queue), and are all served once it accepts again: with a backlog of 50 most would be dropped."""
        count = min(200, somaxconn())  # 128 on kernels before 5.4
        if count <= 51:
            raise unittest.SkipTest(f"net.core.somaxconn is {count}: no queue beyond Twisted's 50")
        service = self.start(port=0)
        assert service.port is not None
        service.port.stopReading()  # type: ignore[attr-defined]  # the reactor accepts nothing for now
        built: list[Any] = []
        build = service.site.buildProtocol
        service.site.buildProtocol = lambda addr: built.append(addr) or build(addr)  # type: ignore[method-assign]
        clients = []
        for _ in range(count):
            client = socket.socket()
            self.addCleanup(client.close)
            client.setblocking(False)
            self.assertIn(client.connect_ex(service.address), (0, errno.EINPROGRESS))
            clients.append(client)
        poll = select.poll()
        for client in clients:
            poll.register(client, select.POLLOUT)
        while len(poll.poll(0)) < count:
            yield turn()  # until every handshake is done (a dropped SYN is sent again only after a second)
        self.assertEqual([c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) for c in clients], [0] * count)
        service.port.startReading()  # type: ignore[attr-defined]
        while len(built) < count:
            yield turn()


def somaxconn() -> int:
    """The kernel's cap on a listen queue (net.core.somaxconn)."""
    with open("/proc/sys/net/core/somaxconn") as f:
        return int(f.read())


class DeadlineSettingsTests(ApiCase):
    """``header_timeout`` and ``idle_timeout``, on the API's Clock."""

    @defer.inlineCallbacks
    def closed_after(self, client: Client, seconds: float) -> Any:
        """What ``client`` received, once closed when the clock has turned ``seconds`` (not 0.1 s earlier)."""
        yield turn()
        self.clock.advance(seconds - 0.1)
        yield turn()
        self.assertFalse(client.closed.called)
        self.clock.advance(0.1)
        return (yield client.closed)

    @defer.inlineCallbacks
    def test_header_deadline_is_the_setting(self) -> Any:
        """A connection without complete request headers is closed ``header_timeout`` seconds after it began,
        not before."""
        service = self.start(port=0, header_timeout=5, idle_timeout=100)
        client = yield self.connect(service)
        client.transport.write(b"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        self.assertEqual((yield self.closed_after(client, 5)), b"")

    @defer.inlineCallbacks
    def test_idle_deadline_is_the_setting(self) -> Any:
        """A connection that got its answer and then says nothing is closed after ``idle_timeout`` seconds,
        not before."""
        service = self.start(port=0, header_timeout=100, idle_timeout=7)
        client = yield self.connect(service)
        client.transport.write(b"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        while b'"role"' not in client.data:
            yield turn()
        yield self.closed_after(client, 7)


class DeadlineSummaryTests(unittest.TestCase):
    """The connections closed at a deadline are logged as one line a while."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.site = JsonSite(Hello(), 1000, "node", "Test API", header_timeout=30, idle_timeout=60,
                             reactor=ClockedReactor(reactor, self.clock))
        self.port = reactor.listenTCP(0, self.site, interface="127.0.0.1")
        self.addCleanup(lambda: self.port.stopListening() if self.port is not None else None)

    @defer.inlineCallbacks
    def connect(self, request: bytes) -> Any:
        client = Client()
        yield connectProtocol(TCP4ClientEndpoint(reactor, "127.0.0.1", self.port.getHost().port), client)
        client.transport.write(request)
        return client

    @defer.inlineCallbacks
    def test_one_line_a_minute_not_one_a_connection(self) -> Any:
        """Five slow clients and two idle ones are closed at their deadlines without a line each; a minute after
        the first close one line gives the counts, and nothing more is logged while nothing more is closed."""
        with capturedLogs() as events:
            slow, idle = [], []
            for _ in range(5):
                slow.append((yield self.connect(b"GET / HTTP/1.1\r\n")))
            for _ in range(2):
                idle.append((yield self.connect(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")))
            while not all(b'"ok"' in c.data for c in idle):
                yield turn()
            self.clock.advance(30)
            for client in slow:
                yield client.closed
            self.clock.advance(30)
            for client in idle:
                yield client.closed
            lines = [formatEvent(e) for e in events]
            self.assertEqual([line for line in lines if "closed" in line or "Timing out" in line], [])
            self.clock.advance(120)  # the line 60 s after the first close, and no other
        summaries = [formatEvent(e) for e in events if "closed" in formatEvent(e)]
        self.assertEqual(summaries, [
            "Test API: closed 7 connections at a deadline in 60 s: 5 sent no complete request headers within 30 s, "
            "2 stayed idle for 60 s"])

    @defer.inlineCallbacks
    def test_closing_the_port_logs_what_is_counted(self) -> Any:
        """When the port closes, the closes counted since the last line are logged at once."""
        client = yield self.connect(b"GET / HTTP/1.1\r\n")
        self.clock.advance(30)
        yield client.closed
        with capturedLogs() as events:
            port, self.port = self.port, None
            yield port.stopListening()
        self.assertEqual([formatEvent(e) for e in events if "closed" in formatEvent(e)], [
            "Test API: closed 1 connection at a deadline in 0 s: 1 sent no complete request headers within 30 s"])
        self.assertEqual(self.clock.getDelayedCalls(), [])
