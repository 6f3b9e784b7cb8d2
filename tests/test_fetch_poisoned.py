"""A poisoned keep-alive connection (issue 35): bytes a server sends past a whole answer never become another
request's answer, direct, through a plain proxy that passes bytes through, and through a CONNECT tunnel."""

from __future__ import annotations

from typing import Any

from twisted.internet import defer, reactor, ssl
from twisted.internet.protocol import Factory
from twisted.internet.task import Clock
from twisted.trial import unittest
from twisted.web import client

from spiderd.config import settings as cfg
from spiderd.core import status as st
from spiderd.fetch.fetcher import FetchConfig, Fetcher

from .helpers import ClockedReactor
from .rawpeers import LATE, Held, LateBytes, Peers, Pipe, Scripted, closed, listen, page
from .test_fetch_tunnel import ORIGIN, _Relay, self_signed

OUT_OF_STEP = (f"out of step: {len(page(b'/second'))} bytes came past the end of an answer on a reused connection "
               "(it may have been an earlier request's)")


class PoisonedTestCase(unittest.TestCase):
    """The late-bytes server on 127.0.0.1; fetchers whose timers run on the test's Clock, as the server's do."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.late = LateBytes(self.clock)
        self.base = self.serve(self.late)
        self.peers: list[Peers] = [self.late]
        self.tls: Any = None
        self.fetchers: list[Fetcher] = []
        self.addCleanup(self.close_all)

    @defer.inlineCallbacks
    def close_all(self) -> Any:
        """Close every fetcher's pooled connections, then wait for the servers to see every connection close."""
        yield defer.gatherResults([fetcher.close() for fetcher in self.fetchers])
        yield closed(*self.peers)

    def serve(self, peers: Factory, address: str = "127.0.0.1") -> str:
        port = listen(peers, address)
        self.addCleanup(port.stopListening)
        return f"http://{address}:{port.getHost().port}"

    def fetcher(self, sites: list[dict[str, Any]] | None = None) -> Fetcher:
        config = FetchConfig(sites=cfg.from_dict({"sites": sites}).sites if sites else ())
        fetcher = Fetcher(ClockedReactor(reactor, self.clock), config, tls=self.tls)
        self.fetchers.append(fetcher)
        return fetcher

    @defer.inlineCallbacks
    def second_after_late_bytes(self, fetcher: Fetcher, base: str) -> Any:
        """``/first``, then ``/second`` asked before the stray bytes come (they come 50 ms on, then its answer)."""
        first = yield fetcher.fetch(base + "/first")
        self.assertEqual((first.status, first.body), (200, b"0123456789"))
        asked = self.late.asked(2)
        second = fetcher.fetch(base + "/second")
        yield asked
        self.clock.advance(LATE)
        return (yield second)

    @defer.inlineCallbacks
    def check_out_of_step(self, fetcher: Fetcher, base: str) -> Any:
        """The victim of the stray bytes fails as out of step (retried), and is fetched whole on a new connection."""
        second = yield self.second_after_late_bytes(fetcher, base)
        self.assertNotEqual(second.body, b"injected")
        self.assertEqual((second.status, second.reason), (st.OUT_OF_STEP, OUT_OF_STEP))
        again = yield fetcher.fetch(base + "/second")
        self.assertEqual((again.status, again.body), (200, b"page of /second"))
        self.assertEqual(self.late.connections, [[b"/first", b"/second"], [b"/second"]])


