"""The fetcher against a real twisted.web server on 127.0.0.1: every status path, limits, encodings, errors."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

from twisted.internet.error import CannotListenError
from twisted.internet import defer, error, reactor
from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.python.failure import Failure
from twisted.trial import unittest
from twisted.web import resource, server

from spiderd.core import status as st
from spiderd.fetch.connections import CachedEndpoints
from spiderd.fetch.fetcher import FetchConfig, Fetcher, classify_failure
from spiderd.fetch.robots import Robots

from .helpers import ClockedReactor

BIG = b"x" * 5000


class _Huge(resource.Resource):
    """A site whose robots.txt is 600 KiB."""

    isLeaf = True

    def render_GET(self, request: Any) -> bytes:
        return Page().page_huge_robots_txt(request)


class Page(resource.Resource):
    """Routes of the test site, by path."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.hanging: list[Any] = []
        self.clients: list[str] = []

    def render_GET(self, request: Any) -> Any:
        self.clients.append(request.getClientAddress().host)
        path = request.path.decode()
        name = path.strip("/").replace("/", "_").replace(".", "_") or "index"
        handler = getattr(self, "page_" + name, None)
        if handler is None:
            request.setResponseCode(404)
            return b"not here"
        return handler(request)

    def page_index(self, request: Any) -> bytes:
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return b"<html><a href='/a'>a</a></html>"

    def page_error(self, request: Any) -> bytes:
        request.setResponseCode(500)
        return b"oops"

    def page_moved(self, request: Any) -> bytes:
        request.setResponseCode(301)
        request.setHeader(b"location", b"/hop")
        return b""

    def page_hop(self, request: Any) -> bytes:
        request.setResponseCode(302)
        request.setHeader(b"location", b"http://127.0.0.1:%d/index" % request.getHost().port)
        return b""

    def page_loop(self, request: Any) -> bytes:
        request.setResponseCode(302)
        request.setHeader(b"location", b"/loop2")
        return b""

    def page_loop2(self, request: Any) -> bytes:
        request.setResponseCode(302)
        request.setHeader(b"location", b"/loop")
        return b""

    def page_badredirect(self, request: Any) -> bytes:
        request.setResponseCode(302)
        request.setHeader(b"location", b"javascript:alert(1)")
        return b""

    def page_big(self, request: Any) -> bytes:
        return BIG

    def page_huge_robots_txt(self, request: Any) -> bytes:
        """A robots.txt of 600 KiB: a rule at its start, comments, a rule past 512 KiB."""
        padding = b"# padding " + b"x" * 100 + b"\n"
        return b"User-agent: *\nDisallow: /private\n" + padding * 6000 + b"Disallow: /late\n"

    def page_bigchunked(self, request: Any) -> Any:
        request.write(BIG)
        request.write(BIG)
        request.finish()
        return server.NOT_DONE_YET

    def page_gzip(self, request: Any) -> bytes:
        request.setHeader(b"content-encoding", b"gzip")
        return gzip.compress(b"<p>zipped</p>" * 10)

    def page_bomb(self, request: Any) -> bytes:
        request.setHeader(b"content-encoding", b"gzip")
        return gzip.compress(b"\0" * 50_000_000)

    def page_deflate(self, request: Any) -> bytes:
        request.setHeader(b"content-encoding", b"deflate")
        return zlib.compress(b"deflated!")

    def page_rawdeflate(self, request: Any) -> bytes:
        request.setHeader(b"content-encoding", b"deflate")
        c = zlib.compressobj(wbits=-15)
        return c.compress(b"raw deflated!") + c.flush()

    def page_badgzip(self, request: Any) -> bytes:
        request.setHeader(b"content-encoding", b"gzip")
        return b"this is not gzip at all"

    def page_hang(self, request: Any) -> Any:
        self.hanging.append(request)
        return server.NOT_DONE_YET

    def page_reset(self, request: Any) -> Any:
        request.setHeader(b"content-length", b"1000")
        request.write(b"partial")
        request.transport.abortConnection()
        return server.NOT_DONE_YET

    def page_robots_txt(self, request: Any) -> bytes:
        return b"User-agent: otherbot\nDisallow: /index\n\nUser-agent: *\nDisallow: /private\nCrawl-delay: 3\n"

    def page_agent(self, request: Any) -> bytes:
        return request.getHeader(b"user-agent") or b""

    def page_private(self, request: Any) -> bytes:
        return b"secret"


