"""Throttling answers (429, 503): Retry-After (seconds or an HTTP date) blocks the whole host until then, in the
crawler (through the pool) and in the worker; without it the wait grows per consecutive throttle; a URL's
throttles are not its failures up to ``max_throttles``; the wait is capped by ``max_retry_after``.

A real twisted.web site on 127.0.0.1; time is a Clock (ClockedReactor), advanced by the tests.
"""

from __future__ import annotations

import email.utils
from types import SimpleNamespace
from typing import Any, Callable

from twisted.internet import defer, reactor, task
from twisted.internet.task import Clock
from twisted.trial import unittest
from twisted.web import resource, server

from spiderd.engine.steps import PageSteps
from spiderd.config import settings as cfg
from spiderd.core.stats import CrawlStats
from spiderd.core.throttle import HostThrottles, parse_retry_after
from spiderd.demo.config import DEMO
from spiderd.fetch.fetcher import FetchConfig, Fetcher
from spiderd.fetch.parsepool import ParsePool
from spiderd.frontier.crawler import CrawlService
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool import open_memory_pool
from spiderd.worker.config import WorkerConfig
from spiderd.worker.pipeline import Pipeline
from spiderd.worker.run import Run

from .helpers import ClockedReactor, rules_of

START = 1_000_000.0


class Busy(resource.Resource):
    """Answers the first ``throttles`` requests with 429 (and ``retry_after``, if given), then 200; logs when
    (on the clock) each request came."""

    isLeaf = True

    def __init__(self, clock: Clock, throttles: int, retry_after: Callable[[], str] | None) -> None:
        super().__init__()
        self.clock = clock
        self.throttles = throttles
        self.retry_after = retry_after
        self.log: list[tuple[str, float]] = []

    def render_GET(self, request: Any) -> bytes:
        self.log.append((request.path.decode(), self.clock.seconds()))
        if len(self.log) <= self.throttles:
            request.setResponseCode(429)
            if self.retry_after is not None:
                request.setHeader(b"retry-after", self.retry_after().encode())
            return b"slow down"
        request.setHeader(b"content-type", b"text/html")
        return b"<html><body>ok</body></html>"


def http_date(when: float) -> str:
    return email.utils.formatdate(when, usegmt=True)


class Parts(unittest.SynchronousTestCase):
    """The sans-I/O part: Retry-After's two forms, the back-off, the cap."""

    def test_retry_after_seconds_and_date(self) -> None:
        now = 1_700_000_000.0
        self.assertEqual(parse_retry_after("30", now), 30.0)
        self.assertEqual(parse_retry_after(b" 7 ", now), 7.0)
        self.assertEqual(parse_retry_after(http_date(now + 90), now), 90.0)
        self.assertEqual(parse_retry_after(http_date(now - 90), now), 0.0)
        for bad in (None, "", "soon", "-5", "1.5", "Mon, 99 Foo 2024 00:00:00 GMT"):
            self.assertIsNone(parse_retry_after(bad, now), bad)

    def test_backoff_grows_per_throttle_resets_and_is_capped(self) -> None:
        throttles = HostThrottles(cap=5.0)
        self.assertEqual([throttles.wait("a", None) for _ in range(5)], [1.0, 2.0, 4.0, 5.0, 5.0])
        self.assertEqual(throttles.wait("b", None), 1.0)  # per host
        throttles.answered("a")
        self.assertEqual(throttles.wait("a", None), 1.0)
        self.assertEqual(throttles.wait("a", 3.0), 3.0)
        self.assertEqual(throttles.wait("a", 99999.0), 5.0)