class DirectTests(PoisonedTestCase):
    """The late-bytes server, fetched directly."""

    def test_late_bytes_are_no_answer(self) -> Any:
        """Bytes 50 ms past a whole Content-Length: 10 answer do not become the next request's answer on that
        pooled connection: that request fails as out of step, the connection is closed."""
        return self.check_out_of_step(self.fetcher(), self.base)

    @defer.inlineCallbacks
    def test_late_bytes_on_an_idle_connection_close_it(self) -> Any:
        """Stray bytes that come while the connection is idle in the pool close it (as Twisted does): the next
        request goes on a new connection and gets its own answer."""
        fetcher = self.fetcher()
        yield fetcher.fetch(self.base + "/first")
        self.clock.advance(LATE)
        yield self.late.all_closed()
        second = yield fetcher.fetch(self.base + "/second")
        self.assertEqual((second.status, second.body), (200, b"page of /second"))
        self.assertEqual(self.late.connections, [[b"/first"], [b"/second"]])

    @defer.inlineCallbacks
    def test_bytes_past_a_first_answer_are_its_own_fault(self) -> Any:
        """Bytes past the end of the first answer on a connection (longer than its Content-Length) make that
        answer malformed (final), and its connection is not reused."""
        scripted = Scripted({b"/long": (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234567890123456789", "keep"),
                             b"/ok": (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "keep")})
        self.peers.append(scripted)
        base = self.serve(scripted)
        fetcher = self.fetcher()
        long = yield fetcher.fetch(base + "/long")
        self.assertEqual((long.status, long.body), (st.MALFORMED, b""))
        self.assertEqual(long.reason, "malformed answer: 10 bytes past the end of the answer (Content-Length 10)")
        ok = yield fetcher.fetch(base + "/ok")
        self.assertEqual((ok.status, ok.body), (200, b"ok"))
        self.assertEqual(scripted.connections, [[b"/long"], [b"/ok"]])

    @defer.inlineCallbacks
    def test_oddly_framed_answers_close_their_connection(self) -> Any:
        """An answer framed oddly (Transfer-Encoding and Content-Length both, Content-Length twice, a CRLF past its
        end, a 304 with a body) is kept, but its connection is closed, not reused."""
        head = b"HTTP/1.1 200 OK\r\n"
        scripted = Scripted({
            b"/both": (head + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n2\r\nok\r\n0\r\n\r\n", "keep"),
            b"/twice": (head + b"Content-Length: 2\r\nContent-Length: 2\r\n\r\nok", "keep"),
            b"/crlf": (head + b"Content-Length: 2\r\n\r\nok\r\n", "keep"),
            b"/same": (b"HTTP/1.1 304 Not Modified\r\nContent-Length: 2\r\n\r\nok", "keep"),
            b"/ok": (head + b"Content-Length: 2\r\n\r\nok", "keep"),
        })
        self.peers.append(scripted)
        base = self.serve(scripted)
        fetcher = self.fetcher()
        for path in ("/both", "/twice", "/crlf"):
            odd = yield fetcher.fetch(base + path)
            self.assertEqual((odd.status, odd.body), (200, b"ok"), path)
            ok = yield fetcher.fetch(base + "/ok")
            self.assertEqual((ok.status, ok.body), (200, b"ok"))
        self.assertEqual(scripted.connections, [[b"/both"], [b"/ok", b"/twice"], [b"/ok", b"/crlf"], [b"/ok"]])
        del scripted.connections[:]
        fresh = self.fetcher()  # the 304 first on its connection (on a reused one its bytes would be out of step)
        same = yield fresh.fetch(base + "/same")
        ok = yield fresh.fetch(base + "/ok")
        self.assertEqual([(same.status, same.body), (ok.status, ok.body)], [(304, b""), (200, b"ok")])
        self.assertEqual(scripted.connections, [[b"/same"], [b"/ok"]])


class ProxyTests(PoisonedTestCase):
    """Through a plain proxy that passes an origin's bytes through as they come (no framing of its own)."""

    def setUp(self) -> None:
        super().setUp()
        self.pipe = Pipe()
        self.peers.append(self.pipe)
        self.proxy = self.serve(self.pipe, "127.0.0.3")

    def test_late_bytes_through_the_proxy(self) -> Any:
        """The late bytes come through the proxy: the next request of the site fails as out of step, the proxy
        connection is closed."""
        fetcher = self.fetcher([{"allowed_hosts": ["127.0.0.1"], "proxy": self.proxy}])
        d = self.check_out_of_step(fetcher, self.base)
        asked = [[self.base + "/first", self.base + "/second"], [self.base + "/second"]]
        expected = [[url.encode() for url in connection] for connection in asked]
        return d.addCallback(lambda _: self.assertEqual(self.pipe.connections, expected))

    @defer.inlineCallbacks
    def test_late_bytes_never_reach_another_site(self) -> Any:
        """Through one proxy, a site's late bytes never become another site's answer: each site's requests go on
        proxy connections of their own."""
        held = Held()
        self.peers.append(held)
        other = self.serve(held, "127.0.0.2")
        fetcher = self.fetcher([{"allowed_hosts": ["127.0.0.1", "127.0.0.2"], "proxy": self.proxy}])
        first = yield fetcher.fetch(self.base + "/first")
        self.assertEqual(first.body, b"0123456789")
        asked = held.asked(1)
        answer = fetcher.fetch(other + "/page")
        yield asked
        passed = self.pipe.passed(b"injected")
        self.clock.advance(LATE)
        yield passed
        held.release()
        answer = yield answer
        self.assertEqual((answer.status, answer.body), (200, b"page of /page"))


class TunnelTests(PoisonedTestCase):
    """The late-bytes server over TLS, behind a CONNECT relay."""

    def setUp(self) -> None:
        super().setUp()
        key, cert = self_signed(ORIGIN)
        self.tls = client.BrowserLikePolicyForHTTPS(trustRoot=ssl.Certificate.loadPEM(cert))
        self.secure = LateBytes(self.clock)
        self.peers.append(self.secure)
        options = ssl.PrivateCertificate.loadPEM(key + cert).options()
        port = reactor.listenSSL(0, self.secure, options, interface="127.0.0.2")
        self.addCleanup(port.stopListening)
        self.url = f"https://{ORIGIN}:{port.getHost().port}"
        self.relay = Factory.forProtocol(_Relay)
        self.relay.noisy = False
        self.relay.mode, self.relay.asked, self.relay.got = "relay", [], defer.Deferred()
        self.relay.closed, self.relay.names = defer.Deferred(), {ORIGIN: "127.0.0.2"}
        self.proxy = self.serve(self.relay, "127.0.0.3")

    def test_late_bytes_through_a_tunnel(self) -> Any:
        """The late bytes come inside the tunnel: the next request fails as out of step, the tunnel is closed and
        a new one carries the request again."""
        self.late = self.secure
        fetcher = self.fetcher([{"allowed_hosts": [ORIGIN], "proxy": self.proxy}])
        return self.check_out_of_step(fetcher, self.url)
