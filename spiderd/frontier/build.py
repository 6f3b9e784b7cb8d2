"""The frontier's fetch loop built from its sections (the other frontier parts have their factories beside them:
``pool_service``, ``build_batcher``, ``schedulers``, ``sitemap_service``)."""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from spiderd.config.sections import FetchSection, PoolSection, SpiderdSection
from spiderd.core.stats import CrawlStats
from spiderd.engine.steps import PageSteps
from spiderd.engine.subrequests import HostTurns
from spiderd.feed.items import ItemWriter
from spiderd.feed.warcfiles import WarcWriter
from spiderd.fetch.fetcher import Fetcher
from spiderd.fetch.extract import Rules
from spiderd.frontier.crawler import CrawlService
from spiderd.contracts.pool import ICrawlPool

STOP_GRACE = 5.0  # seconds a stop waits for the fetches in flight beyond [fetch] timeout


def crawl_service(node: SpiderdSection, fetching: FetchSection, config: PoolSection, reactor: IReactorTime,
                  pool: ICrawlPool, fetcher: Fetcher, steps: PageSteps, rules: Rules, stats: CrawlStats, *,
                  items: ItemWriter | None, archive: WarcWriter | None,
                  detail_sink: Callable[[list[str]], Deferred[Any]] | None,
                  discovery: tuple[Any, ...] = (), turns: HostTurns | None = None) -> CrawlService:
    """The fetch loop over the node's page engine (``steps``): ``[fetch]`` concurrency and conditional GET;
    ``[pool]`` hub share and linkbase; ``[spiderd]`` exit_when_done; ``turns``: the pool's politeness, for
    rendered pages' sub-requests."""
    return CrawlService(
        reactor, pool, fetcher, steps, rules, stats, items=items, archive=archive,
        detail_sink=detail_sink, concurrency=fetching.concurrency, exit_when_done=node.exit_when_done,
        pull_batch=config.redis_pop_batch if config.backend == "redis" else 1,
        pull_ahead=min(config.redis_pop_ahead, fetching.concurrency) if config.backend == "redis" else 0,
        max_queue_wait=config.pending_threshold - fetching.timeout,  # a lease outlasts the wait and the fetch
        stop_timeout=fetching.timeout + STOP_GRACE, linkbase=config.linkbase, hub_percent=config.hub_percent,
        conditional_get=fetching.conditional_get, discovery=discovery, turns=turns)
