"""The fetch loop never dies silently: a pool that keeps failing is logged, counted and shown."""

from __future__ import annotations

from typing import Any

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.trial import unittest

from spiderd.frontier.crawler import FAILING_PULLS, CrawlService
from spiderd.frontier.pool import open_memory_pool
from spiderd.core.stats import CrawlStats
from spiderd.ops.web.node import _crawler


class BrokenPops:
    """A pool whose pops fail (as the hub pop did with refresh_span 1e400) until mended."""

    def __init__(self, clock: Clock) -> None:
        self.real = open_memory_pool(clock)
        self.broken = True
        self.pops = 0

    def pop(self, count: int, hub_percent: int = 50) -> Any:
        self.pops += 1
        if self.broken:
            return defer.fail(OverflowError("cannot convert float infinity to integer"))
        return self.real.pop(count, hub_percent)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class LoopTests(unittest.TestCase):
    """A CrawlService on a Clock; no fetch ever starts."""

    def test_failing_pops_are_counted_retried_and_shown(self) -> None:
        """Each heartbeat tries again; after FAILING_PULLS failures in a row the crawler is "failing"; a pop
        that works again makes it healthy."""
        clock = Clock()
        pool = BrokenPops(clock)
        stats = CrawlStats(clock)
        crawler = CrawlService(clock, pool, fetcher=None, parser=None, rules=None, stats=stats)
        with capturedLogs() as events:
            crawler.startService()
            for _ in range(FAILING_PULLS + 2):
                clock.advance(5)
        self.assertGreaterEqual(pool.pops, FAILING_PULLS)
        self.assertEqual(stats.errors["pull"], crawler.pull_failures)
        self.assertFalse(crawler.healthy)
        self.assertEqual(_crawler(type("N", (), {"crawler": crawler})())["state"], "failing")
        self.assertIn("OverflowError", crawler.last_error)
        self.assertEqual(sum(1 for e in events if "log_failure" in e), 1)  # one traceback, not one per try
        pool.broken = False
        clock.advance(5)
        self.assertTrue(crawler.healthy)
        crawler.stopService()
        self.assertEqual(len(self.flushLoggedErrors(OverflowError)), 1)
