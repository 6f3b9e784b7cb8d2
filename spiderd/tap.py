"""The composition root: ``twistd spiderd`` options and ``makeService``, the only place services are wired."""

from __future__ import annotations

import sys
from typing import Any

from twisted.application.service import IService
from twisted.python import usage

from . import settings as cfg


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
        return build(settings, reactor, demo=bool(options["demo"]))
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
    if options["demo"]:
        from .demo import config as demo_config

        settings = demo_config.settings(overrides)
        demo_config.clean(settings.data_dir)
        return settings
    return cfg.load(options["config"], overrides)


def build(settings: cfg.Settings, reactor: Any, demo: bool = False) -> IService:
    """Wire the services of one node; they start in this order and stop in reverse."""
    from .crawler import CrawlService
    from .items import ItemWriter
    from .lifecycle import Closer, OrderedMultiService
    from .parsepool import ParsePool
    from .seeds import SeedService
    from .stats import CrawlStats, ProgressLogger
    from .store import open_store
    from .systemd import SystemdNotifier

    top = OrderedMultiService()
    pool = _open_pool(settings, reactor)
    Closer("pool", pool.close).setServiceParent(top)
    store = None
    if settings.store_url != "none":
        store = open_store(settings.store_url, settings.data_dir, reactor, preset=settings.store_preset,
                           batch_size=settings.store_batch_size)
        store.setServiceParent(top)
    items = ItemWriter(reactor, settings.path(settings.items_dir), settings.items_rotate_count)
    items.setServiceParent(top)
    parser = ParsePool(reactor, settings, settings.parse_workers)
    parser.setServiceParent(top)
    fetcher = _fetcher(settings, reactor, pool)
    Closer("fetcher", fetcher.close).setServiceParent(top)
    SeedService(pool, settings.seeds, settings.hubs, settings.hub_refresh_span).setServiceParent(top)
    if demo:
        from .demo.config import DemoSiteService

        DemoSiteService(reactor, pool, settings).setServiceParent(top)
    stats = CrawlStats(reactor)
    ProgressLogger(stats, pool, reactor, settings.log_interval).setServiceParent(top)
    crawler = CrawlService(
        reactor, pool, fetcher, parser, parser.rules, stats, store=store, items=items, concurrency=settings.concurrency,
        exit_when_done=settings.exit_when_done, stop_timeout=settings.timeout + 5,
    )
    crawler.setName("crawler")
    crawler.setServiceParent(top)
    if settings.exit_when_done:
        crawler.finished.addCallback(lambda _: reactor.stop())
    SystemdNotifier(reactor, status=lambda: f"{stats.counts['pages']} pages").setServiceParent(top)
    return top


def _open_pool(settings: cfg.Settings, reactor: Any) -> Any:
    from .politeness import Politeness
    from .pool import open_leveldb_pool, open_memory_pool

    overrides = {host: (rule.delay, rule.concurrency) for host, rule in settings.host_rules.items()}
    options = dict(
        politeness=Politeness(settings.per_host_delay, settings.per_host_concurrency, overrides),
        failure_threshold=settings.failure_threshold,
        pending_threshold=settings.pending_threshold,
        max_url_length=settings.max_url_length,
        max_urls_per_host=settings.max_urls_per_host,
    )
    if settings.pool_backend == "memory":
        return open_memory_pool(reactor, **options)
    try:
        return open_leveldb_pool(settings.path("pool"), reactor, **options)
    except Exception as e:  # plyvel.IOError when another spiderd holds the lock
        raise cfg.ConfigError(f"{settings.source}: spiderd.data_dir: cannot open the pool: {e}") from None


def _fetcher(settings: cfg.Settings, reactor: Any, pool: Any) -> Any:
    from .fetcher import FetchConfig, Fetcher
    from .robots import Robots

    config = FetchConfig(
        user_agent=settings.user_agent, connect_timeout=settings.connect_timeout, timeout=settings.timeout,
        max_body_size=settings.max_body_size, max_redirects=settings.max_redirects,
        per_host_connections=settings.per_host_concurrency, source_addresses=settings.source_addresses,
    )
    fetcher = Fetcher(reactor, config)
    if settings.robots:
        fetcher.robots = Robots(fetcher.fetch_raw, reactor, settings.user_agent, on_delay=pool.set_host_delay)
    return fetcher