class Base(unittest.TestCase):
    timeout = 30

    def serve(self, throttles: int, retry_after: Callable[[], str] | None = None) -> Busy:
        self.clock = Clock()
        self.clock.advance(START)
        site = Busy(self.clock, throttles, retry_after)
        factory = server.Site(site)
        factory.noisy = False
        port = reactor.listenTCP(0, factory, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.base = f"http://127.0.0.1:{port.getHost().port}"
        self.fetcher = Fetcher(ClockedReactor(reactor, self.clock), FetchConfig(timeout=10))
        self.addCleanup(self.fetcher.close)
        return site

    @defer.inlineCallbacks
    def settle(self, predicate: Callable[[], bool], real_seconds: float = 10.0) -> Any:
        """Turn the real reactor (I/O) and run the Clock's due calls until ``predicate()``; no clock time passes."""
        for _ in range(int(real_seconds / 0.005)):
            self.clock.advance(0)
            if predicate():
                return
            yield task.deferLater(reactor, 0.005, lambda: None)
        raise AssertionError("timed out waiting")

    @defer.inlineCallbacks
    def advance(self, seconds: float, step: float = 1.0) -> Any:
        """Let ``seconds`` of clock time pass in steps, the real reactor turning between them."""
        passed = 0.0
        while passed < seconds:
            delta = min(step, seconds - passed)
            self.clock.advance(delta)
            passed += delta
            yield task.deferLater(reactor, 0.002, lambda: None)


class CrawlerTests(Base):
    """A CrawlService over a memory pool and the real fetcher and parser."""

    @defer.inlineCallbacks
    def crawl(self, site: Busy, max_retry_after: float = 3600.0, concurrency: int = 1, **pool_options: Any) -> Any:
        pool_options.setdefault("failure_threshold", 0)
        self.pool = open_memory_pool(self.clock, politeness=Politeness(concurrency=concurrency), **pool_options)
        parser = ParsePool(reactor, rules_of({"sites": DEMO["sites"]}), 0)
        parser.startService()
        self.addCleanup(parser.stopService)
        self.stats = CrawlStats(self.clock)
        clocked = ClockedReactor(reactor, self.clock)
        steps = PageSteps(clocked, parser, max_retry_after=max_retry_after)
        self.crawler = CrawlService(clocked, self.pool, self.fetcher, steps, parser.rules, self.stats, concurrency=4)
        yield self.pool.addmany([self.base + "/a", self.base + "/b"])
        self.crawler.startService()
        self.addCleanup(self.crawler.stopService)

    def pool_state(self) -> dict[str, Any]:
        box: list[Any] = []
        self.pool.stats().addCallback(box.append)
        return box[0]

    def why(self, path: str) -> dict[str, Any]:
        box: list[Any] = []
        self.pool.why(self.base + path).addCallback(box.append)
        return box[0]

    @defer.inlineCallbacks
    def test_retry_after_blocks_the_host_until_then(self) -> Any:
        """One 429 with Retry-After: 30: no request to the host (any URL of it) for 30 s; then both are done,
        the throttle counted in the stats and kept as the URL's reason, not as a failure."""
        site = self.serve(1, lambda: "30")
        yield self.crawl(site)
        yield self.settle(lambda: self.pool_state()["waiting"] == 2 and self.crawler.processing == 0)
        self.assertEqual(len(site.log), 1)
        throttled = site.log[0][0]
        self.assertEqual(self.why(throttled)["last_failure"]["reason"], "throttled: http 429, retry after 30 s")
        yield self.advance(29.5, step=0.5)
        self.assertEqual(len(site.log), 1)
        yield self.advance(0.5)
        yield self.settle(lambda: self.pool_state()["done"] == 2)
        self.assertTrue(all(at >= START + 30 for _, at in site.log[1:]))
        self.assertEqual((self.pool_state()["failed"], self.stats.errors["throttled"]), (0, 1))

    @defer.inlineCallbacks
    def test_http_date_form(self) -> Any:
        """Retry-After as an HTTP date blocks the host until that date."""
        site = self.serve(1, lambda: http_date(self.clock.seconds() + 60))
        yield self.crawl(site)
        yield self.settle(lambda: self.pool_state()["waiting"] == 2 and self.crawler.processing == 0)
        yield self.advance(59)
        self.assertEqual(len(site.log), 1)
        yield self.advance(1)
        yield self.settle(lambda: self.pool_state()["done"] == 2)
        self.assertGreaterEqual(site.log[1][1], START + 60)

    @defer.inlineCallbacks
    def test_no_header_backs_off_growing(self) -> Any:
        """Without Retry-After, consecutive throttles of the host wait 1, 2, 4 s; an answer resets it."""
        site = self.serve(3)
        yield self.crawl(site)
        for _ in range(20):
            yield self.settle(lambda: self.crawler.processing == 0 and self.crawler.fetching == 0)
            yield self.advance(0.5, step=0.5)
        yield self.settle(lambda: self.pool_state()["done"] == 2)
        gaps = [b - a for (_, a), (_, b) in zip(site.log, site.log[1:])]
        self.assertEqual(gaps[:3], [1.0, 2.0, 4.0])
        self.assertLess(gaps[3], 0.5)  # the 200 ended the streak: no wait before the other URL
        self.assertEqual(self.stats.errors["throttled"], 3)

    @defer.inlineCallbacks
    def test_throttles_past_the_limit_fail_the_url(self) -> Any:
        """A host that throttles forever ends: after max_throttles throttles a URL's next one is a failure
        (failure_threshold 0: final)."""
        site = self.serve(10**6, lambda: "1")
        yield self.crawl(site, max_throttles=2)
        for _ in range(20):
            yield self.advance(1)
            yield self.settle(lambda: self.crawler.processing == 0 and self.crawler.fetching == 0)
            if self.pool_state()["failed"] == 2:
                break
        self.assertEqual(self.pool_state()["failed"], 2)
        self.assertEqual(len(site.log), 6)  # each URL: two free throttles, the third fails it

    @defer.inlineCallbacks
    def test_retry_after_capped(self) -> Any:
        """A Retry-After over max_retry_after blocks the host max_retry_after seconds."""
        site = self.serve(1, lambda: "100000")
        yield self.crawl(site, max_retry_after=60.0)
        yield self.settle(lambda: self.pool_state()["waiting"] == 2 and self.crawler.processing == 0)
        self.assertIn("retry after 60 s", self.why(site.log[0][0])["last_failure"]["reason"])
        yield self.advance(60, step=5)
        yield self.settle(lambda: self.pool_state()["done"] == 2)
        self.assertGreaterEqual(site.log[1][1], START + 60)


class Items:
    def write(self, item: Any, line: str | None = None) -> None:
        pass


class WorkerTests(Base):
    """The worker's pipeline (its own host slots and retries) with the real fetcher and parser."""

    def start(self, urls: list[str], **config: Any) -> Run:
        parser = ParsePool(reactor, rules_of({"sites": DEMO["sites"]}), 0)
        parser.startService()
        self.addCleanup(parser.stopService)
        clocked = ClockedReactor(reactor, self.clock)
        config = WorkerConfig(data_dir=self.mktemp(), failure_threshold=0, **config)
        steps = PageSteps(clocked, parser, max_retry_after=config.max_retry_after)
        self.pipeline = Pipeline(clocked, config, self.fetcher, steps, clock=self.clock)
        run = Run(SimpleNamespace(id="job1"), Items())
        run.add(urls)
        self.pipeline.start(run)
        return run

    @defer.inlineCallbacks
    def test_retry_after_blocks_the_host_for_every_url(self) -> Any:
        """A 429 with Retry-After: 30: neither URL of the host is asked again before 30 s; then both finish
        without a failure."""
        site = self.serve(1, lambda: "30")
        run = self.start([self.base + "/a", self.base + "/b"], per_host_concurrency=1)
        yield self.settle(lambda: run.stats["throttled"] == 1)
        yield self.advance(29.5, step=0.5)
        self.assertEqual(len(site.log), 1)
        yield self.advance(0.5)
        yield self.settle(lambda: run.settled.called)
        self.assertEqual(len(site.log), 3)
        self.assertTrue(all(at >= START + 30 for _, at in site.log[1:]))
        self.assertEqual((run.stats["failed"], run.stats["requests"]), (0, 3))

    @defer.inlineCallbacks
    def test_throttles_past_the_limit_fail_the_url(self) -> Any:
        """After max_throttles throttles, the next one counts as a failure (failure_threshold 0: failed)."""
        site = self.serve(10**6)
        run = self.start([self.base + "/a"], max_throttles=2, max_retry_after=1.0)
        for _ in range(10):
            yield self.advance(1)
            yield self.settle(lambda: run.active == 0)
            if run.settled.called:
                break
        self.assertTrue(run.settled.called)
        self.assertEqual((run.stats["failed"], run.stats["throttled"], len(site.log)), (1, 3, 3))
