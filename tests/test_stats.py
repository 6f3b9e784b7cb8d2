"""The progress and summary lines (spiderd.core.stats.ProgressLogger) on an injected clock."""

from __future__ import annotations

from typing import Any

from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial import unittest

from spiderd.frontier.pool import open_memory_pool
from spiderd.core.stats import CrawlStats, ProgressLogger


class ProgressTests(unittest.TestCase):
    """Lines an operator reads every log_interval seconds, and at the end."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.pool = open_memory_pool(self.clock)
        self.stats = CrawlStats(self.clock)

    def lines(self, extra: dict[str, Any] | None = None, stop: bool = False) -> list[str]:
        logger = ProgressLogger(self.stats, self.pool, self.clock, 60, extra or {})
        with capturedLogs() as events:
            logger.startService()
            self.clock.advance(60)
            if stop:
                self.successResultOf(logger.stopService())
            elif logger.running:
                logger.stopService()
        return [formatEvent(e) for e in events if e.get("log_namespace") == "spiderd.core.stats"]

    def test_no_host_waiting(self) -> None:
        """With nothing queued the largest queue is "none", not ['', 0]."""
        line = self.lines()[0]
        self.assertIn("largest=none", line)
        self.assertNotIn("['', 0]", line)

    def test_largest_host(self) -> None:
        """The largest queue is host (count)."""
        self.pool.addmany([f"http://a.example/{i}" for i in range(3)] + ["http://b.example/1"])
        self.assertIn("largest=a.example (3)", self.lines()[0])

    def test_summary_says_who_did_what(self) -> None:
        """The summary names the crawler's items and pages, and the worker's apart."""
        worker = {"worker": lambda: {"pages": 990, "items": 990, "jobs_running": 0}}
        summary = [line for line in self.lines(worker, stop=True) if line.startswith("Summary")][0]
        self.assertIn("by the crawler: 0 items, 0 pages stored", summary)
        self.assertIn("worker: pages=990, items=990", summary)