class FetcherTests(unittest.TestCase):
    """One real server per test; the fetcher's timeouts run on a Clock."""

    def setUp(self) -> None:
        self.site = Page()
        factory = server.Site(self.site)
        factory.noisy = False
        self.port = reactor.listenTCP(0, factory, interface="127.0.0.1")
        self.base = f"http://127.0.0.1:{self.port.getHost().port}"
        self.clock = Clock()
        self.fetcher = self.make_fetcher()

    def make_fetcher(self, real_time: bool = False, **config: Any) -> Fetcher:
        config.setdefault("max_body_size", 8000)
        config.setdefault("timeout", 30)
        fetcher = Fetcher(reactor if real_time else ClockedReactor(reactor, self.clock), FetchConfig(**config))
        self.addCleanup(fetcher.close)
        return fetcher

    def tearDown(self) -> Any:
        for request in self.site.hanging:
            request.transport.abortConnection()
        return self.port.stopListening()

    @defer.inlineCallbacks
    def test_ok_page(self) -> Any:
        """A 200 gives its body and content type; the final URL is the URL."""
        result = yield self.fetcher.fetch(self.base + "/index")
        self.assertEqual((result.status, result.body[:6]), (200, b"<html>"))
        self.assertEqual(result.content_type, "text/html; charset=utf-8")
        self.assertEqual(result.final_url, self.base + "/index")

    @defer.inlineCallbacks
    def test_error_statuses(self) -> Any:
        """404 and 500 come back as their codes, not as failures."""
        missing = yield self.fetcher.fetch(self.base + "/nothing")
        broken = yield self.fetcher.fetch(self.base + "/error")
        self.assertEqual((missing.status, broken.status), (404, 500))

    @defer.inlineCallbacks
    def test_redirect_chain_recorded(self) -> Any:
        """Redirects are followed; the final URL and every hop are recorded."""
        result = yield self.fetcher.fetch(self.base + "/moved")
        self.assertEqual(result.status, 200)
        self.assertEqual(result.final_url, self.base + "/index")
        self.assertEqual(result.redirects, [self.base + "/hop", self.base + "/index"])

    @defer.inlineCallbacks
    def test_redirect_loop_and_limit(self) -> Any:
        """A redirect loop, or more hops than allowed, is a final TOO_MANY_REDIRECTS; the reason tells which."""
        looped = yield self.fetcher.fetch(self.base + "/loop")
        self.assertEqual(looped.status, st.TOO_MANY_REDIRECTS)
        self.assertTrue(looped.reason.startswith("redirect loop: back to " + self.base), looped.reason)
        limited = yield self.make_fetcher(max_redirects=1).fetch(self.base + "/moved")
        self.assertEqual(limited.status, st.TOO_MANY_REDIRECTS)
        self.assertEqual(limited.reason, f"too many redirects: more than 1, the last to {self.base}/index")

    @defer.inlineCallbacks
    def test_a_redirect_unfollowed_then_followed_on_is_the_fetch_that_follows(self) -> Any:
        """``follow=False`` gives the redirect's answer itself (a fetch child's); ``follow_on`` carries the fetch on
        from it to the same result as following at once (status, final URL, hops), loops and limits included."""
        for path, limit in (("/moved", 5), ("/loop", 5), ("/moved", 1), ("/badredirect", 5), ("/index", 5)):
            fetcher = self.make_fetcher(max_redirects=limit)
            first = yield fetcher.fetch(self.base + path, follow=False)
            if path != "/index":
                self.assertIn(first.status, (301, 302), path)
                self.assertEqual((first.final_url, first.redirects), (self.base + path, []))
            self.site.clients.clear()
            followed = yield fetcher.follow_on(first)
            direct = yield fetcher.fetch(self.base + path)
            self.assertEqual((followed.url, followed.status, followed.final_url, followed.redirects, followed.reason),
                             (direct.url, direct.status, direct.final_url, direct.redirects, direct.reason), path)
            self.assertEqual(len(self.site.clients), 2 * len(direct.redirects) + 1, path)  # its first hop not again

    @defer.inlineCallbacks
    def test_bad_redirect(self) -> Any:
        """A redirect to a URL spiderd will not fetch is a final BAD_REDIRECT."""
        result = yield self.fetcher.fetch(self.base + "/badredirect")
        self.assertEqual(result.status, st.BAD_REDIRECT)
        self.assertTrue(result.reason.startswith("bad redirect: Location '"), result.reason)

    @defer.inlineCallbacks
    def test_too_large(self) -> Any:
        """A body over max_body_size aborts, announced by Content-Length or not."""
        sized = yield self.fetcher.fetch(self.base + "/big")
        self.assertEqual(sized.status, 200)
        small = self.make_fetcher(max_body_size=4000)
        announced = yield small.fetch(self.base + "/big")
        chunked = yield self.fetcher.fetch(self.base + "/bigchunked")
        self.assertEqual((announced.status, chunked.status), (st.TOO_LARGE, st.TOO_LARGE))
        self.assertRegex(announced.reason, r"^too large: Content-Length \d+, over the limit of 4000 bytes$")
        self.assertRegex(chunked.reason, r"^too large: more than \d+ bytes$")

    @defer.inlineCallbacks
    def test_gzip_and_deflate(self) -> Any:
        """gzip, zlib deflate and raw deflate bodies are inflated."""
        zipped = yield self.fetcher.fetch(self.base + "/gzip")
        deflated = yield self.fetcher.fetch(self.base + "/deflate")
        raw = yield self.fetcher.fetch(self.base + "/rawdeflate")
        self.assertEqual(zipped.body, b"<p>zipped</p>" * 10)
        self.assertEqual((deflated.body, raw.body), (b"deflated!", b"raw deflated!"))

    @defer.inlineCallbacks
    def test_gzip_bomb_stops_at_the_limit(self) -> Any:
        """A small gzip body that inflates past the limit is TOO_LARGE, never inflated whole."""
        result = yield self.fetcher.fetch(self.base + "/bomb")
        self.assertEqual(result.status, st.TOO_LARGE)
        self.assertEqual(result.body, b"")
        self.assertRegex(result.reason, r"^too large: (inflated body of )?more than \d+ bytes$")

    @defer.inlineCallbacks
    def test_corrupt_gzip(self) -> Any:
        """A body that claims gzip but is not goes to the retry path as a broken response."""
        result = yield self.fetcher.fetch(self.base + "/badgzip")
        self.assertEqual(result.status, st.CONNECTION_LOST)

    def test_timeout(self) -> Any:
        """A server that never answers is a TIMEOUT once the total timeout passes on the clock."""
        d = self.fetcher.fetch(self.base + "/hang")
        got: list[Any] = []
        d.addCallback(got.append)

        def advance() -> Any:
            self.assertEqual(got, [])
            self.clock.advance(30)
            self.assertEqual(got[0].status, st.TIMEOUT)
            self.assertEqual(got[0].reason, "timeout: no whole answer within 30 s")

        return _when(lambda: self.site.hanging).addCallback(lambda _: advance())

    @defer.inlineCallbacks
    def test_reset_mid_body(self) -> Any:
        """A connection dropped mid-body is CONNECTION_LOST (retried), not a crash."""
        result = yield self.fetcher.fetch(self.base + "/reset")
        self.assertEqual(result.status, st.CONNECTION_LOST)
        self.assertTrue(result.reason.startswith("reset: "), result.reason)

    @defer.inlineCallbacks
    def test_refused(self) -> Any:
        """A closed port is CONNECT_REFUSED (real time: the endpoint's attempts run on the reactor's clock)."""
        closed = reactor.listenTCP(0, server.Site(self.site), interface="127.0.0.1")
        port = closed.getHost().port
        yield closed.stopListening()
        result = yield self.make_fetcher(real_time=True).fetch(f"http://127.0.0.1:{port}/")
        self.assertEqual(result.status, st.CONNECT_REFUSED)

    @defer.inlineCallbacks
    def test_addresses_and_names(self) -> Any:
        """An IPv4 or IPv6 address is connected to as it is (plain TCP endpoints), a name through the resolver:
        each gives the page, and a refused IPv6 port is CONNECT_REFUSED like an IPv4 one."""
        fetcher = self.make_fetcher(real_time=True)
        port = self.port.getHost().port
        by_name = yield fetcher.fetch(f"http://localhost:{port}/index")
        self.assertEqual(by_name.status, 200)
        try:
            six = reactor.listenTCP(0, server.Site(self.site), interface="::1")
        except CannotListenError:
            raise unittest.SkipTest("no IPv6 loopback here")
        six_port = six.getHost().port
        result = yield fetcher.fetch(f"http://[::1]:{six_port}/index")
        self.assertEqual((result.status, result.body[:6]), (200, b"<html>"))
        yield six.stopListening()
        refused = yield self.make_fetcher(real_time=True).fetch(f"http://[::1]:{six_port}/index")  # none pooled
        self.assertEqual(refused.status, st.CONNECT_REFUSED)

    @defer.inlineCallbacks
    def test_robots_denied_and_crawl_delay(self) -> Any:
        """robots.txt is fetched once per origin, disallowed URLs are ROBOTS_DENIED, Crawl-delay is reported."""
        delays: list[Any] = []
        self.fetcher.robots = Robots(self.fetcher.fetch_raw, self.clock, "spiderd/1.0", on_delay=lambda h, d: delays.append((h, d)))
        denied = yield self.fetcher.fetch(self.base + "/private")
        allowed = yield self.fetcher.fetch(self.base + "/index")
        self.assertEqual((denied.status, allowed.status), (st.ROBOTS_DENIED, 200))
        self.assertEqual(delays, [(f"127.0.0.1:{self.port.getHost().port}", 3.0)])
        self.assertEqual(len(self.site.clients), 2)  # robots.txt once, /index once

    @defer.inlineCallbacks
    def test_robots_from_the_config(self) -> Any:
        """FetchConfig(robots=True): the fetcher checks robots.txt itself and reports Crawl-delay; by default not."""
        delays: list[Any] = []
        fetcher = Fetcher(ClockedReactor(reactor, self.clock), FetchConfig(user_agent="spiderd/1.0", robots=True),
                          on_crawl_delay=lambda h, d: delays.append((h, d)))
        self.addCleanup(fetcher.close)
        denied = yield fetcher.fetch(self.base + "/private")
        self.assertEqual((denied.status, self.fetcher.robots), (st.ROBOTS_DENIED, None))
        self.assertEqual(fetcher.robots._fetch_raw.keywords, {"redirects": 5})
        self.assertEqual(delays, [(f"127.0.0.1:{self.port.getHost().port}", 3.0)])

    @defer.inlineCallbacks
    def test_per_request_user_agent_and_robots(self) -> Any:
        """A request's own user agent is sent and its robots.txt group applies; robots=False skips the check."""
        self.fetcher.robots = Robots(self.fetcher.fetch_raw, self.clock, "spiderd/1.0")
        own = yield self.fetcher.fetch(self.base + "/agent", user_agent="jobbot/1.0 (+https://example.org)")
        default = yield self.fetcher.fetch(self.base + "/agent")
        self.assertEqual((own.body, default.body), (b"jobbot/1.0 (+https://example.org)", b"spiderd"))
        other = yield self.fetcher.fetch(self.base + "/index", user_agent="otherbot/2.0")
        mine = yield self.fetcher.fetch(self.base + "/index")
        self.assertEqual((other.status, mine.status), (st.ROBOTS_DENIED, 200))
        unchecked = yield self.fetcher.fetch(self.base + "/private", robots=False)
        checked = yield self.fetcher.fetch(self.base + "/private")
        self.assertEqual((unchecked.status, unchecked.body, checked.status), (200, b"secret", st.ROBOTS_DENIED))

    @defer.inlineCallbacks
    def test_huge_robots_txt_uses_its_first_512_kib(self) -> Any:
        """fetch_raw(truncate=True) gives the first 512 KiB of a larger body; parsed, its early rule holds."""
        raw = yield self.fetcher.fetch_raw(self.base + "/huge/robots.txt", 512 * 1024, truncate=True)
        self.assertEqual((raw.status, raw.error, len(raw.body)), (200, "truncated", 512 * 1024))
        from spiderd.fetch.robots import _parse, _whole_lines

        rules = _parse(_whole_lines(raw.body), self.base)
        self.assertFalse(rules.can_fetch(self.base + "/private", "spiderd"))
        self.assertTrue(rules.can_fetch(self.base + "/late", "spiderd"))
        whole = yield self.fetcher.fetch_raw(self.base + "/huge/robots.txt", 512 * 1024)
        self.assertEqual(whole.status, st.TOO_LARGE)  # without truncate, too large stays a failure

    @defer.inlineCallbacks
    def test_robots_txt_over_the_limit_is_said(self) -> Any:
        """Robots on a huge robots.txt: the first rule holds, and one info line says the file was cut."""
        robots_site = _Huge()
        port = reactor.listenTCP(0, server.Site(robots_site), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        base = f"http://127.0.0.1:{port.getHost().port}"
        robots = Robots(self.fetcher.fetch_raw, self.clock, "spiderd/1.0")
        with capturedLogs() as events:
            denied = yield robots.allowed(base + "/private")
            late = yield robots.allowed(base + "/late")
        self.assertEqual((denied, late), (False, True))
        self.assertTrue(any("larger than 512 KiB: its first 512 KiB are used" in formatEvent(e) for e in events))

    @defer.inlineCallbacks
    def test_fetch_raw_follows_redirects_only_when_asked(self) -> Any:
        """fetch_raw (robots.txt) follows up to ``redirects`` hops; none by default; a loop ends as a redirect."""
        plain = yield self.fetcher.fetch_raw(self.base + "/moved", 8000)
        followed = yield self.fetcher.fetch_raw(self.base + "/moved", 8000, redirects=5)
        short = yield self.fetcher.fetch_raw(self.base + "/moved", 8000, redirects=1)
        loop = yield self.fetcher.fetch_raw(self.base + "/loop", 8000, redirects=5)
        self.assertEqual(plain.status, 301)
        self.assertEqual((followed.status, followed.final_url), (200, self.base + "/index"))
        self.assertEqual(followed.redirects, [self.base + "/hop", self.base + "/index"])
        self.assertEqual((short.status, short.final_url), (302, self.base + "/hop"))
        self.assertEqual((loop.status, loop.redirects), (302, [self.base + "/loop2"]))

    @defer.inlineCallbacks
    def test_fetch_raw_timeout(self) -> Any:
        """A robots.txt that never comes is a timeout, also while following redirects."""
        d = self.fetcher.fetch_raw(self.base + "/hang", 8000, redirects=5)
        yield _when(lambda: self.site.hanging)
        self.clock.advance(30)
        result = yield d
        self.assertEqual(result.status, st.TIMEOUT)

    def test_crawl_delay_capped_and_given_to_every_listener(self) -> None:
        """A hostile Crawl-delay is honoured as 300 s at most, and every listener (pool, worker) hears it."""
        from types import SimpleNamespace

        body = b"User-agent: *\nCrawl-delay: 86400\n"
        fetch_raw = lambda url, limit, truncate=False: defer.succeed(SimpleNamespace(status=200, body=body, error=None))  # noqa: E731
        heard: list[Any] = []
        robots = Robots(fetch_raw, self.clock, "spiderd/1.0", on_delay=lambda h, d: heard.append(("pool", h, d)))
        robots.add_delay_listener(lambda h, d: heard.append(("worker", h, d)))
        self.assertTrue(self.successResultOf(robots.allowed("http://slow.example/a")))
        self.assertEqual(heard, [("pool", "slow.example", 300.0), ("worker", "slow.example", 300.0)])

    @defer.inlineCallbacks
    def test_source_addresses_rotate(self) -> Any:
        """With source addresses configured, requests leave from each in turn."""
        fetcher = self.make_fetcher(source_addresses=("127.0.0.1", "127.0.0.2"))
        for _ in range(4):
            yield fetcher.fetch(self.base + "/index")
        self.assertEqual(set(self.site.clients), {"127.0.0.1", "127.0.0.2"})


def _when(predicate: Any) -> Any:
    """Fires once ``predicate()`` is true, polling the real reactor each turn (no sleeping)."""
    d: defer.Deferred[None] = defer.Deferred()

    def check() -> None:
        if predicate():
            d.callback(None)
        else:
            reactor.callLater(0, check)

    check()
    return d


def test_classify_failure() -> None:
    """Network failures map to retryable kinds; unknown errors to NETWORK_ERROR."""
    assert classify_failure(Failure(error.DNSLookupError("x"))) == (st.DNS_ERROR, "dns")
    assert classify_failure(Failure(error.ConnectionRefusedError())) == (st.CONNECT_REFUSED, "refused")
    assert classify_failure(Failure(defer.CancelledError())) == (st.TIMEOUT, "timeout")
    assert classify_failure(Failure(KeyError("x")))[0] == st.NETWORK_ERROR


def test_unsupported_scheme() -> None:
    """An endpoint for a scheme other than http(s) is refused with the SchemeNotSupported the Agent turns into a
    failed request (the Agent lets any other exception out of ``request`` unhandled)."""
    from twisted.web.client import URI
    from twisted.web.error import SchemeNotSupported

    endpoints = CachedEndpoints(Clock(), 5.0, None)
    try:
        endpoints.endpointForURI(URI.fromBytes(b"ftp://127.0.0.1/x"))
    except SchemeNotSupported:
        pass
    else:
        raise AssertionError("an ftp:// endpoint was made")


class DripTests(unittest.TestCase):
    """A server that drips bytes and never finishes: the total timeout ends it, not the idle gaps."""

    def setUp(self) -> None:
        self.requests: list[Any] = []
        self.calls: list[Any] = []
        page = resource.Resource()
        page.isLeaf = True
        page.render_GET = self.drip  # type: ignore[method-assign]
        self.port = reactor.listenTCP(0, server.Site(page), interface="127.0.0.1")
        self.clock = Clock()
        self.fetcher = Fetcher(ClockedReactor(reactor, self.clock), FetchConfig(timeout=30, max_body_size=10**6))
        self.addCleanup(self.fetcher.close)

    def drip(self, request: Any) -> Any:
        request.setHeader(b"content-length", b"1000000")
        self.requests.append(request)
        over = request.notifyFinish()  # fires when the answer is finished or the client has gone
        over.addErrback(lambda _: None)
        self.tick(request, over)
        return server.NOT_DONE_YET

    def tick(self, request: Any, over: defer.Deferred[None]) -> None:
        if not over.called:
            request.write(b"x")
            self.calls.append(reactor.callLater(0, self.tick, request, over))  # a byte every reactor turn

    def tearDown(self) -> Any:
        for call in self.calls:
            if call.active():
                call.cancel()
        for request in self.requests:
            request.transport.abortConnection()
        return self.port.stopListening()

    def test_drip_feed_times_out(self) -> Any:
        """Bytes keep coming, one at a time; at the total timeout on the clock the fetch is a TIMEOUT."""
        d = self.fetcher.fetch(f"http://127.0.0.1:{self.port.getHost().port}/drip")
        got: list[Any] = []
        d.addCallback(got.append)

        def later() -> Any:
            self.assertEqual(got, [])
            self.clock.advance(30)
            self.assertEqual(got[0].status, st.TIMEOUT)

        return _when(lambda: len(self.calls) > 50).addCallback(lambda _: later())
