"""The composition root: ``twistd spiderd`` options and ``makeService``, the only place services are wired.

Each part is made by its own factory, beside it (``pool_service``, ``fetch_config``, ``build_worker``,
``build_batcher``, ``schedulers``); here they are only put together, in the order they start."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, cast

from twisted.application.service import IService, Service
from twisted.python import usage

from spiderd.config import settings as cfg
from spiderd.core import lifecycle
from spiderd.core.blocking import Blocking
from spiderd.core.reactors import INodeReactor
from spiderd.core.stats import CrawlStats, ProgressLogger
from spiderd.demo import config as demo_config
from spiderd.feed.items import ItemWriter
from spiderd.feed.warcfiles import WarcWriter
from spiderd.feed.shipper import FeedShipper
from spiderd.fetch.fetcher import Fetcher, fetch_config
from spiderd.fetch.parsepool import ParsePool
from spiderd.frontier.batcher import Batcher, build_batcher
from spiderd.frontier.crawler import CrawlService
from spiderd.frontier.interfaces import IURLPool
from spiderd.frontier.pool.service import pool_service
from spiderd.frontier.scheduler import Recrawler, schedulers
from spiderd.frontier.seeds import SeedService
from spiderd.frontier.sitemapservice import sitemap_service
from spiderd.ops.reload import ReloadService
from spiderd.ops.systemd import SystemdNotifier
from spiderd.ops.web import ApiService, Auth, Node
from spiderd.store import PageStore, ShardedStore, open_store
from spiderd.worker import WorkerConfigError, WorkerService, build_worker

S = TypeVar("S", bound="Service | None")  # a service, or None for a part this configuration has not


class Options(usage.Options):
    """``twistd -n spiderd [--config FILE] [--role ROLE] [--demo]``."""

    optFlags: ClassVar[list[list[Any]]] = [
        ["demo", None, "Crawl the bundled demo site on loopback to completion (starts from a clean demo data dir)."],
        ["exit-when-done", None, "Stop when nothing is left to crawl."],
    ]
    optParameters: ClassVar[list[list[Any]]] = [
        ["config", "c", None, "Path to the spiderd TOML configuration."],
        ["role", "r", None, "all, frontier or worker (overrides spiderd.role)."],
        ["data-dir", "d", None, "Data directory (overrides spiderd.data_dir)."],
    ]

    def postOptions(self) -> None:
        if not self["demo"] and not self["config"]:
            raise usage.UsageError("give --config FILE (see etc/spiderd.toml), or --demo")


def makeService(options: Options, reactor: INodeReactor | None = None) -> IService:
    """Build the service tree; a bad configuration exits with one line naming file and key, and status 2."""
    if reactor is None:  # importing the global reactor installs the default one: here, never at import time
        from twisted.internet import reactor as global_reactor

        reactor = cast(INodeReactor, global_reactor)  # Twisted types it by fewer of the interfaces it provides
    try:
        settings = _settings(options)
        cfg.check_data_dir(settings)
        return build(settings, reactor, bool(options["demo"]), True, lifecycle.exit_on_start_failure(reactor))
    except cfg.ConfigError as e:
        sys.stderr.write(f"spiderd: configuration error: {e}\n")
        raise SystemExit(2) from None


def _settings(options: Options) -> cfg.Settings:
    overrides: dict[str, Any] = {}
    if options["role"]:
        overrides["spiderd.role"] = options["role"]
    if options["data-dir"]:
        overrides["spiderd.data_dir"] = options["data-dir"]
    if options["exit-when-done"]:
        overrides["spiderd.exit_when_done"] = True
    if not options["demo"]:
        return cfg.load(options["config"], overrides)
    settings = demo_config.settings(overrides)
    demo_config.clean(settings.data_dir)
    return settings


@dataclass(frozen=True)
class Base:
    """What every role's parts are built on (``pool`` is None in the worker role, ``store`` with ``url = none``)."""

    settings: cfg.Settings
    reactor: INodeReactor
    top: lifecycle.OrderedMultiService
    blocking: Blocking
    stats: CrawlStats
    pool: IURLPool | None
    store: PageStore | ShardedStore | None
    parser: ParsePool
    fetcher: Fetcher

    def add(self, service: S) -> S:
        """``service`` (unless None) as the next child of ``top``, to start after those before; returns it."""
        if service is not None:
            service.setServiceParent(self.top)
        return service


@dataclass(frozen=True)
class Frontier:
    """The frontier's parts that the API and systemd read (all None in the worker role)."""

    crawler: CrawlService | None = None
    seeds: SeedService | None = None
    batcher: Batcher | None = None
    recrawler: Recrawler | None = None


def build(settings: cfg.Settings, reactor: INodeReactor, demo: bool = False, signals: bool = False,
          on_start_failure: Callable[[Any, BaseException], object] | None = None) -> lifecycle.OrderedMultiService:
    """Wire the services of one node: they start in this order (after the pool is ready) and stop in reverse.

    ``signals``: handle SIGHUP (twistd's makeService asks; tests building services directly do not)."""
    top = lifecycle.OrderedMultiService(on_start_failure)
    blocking = Blocking(reactor)  # first to start, last to stop: every lane of blocking work
    blocking.setServiceParent(top)
    pooled = pool_service(settings, reactor) if settings.role != "worker" else None
    pool = pooled.pool if pooled is not None else None
    store = None if settings.store_url == "none" else open_store(
        settings.store_url, settings.data_dir, reactor, preset=settings.store_preset,
        batch_size=settings.store_batch_size)
    parser = ParsePool(reactor, settings, settings.parse_workers, max_rss=settings.parse_max_rss_mb * 2**20)
    fetcher = Fetcher(reactor, fetch_config(settings), on_crawl_delay=pool.set_host_delay if pool is not None else None,
                      on_address=pool.set_host_group if pool is not None and settings.politeness == "ip" else None)
    base = Base(settings, reactor, top, blocking, CrawlStats(reactor), pool, store, parser, fetcher)
    for service in (pooled, store, parser, lifecycle.Closer("fetcher", fetcher.close)):
        base.add(service)
    worker = _worker(base)
    frontier = _frontier(base, worker, demo) if pool is not None else Frontier()
    _api(base, frontier, worker, signals)
    base.add(SystemdNotifier(reactor, status=lambda: f"{base.stats.counts['pages']} pages",
                             healthy=lambda: frontier.crawler is None or frontier.crawler.healthy))
    return top


