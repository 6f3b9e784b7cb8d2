"""The composition root: ``twistd spiderd`` options and ``makeService``, the only place services are wired."""

from __future__ import annotations

import sys
from typing import Any

from twisted.application.service import IService
from twisted.python import usage

from spiderd.config import settings as cfg


class Options(usage.Options):
    """``twistd -n spiderd [--config FILE] [--role ROLE] [--demo]``."""

    optFlags = [
        ["demo", None, "Crawl the bundled demo site on loopback to completion (starts from a clean demo data dir)."],
        ["exit-when-done", None, "Stop when nothing is left to crawl."],
    ]
    optParameters = [
        ["config", "c", None, "Path to the spiderd TOML configuration."],
        ["role", "r", None, "all, frontier or worker (overrides spiderd.role)."],
        ["data-dir", "d", None, "Data directory (overrides spiderd.data_dir)."],
    ]

    def postOptions(self) -> None:
        if not self["demo"] and not self["config"]:
            raise usage.UsageError("give --config FILE (see etc/spiderd.toml), or --demo")


def makeService(options: Options, reactor: Any = None) -> IService:
    """Build the service tree; a bad configuration exits with one line naming file and key, and status 2."""
    if reactor is None:
        from twisted.internet import reactor as global_reactor

        reactor = global_reactor
    try:
        settings = _settings(options)
        cfg.check_data_dir(settings)
        top = build(settings, reactor, demo=bool(options["demo"]), signals=True)
        top.on_start_failure = lambda service, error: _fatal(reactor, service, error)
        return top
    except cfg.ConfigError as e:
        sys.stderr.write(f"spiderd: configuration error: {e}\n")
        raise SystemExit(2) from None


def _fatal(reactor: Any, service: Any, error: Exception) -> None:
    """A service could not start (a port in use...): stop what started, then exit with status 1."""
    import os

    from twisted.logger import Logger

    Logger().critical("spiderd cannot start: {service}: {error}; stopping", service=service.name, error=error)

    def exit_1() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)

    reactor.addSystemEventTrigger("after", "shutdown", exit_1)
    reactor.callLater(0, reactor.stop)


def _settings(options: Options) -> cfg.Settings:
    overrides: dict[str, Any] = {}
    if options["role"]:
        overrides["spiderd.role"] = options["role"]
    if options["data-dir"]:
        overrides["spiderd.data_dir"] = options["data-dir"]
    if options["exit-when-done"]:
        overrides["spiderd.exit_when_done"] = True
    if options["demo"]:
        from spiderd.demo import config as demo_config

        settings = demo_config.settings(overrides)
        demo_config.clean(settings.data_dir)
        return settings
    return cfg.load(options["config"], overrides)


def build(settings: cfg.Settings, reactor: Any, demo: bool = False, signals: bool = False) -> IService:
    """Wire the services of one node: they start in this order (after the pool is ready) and stop in reverse.

    ``signals``: handle SIGHUP (twistd's makeService asks; tests building services directly do not)."""
    from spiderd.core.blocking import Blocking
    from spiderd.core.lifecycle import Closer, OrderedMultiService
    from spiderd.fetch.parsepool import ParsePool
    from spiderd.core.stats import CrawlStats
    from spiderd.ops.systemd import SystemdNotifier

    top = OrderedMultiService()
    blocking = Blocking(reactor)  # first to start, last to stop: every lane of blocking work
    blocking.setServiceParent(top)
    top.blocking = blocking  # type: ignore[attr-defined]
    stats = CrawlStats(reactor)
    pool = _pool_service(settings, reactor, top) if settings.role != "worker" else None
    store = _store(settings, reactor, top)
    parser = ParsePool(reactor, settings, settings.parse_workers, max_rss=settings.parse_max_rss_mb * 2**20)
    parser.setServiceParent(top)
    fetcher = _fetcher(settings, reactor, pool)
    Closer("fetcher", fetcher.close).setServiceParent(top)
    worker = _worker(settings, reactor, fetcher, parser, store, top, stats)
    if pool is not None:
        _crawl(settings, reactor, top, pool, fetcher, parser, store, stats, worker, demo)
    _api(settings, reactor, top, stats, pool, fetcher, parser, signals)
    crawler = top.namedServices.get("crawler")
    SystemdNotifier(reactor, status=lambda: f"{stats.counts['pages']} pages",
                    healthy=lambda: crawler is None or crawler.healthy).setServiceParent(top)
    return top


