"""Seed 003 as what it is: a Scrapy spider middleware that sends one rule's requests in batches to Scrapyd nodes.

Enable it in a Scrapy project that keeps its own CrawlSpider as the frontier::

    SPIDER_MIDDLEWARES = {"spiderd.contrib.scrapy.BatchMiddleware": 50}
    DISTRIBUTED_TARGET_RULE = 1                      # the index of the CrawlSpider rule whose requests go out
    DISTRIBUTED_TARGET_HOSTS = ["node1:6800", "http://user:pass@node2:6800"]
    DISTRIBUTED_BATCH_SIZE = 1000
    DISTRIBUTED_TARGET_FEED_URL = "ftp://user:pass@spark/%(batch)s_%(name)s_%(time)s.jl"
    JOBDIR = "crawls/shop-1"                         # where the seen set and the unsent batches are kept

The GET requests of rule ``DISTRIBUTED_TARGET_RULE`` (CrawlSpider's ``meta["rule"]``) are not fetched here: they
are deduplicated, cut into batches and POSTed to ``schedule.json`` of the targets in turn (round robin by batch
number), with ``project`` (``DISTRIBUTED_TARGET_PROJECT``, else ``BOT_NAME``), ``spider`` (this spider's name),
``batch`` (a number unique across runs), ``setting=FEED_URI=...`` and ``setting=DISTRIBUTED_START_URLS=[...]``, as
seed 003 does: one tracked Deferred per batch, and the spider's close waits for them all (a ``DeferredList``).
What seed 003 lacked, spiderd's batcher (:class:`spiderd.frontier.batcher.Batcher`, which this middleware runs)
gives it:

- the seen set persists across runs: in ``JOBDIR/spiderd-batches/`` (a LevelDB store, with the batch numbers), so
  a resumed crawl sends no URL twice; without JOBDIR it lives in memory for the run (a warning says so);
- URLs are written to a spool before they count as seen, and a batch that no target accepted stays spooled, is
  retried on the next target after a back-off, and is sent by the next run (with the same job id: a spiderd
  worker runs it once);
- no batch's ``DISTRIBUTED_START_URLS`` exceeds ``DISTRIBUTED_MAX_SETTING_BYTES`` (100,000; Scrapyd passes each
  setting as one command-line argument, and Linux refuses one over 128 KiB: Scrapyd answers "ok" and loses the job);
- a partial batch goes out ``DISTRIBUTED_FLUSH_INTERVAL`` seconds (30) after its first URL, as well as at close.

``DISTRIBUTED_TIMEOUT`` (5 s, seed 003's) bounds each POST.  A bad value of any setting stops the crawl at once
with one line naming it.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from typing import Any, AsyncIterator, Iterable, Iterator

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.http import Request
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from spiderd.config.sections import BatchSection
from spiderd.frontier.batcher import Batcher
from spiderd.frontier.pool import open_leveldb_pool, open_memory_pool

MAX_SETTING_BYTES = 131_000  # under Linux's 128 KiB for one argument, with room for the setting's name


class BatchSettingError(ValueError):
    """A DISTRIBUTED_* setting the middleware cannot work with; the message names it."""


def batch_section(settings: Any) -> BatchSection:
    """The batcher's configuration from a crawler's Scrapy ``settings`` (raises BatchSettingError)."""
    targets = tuple(str(t).strip() for t in settings.getlist("DISTRIBUTED_TARGET_HOSTS") if str(t).strip())
    if not targets:
        raise NotConfigured("DISTRIBUTED_TARGET_HOSTS is empty: no Scrapyd node to send batches to")
    section = BatchSection(
        targets=targets,
        project=settings.get("DISTRIBUTED_TARGET_PROJECT") or settings.get("BOT_NAME") or "scrapybot",
        feed_uri=settings.get("DISTRIBUTED_TARGET_FEED_URL") or "",
        size=_number(settings, "DISTRIBUTED_BATCH_SIZE", 1000, 1, 10**7, int),
        flush_interval=_number(settings, "DISTRIBUTED_FLUSH_INTERVAL", 30.0, 0.001, 86400.0, float),
        timeout=_number(settings, "DISTRIBUTED_TIMEOUT", 5.0, 0.001, 3600.0, float),
        max_setting_bytes=_number(settings, "DISTRIBUTED_MAX_SETTING_BYTES", 100_000, 1000, MAX_SETTING_BYTES, int),
    )
    return section


def _number(settings: Any, name: str, default: Any, low: Any, high: Any, kind: type) -> Any:
    raw = settings.get(name, default)
    try:
        value = kind(raw)
    except (TypeError, ValueError):
        value = None
    if value is None or not low <= value <= high:
        raise BatchSettingError(f"{name} is invalid: expected a number from {low} to {high}, got {raw!r}")
    return value


class BatchMiddleware:
    """Seed 003's spider middleware, over spiderd's batcher (see the module's docstring)."""

    def __init__(self, crawler: Any, reactor: Any = None, clock: IReactorTime | None = None) -> None:
        """``reactor`` (default: the running one) does the I/O; ``clock`` (default: the reactor) the timers."""
        settings = crawler.settings
        self.rule = settings.getint("DISTRIBUTED_TARGET_RULE", -1)
        self.config = batch_section(settings)
        self.jobdir = settings.get("JOBDIR") or ""
        self._reactor = reactor
        self._clock = clock
        self._crawler = crawler
        self.batcher: Batcher | None = None
        self._pool: Any = None
        self._adds: list[Deferred[Any]] = []
        self.diverted = 0
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Any) -> BatchMiddleware:
        return cls(crawler)

    # -- the spider's life ------------------------------------------------------------------------------

    def spider_opened(self, spider: Any) -> None:
        """Open the seen set and the spool (in JOBDIR, or for this run only) and start the batcher; the spool's
        batches left by a run before are sent again."""
        reactor = self._reactor
        if reactor is None:
            from twisted.internet import reactor  # (the one Scrapy installed and runs)
        clock = self._clock or reactor
        if self.jobdir:
            state = os.path.join(self.jobdir, "spiderd-batches")
            self._pool = open_leveldb_pool(os.path.join(state, "seen"), clock)
            spool = os.path.join(state, "spool")
        else:
            spider.logger.warning("BatchMiddleware: no JOBDIR: the seen set and unsent batches are kept for this run "
                                  "only (set JOBDIR to keep them across runs)")
            self._pool = open_memory_pool(clock)
            spool = tempfile.mkdtemp(prefix="spiderd-batches-")
        config = replace(self.config, spider=spider.name)
        self.batcher = Batcher(reactor, self._pool, spool, config, clock=clock, stop_timeout=max(30.0, config.timeout))
        self.batcher.startService()
        spider.logger.info("BatchMiddleware: requests of rule %d go in batches of %d to %s", self.rule, config.size,
                           ", ".join(config.targets))

    async def spider_closed(self, spider: Any, reason: str = "") -> None:
        """Scrapy's spider_closed: the crawl waits for :meth:`close`."""
        from scrapy.utils.defer import maybe_deferred_to_future

        await maybe_deferred_to_future(self.close(spider))

    def close(self, spider: Any) -> Deferred[Any]:
        """Seal the open batch and wait for every POST (the batcher's DeferredList); what no target took stays in
        the spool for the next run."""
        d = defer.DeferredList(self._adds, consumeErrors=True)
        d.addCallback(lambda _: self.batcher.stopService() if self.batcher is not None else None)
        d.addBoth(self._close_pool, spider)
        return d

    def _close_pool(self, result: Any, spider: Any) -> Any:
        if self.batcher is not None:
            status = self.batcher.status()
            spider.logger.info("BatchMiddleware: %d URLs sent in %d batches; %d batches left in the spool",
                               status["urls_sent"], status["sent"], status["spooled"])
        if self._pool is not None:
            self._pool.close()
        return result

    # -- requests ---------------------------------------------------------------------------------------

    def process_spider_output(self, response: Any, result: Iterable[Any], spider: Any = None) -> Iterator[Any]:
        """(``spider``: passed by Scrapy before 2.14, which no longer does.)"""
        diverted: list[str] = []
        for x in result:
            if self._diverts(x):
                diverted.append(x.url)
            else:
                yield x
        self._send(diverted, spider or self._crawler.spider)

    async def process_spider_output_async(self, response: Any, result: AsyncIterator[Any],
                                          spider: Any = None) -> AsyncIterator[Any]:
        diverted: list[str] = []
        async for x in result:
            if self._diverts(x):
                diverted.append(x.url)
            else:
                yield x
        self._send(diverted, spider or self._crawler.spider)

    def _diverts(self, x: Any) -> bool:
        """A GET request of the target rule (seed 003 supports simple GET requests only)."""
        return (self.rule >= 0 and isinstance(x, Request) and x.meta.get("rule") == self.rule
                and x.method == "GET")

    def _send(self, urls: list[str], spider: Any) -> None:
        """Hand one response's diverted URLs to the batcher (deduplicated and spooled there)."""
        if not urls or self.batcher is None:
            return
        self.diverted += len(urls)
        d = self.batcher.add(urls)
        d.addErrback(lambda f: spider.logger.error("BatchMiddleware: %d URLs not batched: %s", len(urls),
                                                   f.getErrorMessage()))
        self._adds.append(d)
        d.addBoth(self._added, d)

    def _added(self, result: Any, d: Deferred[Any]) -> Any:
        if d in self._adds:
            self._adds.remove(d)
        return result
