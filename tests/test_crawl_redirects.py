"""Redirect targets in the fetch loop: claimed by the redirecting URL, never marked done behind their own fetch."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.trial import unittest

from spiderd.engine.steps import PageSteps
from spiderd.config import settings as cfg
from spiderd.frontier.crawler import CrawlService
from spiderd.demo.config import DEMO
from spiderd.fetch.fetcher import FetchResult
from spiderd.feed.items import ItemWriter
from spiderd.core.lifecycle import wait_until
from spiderd.fetch.parsepool import ParsePool
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool import open_memory_pool
from spiderd.core.stats import CrawlStats

from .helpers import result, rules_of

SITE = "http://shop.example"
A, B = f"{SITE}/item/1.html", f"{SITE}/item/2.html"  # A redirects to B
PAGE = b"<html><body><h1 class='title'>Two</h1><span class='price'>9</span></body></html>"


class ScriptedFetcher:
    """Answers each URL with a redirect to B or B's page; the fetches of ``held`` URLs wait for ``release``."""

    def __init__(self, held: set[str]) -> None:
        self.held = held
        self.waiting: dict[str, defer.Deferred[FetchResult]] = {}
        self.fetches: list[str] = []

    def fetch(self, url: str) -> defer.Deferred[FetchResult]:
        self.fetches.append(url)
        answer = FetchResult(url, 200, B, PAGE, "text/html")
        if url not in self.held:
            return defer.succeed(answer)
        d: defer.Deferred[FetchResult] = defer.Deferred()
        self.waiting[url] = d
        d.addCallback(lambda _: answer)
        return d

    def release(self, url: str) -> None:
        self.waiting.pop(url).callback(None)


class FlakyStore:
    """A page store whose first ``failures`` saves fail."""

    preset = None

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.saved: list[str] = []

    def save(self, url: str, urlhash: int, html: bytes, compressed: Any = None,
             digest: str | None = None) -> defer.Deferred[None]:
        if self.failures:
            self.failures -= 1
            return defer.fail(OSError("disk on fire"))
        self.saved.append(url)
        return defer.succeed(None)


class RedirectTests(unittest.TestCase):
    """A crawler over a memory pool, a scripted fetcher, the real parser and item writer."""

    timeout = 30

    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="spiderd-redirects-"))
        self.addCleanup(shutil.rmtree, self.dir, True)
        clock = Clock()
        clock.advance(1_000_000)
        self.pool = open_memory_pool(clock, politeness=Politeness(concurrency=10), failure_threshold=2)
        sites = [dict(DEMO["sites"][0], allowed_hosts=["shop.example"])]
        self.parser = ParsePool(reactor, rules_of({"sites": sites}), 0)
        self.parser.startService()
        self.addCleanup(self.parser.stopService)

    @defer.inlineCallbacks
    def start(self, fetcher: ScriptedFetcher, store: Any = None) -> Any:
        self.fetcher = fetcher
        self.items = ItemWriter(reactor, str(self.dir / "items"), flush_interval=0.01, pool=self.pool)
        self.items.startService()
        yield self.items.ready
        self.crawler = CrawlService(reactor, self.pool, fetcher, PageSteps(reactor, self.parser, store),
                                    self.parser.rules, CrawlStats(reactor), items=self.items, concurrency=4)
        self.crawler.startService()
        self.addCleanup(self.stop)

    @defer.inlineCallbacks
    def stop(self) -> Any:
        for url in list(self.fetcher.waiting):  # a failed test must not leave a fetch hanging
            self.fetcher.release(url)
        if self.crawler.running:
            yield self.crawler.stopService()
        if self.items.running:
            yield self.items.stopService()

    def state(self, url: str) -> str:
        return result(self.pool.why(url))["state"]

    def lines(self) -> list[str]:
        return [json.loads(line)["url"] for p in sorted((self.dir / "items").glob("*.jl")) for line in p.open()]

    @defer.inlineCallbacks
    def test_target_being_fetched_is_not_marked_done_by_the_redirect(self) -> Any:
        """B is being fetched when A redirects to it: A is done without an item, B stays B's own to finish."""
        fetcher = ScriptedFetcher(held={B})
        yield self.pool.addmany([B, A], detail=True)
        yield self.start(fetcher)
        yield wait_until(reactor, lambda: self.state(A) == "done", 0.01)
        self.assertEqual(self.crawler.stats.counts["redirect_duplicates"], 1)
        self.assertEqual(self.state(B), "pending")  # a kill -9 now must not leave B done without its item
        fetcher.release(B)
        yield wait_until(reactor, lambda: self.state(B) == "done", 0.01)
        yield self.stop()
        self.assertEqual(self.lines(), [B])

    @defer.inlineCallbacks
    def test_claim_taken_again_by_the_retried_redirect(self) -> Any:
        """A's first processing dies after claiming B; A's retry takes B's claim again and makes B's one item."""
        fetcher = ScriptedFetcher(held=set())
        store = FlakyStore(failures=1)
        yield self.pool.add(A, detail=True)
        yield self.start(fetcher, store)
        yield wait_until(reactor, lambda: self.state(A) == "done", 0.01)
        yield self.stop()
        self.assertEqual(len(self.flushLoggedErrors(defer.FirstError)), 1)
        self.assertEqual(fetcher.fetches, [A, A])
        self.assertEqual((self.state(B), store.saved, self.lines()), ("done", [B], [B]))