def _crawl(settings: cfg.Settings, reactor: Any, top: Any, pool: Any, fetcher: Any, parser: Any, store: Any,
           stats: Any, worker: Any, demo: bool) -> None:
    """The frontier: items, batcher, seeds, (demo site), progress, and the fetch loop last."""
    from spiderd.frontier.crawler import CrawlService
    from spiderd.feed.items import ItemWriter
    from spiderd.frontier.seeds import SeedService
    from spiderd.core.stats import ProgressLogger

    items = ItemWriter(reactor, settings.path(settings.items_dir), settings.items_rotate_count, pool=pool)
    items.setServiceParent(top)
    batcher = _batcher(settings, reactor, pool, worker, top, parser.rules)
    seeds = SeedService(pool, settings.seeds, settings.hubs, settings.hub_refresh_span, store=store,
                        state_path=settings.path("hubs-added.json"))
    seeds.setServiceParent(top)
    _scheduler(settings, reactor, top, pool, stats)
    if demo:
        from spiderd.demo.config import DemoSiteService

        DemoSiteService(reactor, pool, settings).setServiceParent(top)
    extra = {"batches": batcher.status} if batcher is not None else {}
    if worker is not None:
        extra["worker"] = worker.status
        extra["feeds"] = worker.shipper.status
    ProgressLogger(stats, pool, reactor, settings.log_interval, extra).setServiceParent(top)
    crawler = CrawlService(
        reactor, pool, fetcher, parser, parser.rules, stats, store=store, items=items,
        detail_sink=batcher.add if batcher is not None else None, concurrency=settings.concurrency,
        exit_when_done=settings.exit_when_done, stop_timeout=settings.timeout + 5, linkbase=settings.linkbase,
        hub_percent=settings.hub_percent,
    )
    crawler.setName("crawler")
    crawler.setServiceParent(top)
    if settings.exit_when_done:
        crawler.finished.addCallback(lambda _: _when_idle(batcher, worker, reactor))


def _scheduler(settings: cfg.Settings, reactor: Any, top: Any, pool: Any, stats: Any) -> None:
    """The seed timer (``pool.seed_cron``) and the recrawler (sites with recrawl intervals), when configured."""
    from spiderd.frontier.cron import parse
    from spiderd.frontier.scheduler import RecrawlPolicy, Recrawler, SeedTimer

    if settings.seed_cron:
        SeedTimer(reactor, pool, parse(settings.seed_cron)).setServiceParent(top)
    policy = RecrawlPolicy.from_sites(settings.sites)
    if policy.intervals:
        ratios = {"list": settings.recrawl_list_ratio, "detail": settings.recrawl_detail_ratio}
        Recrawler(reactor, pool, policy, lambda: stats.counts["requests"], every=settings.recrawl_every,
                  batch=settings.recrawl_batch, ratios=ratios).setServiceParent(top)


def _when_idle(batcher: Any, worker: Any, reactor: Any) -> Any:
    """Stop once the crawl is done and, with batches, once every batch was accepted and (here) its job ran."""
    from spiderd.core.lifecycle import wait_until

    if batcher is None:
        return reactor.stop()

    def idle() -> bool:
        return batcher.idle() and (worker is None or worker.idle())

    d = batcher.flush()
    d.addCallback(lambda _: wait_until(reactor, idle))
    return d.addCallback(lambda _: reactor.stop())


def _pool_service(settings: cfg.Settings, reactor: Any, top: Any) -> Any:
    from spiderd.frontier.pool.service import pool_service

    service = pool_service(settings, reactor)
    service.setServiceParent(top)
    return service.pool


def _store(settings: cfg.Settings, reactor: Any, top: Any) -> Any:
    from spiderd.store import open_store

    if settings.store_url == "none":
        return None
    store = open_store(settings.store_url, settings.data_dir, reactor, preset=settings.store_preset,
                       batch_size=settings.store_batch_size)
    store.setServiceParent(top)
    return store


