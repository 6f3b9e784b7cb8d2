"""Servers as they are on loopback (HTTP/1.0, keep-alive timeouts, resets): every page fetched, no closed
connection counted as a failed fetch, through the fetcher, a whole crawl and a worker job."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.protocols import policies
from twisted.trial import unittest
from twisted.web import resource, server

from spiderd.core import status as st
from spiderd.demo.pages import SiteSpec
from spiderd.demo.static import static_paths, write_static
from spiderd.fetch.fetcher import FetchConfig, Fetcher

from . import test_worker
from .helpers import ClockedReactor
from .httpservers import ClosingHandler, HTTP10Handler, RawServer, ThreadedServer
from .test_crawl import node_settings, run_crawl

SPEC = SiteSpec(lists=4, details=200, faults=False, seed=3)
CONCURRENCY = 16


def fetch_all(fetcher: Fetcher, urls: list[str], concurrency: int = CONCURRENCY) -> defer.Deferred[list[Any]]:
    """Fetch every URL, ``concurrency`` at a time, each starting as one ends (as the crawler does)."""
    semaphore = defer.DeferredSemaphore(concurrency)
    return defer.gatherResults([semaphore.run(fetcher.fetch, url) for url in urls])


class StaticSite:
    """The demo site's static copy in a temporary directory, and servers of it for the test."""

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        self.directory = Path(tempfile.mkdtemp(prefix="spiderd-servers-"))
        self.addCleanup(shutil.rmtree, self.directory, True)  # type: ignore[attr-defined]
        write_static(SPEC, self.directory)

    def serve(self, handler: type) -> ThreadedServer:
        served = ThreadedServer(self.directory, handler)
        self.addCleanup(served.stop)  # type: ignore[attr-defined]
        return served


class FetcherOnRealServersTests(StaticSite, unittest.TestCase):
    """The fetcher alone, many requests in flight, against servers that close connections."""

    timeout = 60

    def fetcher(self, **config: Any) -> Fetcher:
        fetcher = Fetcher(reactor, FetchConfig(timeout=20, connect_timeout=5, **config))
        self.addCleanup(fetcher.close)
        return fetcher

    @defer.inlineCallbacks
    def check_every_page(self, handler: type) -> Any:
        served = self.serve(handler)
        urls = [served.root + path for path in static_paths(SPEC)]
        results = yield fetch_all(self.fetcher(per_host_connections=CONCURRENCY), urls)
        self.assertEqual(Counter(r.status for r in results), {200: len(urls)})
        self.assertEqual(served.connections, len(urls))  # both servers answer once per connection

    def test_http10_server(self) -> Any:
        """Python's http.server (HTTP/1.0): every page is a 200, none a reset."""
        return self.check_every_page(HTTP10Handler)

    def test_server_closing_after_each_answer(self) -> Any:
        """An HTTP/1.1 server that closes each connection after its answer: every page is a 200."""
        return self.check_every_page(ClosingHandler)


class Hello(resource.Resource):
    """Answers every GET with a greeting."""

    isLeaf = True

    def render_GET(self, request: Any) -> bytes:
        return b"hello"