def _worker(base: Base) -> WorkerService | None:
    """The Scrapyd-compatible worker and its feed shipper: in the worker role, and in "all" with a local target
    (which, with ``[items] skip_duplicate_content``, claims its pages' content digests in the pool)."""
    s = base.settings
    if s.role != "worker" and not (s.role == "all" and "local" in s.batch_targets):
        return None
    shipper = base.add(FeedShipper(base.reactor, s.path("spool"), retry_max=s.feed_retry_max,
                                   stop_timeout=s.feed_stop_timeout, lane=base.blocking.lane("feed", 3)))
    try:
        claim = base.pool.claim_content if base.pool is not None and s.skip_duplicate_content else None
        return base.add(build_worker(s, base.reactor, base.fetcher, base.parser, base.store, shipper,
                                     base.blocking.lane("worker-io"), base.stats, claim))
    except WorkerConfigError as e:
        raise cfg.ConfigError(f"{s.source}: {e}") from None


def _frontier(base: Base, worker: WorkerService | None, demo: bool) -> Frontier:
    """The frontier: items, batcher, seeds, timers, (demo site), progress, sitemaps, and the fetch loop last."""
    s, reactor, pool, stats = base.settings, base.reactor, base.pool, base.stats
    assert pool is not None  # (built only with a pool)
    items = base.add(ItemWriter(reactor, s.path(s.items_dir), s.items_rotate_count, pool=pool)) \
        if s.items_format != "warc" else None
    archive = base.add(WarcWriter(reactor, s.path(s.items_dir), base.blocking.lane("warc"),
                                  rotate_count=s.items_rotate_count, rotate_bytes=s.warc_rotate_mb * 2**20)) \
        if s.items_format != "jsonl" else None
    batcher = base.add(build_batcher(s, reactor, pool, worker, base.parser.rules, base.blocking.lane("batcher")))
    seeds = base.add(SeedService(pool, s.seeds, s.hubs, s.hub_refresh_span, store=base.store,
                                 state_path=s.path("hubs-added.json")))
    seed_timer, recrawler = schedulers(s, reactor, pool, lambda: stats.counts["requests"])
    for service in (seed_timer, recrawler, demo_config.DemoSiteService(reactor, pool, s) if demo else None):
        base.add(service)
    extra = {"batches": batcher.status} if batcher is not None else {}
    if worker is not None:
        extra.update(worker=worker.status, feeds=worker.shipper.status)
    base.add(ProgressLogger(stats, pool, reactor, s.log_interval, extra))
    sitemaps = base.add(sitemap_service(s, reactor, pool, base.fetcher, base.blocking.lane("sitemaps"), stats,
                                        detail_sink=batcher.add if batcher is not None else None))
    crawler = base.add(CrawlService(
        reactor, pool, base.fetcher, base.parser, base.parser.rules, stats, store=base.store, items=items, archive=archive,
        detail_sink=batcher.add if batcher is not None else None, concurrency=s.concurrency,
        exit_when_done=s.exit_when_done, stop_timeout=s.timeout + 5, linkbase=s.linkbase, hub_percent=s.hub_percent,
        max_retry_after=s.max_retry_after, conditional_get=s.conditional_get,
        discovery=(sitemaps,) if sitemaps is not None else (),
        skip_duplicate_content=s.skip_duplicate_content))
    if s.exit_when_done:
        crawler.finished.addCallback(lambda _: _when_idle(batcher, worker, reactor))
    return Frontier(crawler, seeds, batcher, recrawler)


def _when_idle(batcher: Batcher | None, worker: WorkerService | None, reactor: INodeReactor) -> Any:
    """Stop once the crawl is done and, with batches, once every batch was accepted and (here) its job ran."""
    if batcher is None:
        return reactor.stop()
    d = batcher.flush()
    activity = [batcher.settled] + ([worker.settled] if worker is not None else [])
    d.addCallback(lambda _: lifecycle.wait_idle(
        reactor, lambda: batcher.idle() and (worker is None or worker.idle()), *activity))
    return d.addCallback(lambda _: reactor.stop())


def _api(base: Base, frontier: Frontier, worker: WorkerService | None, signals: bool) -> None:
    """The HTTP API (status, metrics, status page, admin) over what this role has; SIGHUP reloads under twistd."""
    s = base.settings
    node = Node(s.role, base.reactor, stats=base.stats, pool=base.pool, crawler=frontier.crawler, seeds=frontier.seeds,
                batcher=frontier.batcher, worker=worker, shipper=worker.shipper if worker is not None else None,
                store=base.store, recrawler=frontier.recrawler, robots=base.fetcher.robots, rules=base.parser.rules,
                max_url_length=s.max_url_length)
    base.add(ApiService(base.reactor, node, bind=s.api_bind, port=s.api_port,
                        auth=Auth(s.api_token, s.api_username, s.api_password)))
    if signals:
        base.add(ReloadService(base.reactor, s, base.blocking.lane("reload"), frontier.seeds))
        lifecycle.calm_repeated_stop_signals(base.reactor)