def _worker(settings: cfg.Settings, reactor: Any, fetcher: Any, parser: Any, store: Any, top: Any,
            stats: Any) -> Any:
    """The Scrapyd-compatible worker and its feed shipper: in the worker role, and in "all" with a local target."""
    if settings.role != "worker" and not (settings.role == "all" and "local" in settings.batch_targets):
        return None
    from spiderd.feed.shipper import FeedShipper
    from spiderd.worker import WorkerConfigError, build_worker

    shipper = FeedShipper(reactor, settings.path("spool"), retry_max=settings.feed_retry_max,
                          stop_timeout=settings.feed_stop_timeout, lane=top.blocking.lane("feed", 3))
    shipper.setServiceParent(top)
    try:
        worker = build_worker(settings, reactor, fetcher, parser, store, shipper, top.blocking.lane("worker-io"),
                              stats)
    except WorkerConfigError as e:
        raise cfg.ConfigError(f"{settings.source}: {e}") from None
    worker.setServiceParent(top)
    if fetcher.robots is not None:
        fetcher.robots.add_delay_listener(worker.set_host_delay)
    return worker


def _batcher(settings: cfg.Settings, reactor: Any, pool: Any, worker: Any, top: Any, rules: Any) -> Any:
    """Detail URLs to workers in batches; none (details fetched here) when batch.targets is empty."""
    if not settings.batch_targets:
        return None
    from spiderd.frontier.batcher import BatchConfig, Batcher

    if "local" in settings.batch_targets and worker is None:
        raise cfg.ConfigError(f"{settings.source}: batch.targets: \"local\" needs the all role (this node's worker)")
    config = BatchConfig(
        settings.batch_targets, project=settings.worker_project if worker else settings.batch_project,
        spider=settings.batch_spider or (settings.sites[0].name if settings.sites else "default"),
        feed_uri=settings.batch_feed_uri or None, batch_size=settings.batch_size,
        flush_interval=settings.batch_flush_interval, timeout=settings.batch_timeout,
        max_setting_bytes=settings.batch_max_setting_bytes,
    )
    spider_of = None
    if not settings.batch_spider:  # one spider per site: each batch names the site of its URLs
        spider_of = lambda url: getattr(rules.site_for(url), "name", config.spider)  # noqa: E731
    batcher = Batcher(reactor, pool, settings.path("batches"), config, local=worker.local_target if worker else None,
                      spider_of=spider_of, lane=top.blocking.lane("batcher"))
    batcher.setServiceParent(top)
    return batcher


def _api(settings: cfg.Settings, reactor: Any, top: Any, stats: Any, pool: Any, fetcher: Any, parser: Any,
         signals: bool) -> None:
    """The HTTP API (status, metrics, status page, admin) over what this role has; SIGHUP reloads under twistd."""
    from spiderd.ops.reload import ReloadService
    from spiderd.ops.web import ApiService, Auth, Node

    named = top.namedServices
    worker = named.get("worker")
    node = Node(settings.role, reactor, stats=stats, pool=pool, crawler=named.get("crawler"), seeds=named.get("seeds"),
                batcher=named.get("batcher"), worker=worker, shipper=worker.shipper if worker is not None else None,
                store=named.get("page-store"), recrawler=named.get("recrawler"), robots=fetcher.robots,
                rules=parser.rules, max_url_length=settings.max_url_length)
    auth = Auth(settings.api_token, settings.api_username, settings.api_password)
    ApiService(reactor, node, bind=settings.api_bind, port=settings.api_port, auth=auth).setServiceParent(top)
    if signals:
        from spiderd.core.lifecycle import calm_repeated_stop_signals

        ReloadService(reactor, settings, named.get("seeds")).setServiceParent(top)
        calm_repeated_stop_signals(reactor)


def _fetcher(settings: cfg.Settings, reactor: Any, pool: Any) -> Any:
    from spiderd.fetch.fetcher import Fetcher, fetch_config

    return Fetcher(reactor, fetch_config(settings), on_crawl_delay=pool.set_host_delay if pool is not None else None)