class ConnectionTests(unittest.TestCase):
    """What is pooled, what is retried, and when idle connections close, against servers on the reactor."""

    timeout = 15

    def setUp(self) -> None:
        self.raw = RawServer()
        port = reactor.listenTCP(0, self.raw, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.addCleanup(self.raw.abort_all)
        self.base = f"http://127.0.0.1:{port.getHost().port}"
        self.clock = Clock()

    def fetcher(self, **config: Any) -> Fetcher:
        fetcher = Fetcher(ClockedReactor(reactor, self.clock), FetchConfig(timeout=20, **config))
        self.addCleanup(fetcher.close)
        return fetcher

    @defer.inlineCallbacks
    def test_what_is_pooled(self) -> Any:
        """HTTP/1.1 answers reuse their connection; HTTP/1.0 ones (with a body or none) and Connection: close don't."""
        expected = {
            "/new": [["/new", "/new"]],
            "/close": [["/close"], ["/close"]],
            "/old": [["/old"], ["/old"]],
            "/old-moved": [["/old-moved"], ["/old"], ["/old-moved"], ["/old"]],
        }
        for path, connections in expected.items():
            del self.raw.connections[:]
            fetcher = self.fetcher()
            for _ in range(2):
                result = yield fetcher.fetch(self.base + path)
                self.assertEqual((result.status, result.body), (200, b"ok"))
            self.assertEqual(self.raw.connections, connections, path)

    @defer.inlineCallbacks
    def test_reset_retried_once_on_a_new_connection(self) -> Any:
        """A GET reset on a pooled connection is sent once more on a new one, reset there too it is a failure;
        a GET reset on a new connection is a failure at once."""
        fresh = yield self.fetcher().fetch(self.base + "/reset")
        self.assertEqual((fresh.status, self.raw.connections), (st.CONNECTION_LOST, [["/reset"]]))
        del self.raw.connections[:]
        fetcher = self.fetcher()
        first = yield fetcher.fetch(self.base + "/new")
        reset = yield fetcher.fetch(self.base + "/reset")
        self.assertEqual((first.status, reset.status), (200, st.CONNECTION_LOST))
        self.assertEqual(self.raw.connections, [["/new", "/reset"], ["/reset"]])

    @defer.inlineCallbacks
    def test_idle_connections_close(self) -> Any:
        """An idle pooled connection is closed after keepalive_timeout (on the clock), not Twisted's 240 s."""
        result = yield self.fetcher(keepalive_timeout=10).fetch(self.base + "/new")
        self.assertEqual((result.status, len(self.raw.open)), (200, 1))
        self.clock.advance(10)
        yield self.raw.all_closed()

    @defer.inlineCallbacks
    def test_a_host_leaves_nothing_in_the_pool(self) -> Any:
        """Once a host's idle connection closed (or was taken), the pool keeps nothing of the host (a broad
        crawl meets a million hosts: Twisted's pool alone would keep an empty list for each)."""
        fetcher = self.fetcher(keepalive_timeout=10)
        yield fetcher.fetch(self.base + "/new")
        pool = fetcher._pools[0]
        self.assertEqual(len(pool._connections), 1)  # its idle connection
        yield fetcher.fetch(self.base + "/new")  # taken from the pool, then pooled again
        self.clock.advance(10)
        yield self.raw.all_closed()
        self.assertEqual(pool._connections, {})

    @defer.inlineCallbacks
    def test_server_keepalive_timeout(self) -> Any:
        """A server closes its idle connections after 1 s (its clock); GETs sent on them right then all succeed."""
        server_clock = Clock()
        site = server.Site(Hello(), timeout=1, reactor=server_clock)
        counted = policies.WrappingFactory(site)
        counted.noisy = site.noisy = False
        port = reactor.listenTCP(0, counted, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        connections: list[Any] = []
        build = counted.buildProtocol
        counted.buildProtocol = lambda addr: connections.append(build(addr)) or connections[-1]  # type: ignore[method-assign]
        self.addCleanup(lambda: [c.transport.abortConnection() for c in connections])
        fetcher = self.fetcher(per_host_connections=8)
        urls = [f"http://127.0.0.1:{port.getHost().port}/{n}" for n in range(8)]
        first = yield fetch_all(fetcher, urls, 8)
        self.assertEqual((Counter(r.status for r in first), len(connections)), ({200: 8}, 8))
        server_clock.advance(2)  # the server times its 8 idle connections out and closes them
        self.assertTrue(all(c.transport.disconnecting for c in connections))
        second = yield fetch_all(fetcher, urls, 8)  # at once: the client has not read the closes yet
        self.assertEqual(Counter(r.status for r in second), {200: 8})
        self.assertEqual(len(connections), 16)  # each of the second 8 sent again on a new connection


class CrawlOnRealServersTests(StaticSite, unittest.TestCase):
    """A whole node (targets = []) crawls the static site served by servers that close connections."""

    timeout = 60

    @defer.inlineCallbacks
    def crawl(self, handler: type) -> Any:
        served = self.serve(handler)
        data = tempfile.mkdtemp(prefix="spiderd-servers-crawl-")
        self.addCleanup(shutil.rmtree, data, True)
        settings = node_settings(data, served.root + "/", parse={"workers": 0}, store={"url": "none"},
                                 fetch={"concurrency": CONCURRENCY, "per_host_concurrency": CONCURRENCY,
                                        "keepalive_timeout": 7})
        crawler, stats = yield run_crawl(settings)
        pages = 1 + SPEC.lists + SPEC.details  # the root, the list pages and the detail pages
        self.assertEqual(dict(crawler.stats.statuses), {"200": pages})
        self.assertEqual((stats["done"], stats["failed"]), (pages, 0))
        self.assertEqual(crawler._fetcher._pools[0].cachedConnectionTimeout, 7)  # [fetch] keepalive_timeout

    def test_http10_server(self) -> Any:
        """Python's http.server: every page fetched once, no reset, nothing failed."""
        return self.crawl(HTTP10Handler)

    def test_server_closing_after_each_answer(self) -> Any:
        """A server that closes after each keep-alive answer: every page fetched once, no reset, nothing failed."""
        return self.crawl(ClosingHandler)


class WorkerOnRealServersTests(StaticSite, test_worker.WorkerTestBase):
    """A worker job of every detail page of the static site, served by servers that close connections."""

    @defer.inlineCallbacks
    def job(self, handler: type) -> Any:
        served = self.serve(handler)
        urls = [served.root + f"/item/{n}.html" for n in range(1, SPEC.details + 1)]
        service = self.worker(job_concurrency=CONCURRENCY, per_host_concurrency=CONCURRENCY)
        jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("batch", "1"),
                                    ("setting", self.feed_setting()),
                                    ("setting", "DISTRIBUTED_START_URLS=" + json.dumps(urls)))
        job = yield service.runner.when_done(jobid)
        yield self.shipper.settled()
        self.assertEqual(job.state, "finished")
        self.assertEqual(sorted(i["url"] for i in self.feed_items("1")), sorted(urls))
        counts = {k: v for k, v in job.stats.items() if k.startswith("status_") or k in ("requests", "failed")}
        self.assertEqual(counts, {"requests": len(urls), "status_200": len(urls)})

    def test_http10_server(self) -> Any:
        """Python's http.server: every URL of the job fetched once and made an item, no reset, none failed."""
        return self.job(HTTP10Handler)

    def test_server_closing_after_each_answer(self) -> Any:
        """A server that closes after each keep-alive answer: every URL fetched once, no reset, none failed."""
        return self.job(ClosingHandler)
