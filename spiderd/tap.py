"""The composition root: ``twistd spiderd`` options and ``makeService``, the only place services are wired.

Each part is made by its own factory, beside it, from its own section of the settings (``pool_service``,
``fetch_config``, ``build_worker``, ``build_batcher``, ``schedulers``, ...); here they are only put together,
in the order they start."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from twisted.application.service import IService

from spiderd.core.memory import calm_gc, lasting_objects

with lasting_objects():  # the modules a node is made of: no collection walks them while they load
    from spiderd.config import settings as cfg
    from spiderd.config.changes import POLITENESS_KEYS, RECRAWL_SITE_KEYS, RENDER_KEYS, SITEMAP_KEYS
    from spiderd.contracts.pool import IURLPool
    from spiderd.core import lifecycle
    from spiderd.core.blocking import Blocking
    from spiderd.core.reactors import INodeReactor
    from spiderd.core.stats import CrawlStats, ProgressLogger
    from spiderd.core.storage import StorageGate
    from spiderd.demo import config as demo
    from spiderd.engine.politeness import Politeness
    from spiderd.engine.render import RenderPool, build_modes
    from spiderd.engine.steps import PageSteps
    from spiderd.engine.subrequests import HostTurns
    from spiderd.feed.items import ItemWriter
    from spiderd.feed.warcfiles import WarcWriter
    from spiderd.feed.writers import item_writers
    from spiderd.feed.shipper import feed_shipper
    from spiderd.fetch.fetcher import Fetcher, fetch_config
    from spiderd.fetch.fetchpool import FetchPool
    from spiderd.fetch.parsepool import ParsePool, parse_rules
    from spiderd.frontier.batcher import Batcher, LocalWorker, build_batcher
    from spiderd.frontier.build import crawl_service
    from spiderd.frontier.pool.service import pool_service, site_hops
    from spiderd.frontier.crawler import CrawlService
    from spiderd.frontier.scheduler import RecrawlPolicy, Recrawler, fetches_told, schedulers
    from spiderd.frontier.seeds import SeedService
    from spiderd.frontier.sharedsites import shared_sites
    from spiderd.frontier.sitemapservice import SitemapService, sitemap_service
    from spiderd.ops.options import Options
    from spiderd.ops.liveconfig import LiveConfig, Tuner, on_keys
    from spiderd.ops.reload import ReloadService
    from spiderd.ops.sitebook import SiteBook
    from spiderd.ops.sitetry import SiteTester
    from spiderd.ops.systemd import SystemdNotifier
    from spiderd.ops.web import Node, api_service
    from spiderd.store import PageStore, ShardedStore, page_store
    from spiderd.worker import WorkerService, build_worker, worker_config

__all__ = ["Options", "build", "makeService"]


def makeService(options: Options, reactor: INodeReactor | None = None) -> IService:
    """Build the service tree; a bad configuration exits with one line naming file and key, and status 2."""
    if reactor is None:  # importing the global reactor installs the default one: here, never at import time
        from twisted.internet import reactor as global_reactor

        reactor = cast(INodeReactor, global_reactor)  # Twisted types it by fewer of the interfaces it provides
    try:
        settings = demo.fresh(options.overrides()) if options["demo"] else cfg.load(options["config"], options.overrides())
        cfg.check_data_dir(settings)
        settings = cfg.with_overlay(settings)
        return build(settings, reactor, bool(options["demo"]), True, lifecycle.exit_on_start_failure(reactor))
    except cfg.ConfigError as e:
        sys.stderr.write(f"spiderd: configuration error: {e}\n")
        raise SystemExit(2) from None


@dataclass(frozen=True)
class Base:
    """The parts every role builds on (``pool`` is None in the worker role, ``store`` with ``url = none``)."""

    s: cfg.Settings
    reactor: INodeReactor
    top: lifecycle.OrderedMultiService
    blocking: Blocking
    stats: CrawlStats
    pool: IURLPool | None
    store: PageStore | ShardedStore | None
    parser: ParsePool
    fetcher: Fetcher
    steps: PageSteps
    turns: HostTurns | None = None  # the pool's politeness, for rendered pages' sub-requests (None: no pool)
    paced: Politeness | None = None  # the sub-requests' politeness of a fetch that passes none


@dataclass(frozen=True)
class Frontier:
    """The frontier's parts that the API, systemd and a change of the sites reach (all None in the worker role)."""

    crawler: CrawlService | None = None
    seeds: SeedService | None = None
    batcher: Batcher | None = None
    recrawler: Recrawler | None = None
    sitemaps: SitemapService | None = None


def build(s: cfg.Settings, reactor: INodeReactor, demo_site: bool = False, signals: bool = False,
          on_start_failure: Callable[[Any, BaseException], object] | None = None) -> lifecycle.OrderedMultiService:
    """Wire the services of one node: they start in this order (after the pool is ready) and stop in reverse.

    ``signals``: the daemon's own (twistd's makeService asks; tests building services directly do not): handle
    SIGHUP, and calm the garbage collector once running and again once the seeds are in the pool."""
    base = _base(s, reactor, lifecycle.OrderedMultiService(on_start_failure))
    role, add = s.spiderd.role, base.top.add
    worker = _worker(base) if role == "worker" or (role == "all" and "local" in s.batch.targets) else None
    frontier = _frontier(base, worker, demo_site) if base.pool is not None else Frontier()
    crawler = frontier.crawler
    followers = [base.fetcher.set_sites] + ([base.steps.fetchers.set_sites] if base.steps.fetchers else [])
    followers += [frontier.sitemaps.set_sites] if frontier.sitemaps is not None else []
    live = add(LiveConfig(s, reactor, base.blocking.lane("config"), base.parser.rules, followers, frontier.seeds,
                          renders=_render_pool(base) is not None,
                          tuners=_tuners(base, frontier, worker),
                          live_keys=(SITEMAP_KEYS if frontier.sitemaps is not None else frozenset())
                          | (RECRAWL_SITE_KEYS if frontier.recrawler is not None else frozenset())
                          | (RENDER_KEYS if _render_pool(base) is not None else frozenset())))
    book = SiteBook(live, add(shared_sites(s.pool, reactor)) if base.pool is not None else None)
    add(api_service(s.api, reactor, Node(
        role, reactor, stats=base.stats, pool=base.pool, crawler=crawler, seeds=frontier.seeds,
        batcher=frontier.batcher, worker=worker, shipper=worker.shipper if worker is not None else None,
        store=base.store, recrawler=frontier.recrawler, robots=base.fetcher.robots, rules=base.parser.rules,
        storage=base.steps.gate, render=base.steps.modes, fetchers=base.steps.fetchers, config=live, sites=book,
        tester=SiteTester(reactor, live, base.fetcher, base.steps),
        max_url_length=s.pool.max_url_length)))
    if signals:
        add(ReloadService(reactor, live))
        lifecycle.calm_repeated_stop_signals(reactor)
        reactor.callWhenRunning(calm_gc)  # once started: the start-up heap frozen, fewer collections
        if frontier.seeds is not None:  # and again once the seeds are in (500,000 hosts' tables: no full pass
            frontier.seeds.loaded.append(calm_gc)  # walks them)
    add(SystemdNotifier(reactor, status=lambda: f"{base.stats.counts['pages']} pages",
                        healthy=lambda: crawler is None or crawler.healthy))
    return base.top


def _base(s: cfg.Settings, reactor: INodeReactor, top: lifecycle.OrderedMultiService) -> Base:
    """The lanes of blocking work (first to start, last to stop), the pool, the store, the parsers, the fetcher."""
    blocking, node = top.add(Blocking(reactor)), s.spiderd
    pooled = None if node.role == "worker" else pool_service(s.pool, s.fetch, s.sites, reactor,
                                                             path=node.path("pool"), source=s.source)
    pool = pooled.pool if pooled is not None else None
    parser = ParsePool(reactor, parse_rules(s.sites, s.pool, s.fetch), s.parse.workers,
                       max_rss=s.parse.max_rss_mb * 2**20)
    by_address = pool.set_host_group if pool is not None and s.fetch.politeness == "ip" else None
    fetching = fetch_config(s.fetch, s.sites, robots_store=node.path("robots") if s.fetch.robots else "")
    fetcher = Fetcher(reactor, fetching, on_crawl_delay=pool.set_host_delay if pool else None,
                      on_address=by_address)
    if s.items.format != "jsonl":  # WARC files that replay: robots.txt and redirects archived with each page
        fetcher.keep_answers()
    store = page_store(s.store, node.data_dir, reactor, blocking.lane("store"))
    paced = Politeness.of(s.fetch.polite)  # a caller's sub-requests that passes no politeness of its own (the crawler
    # and the worker pass theirs)
    modes, renderer = build_modes(s.render, paced, reactor, fetcher, parser)
    children = FetchPool(reactor, fetcher, fetching, parser.rules, s.fetch.processes) if s.fetch.processes else None
    for service in (pooled, store, parser, children, renderer, lifecycle.Closer("fetcher", fetcher.close)):
        top.add(service)
    claim = pool.claim_content if pool is not None and s.items.skip_duplicate_content else None
    steps = PageSteps(reactor, parser, store, claim, s.fetch.max_retry_after, StorageGate(reactor), modes, children)
    return Base(s, reactor, top, blocking, CrawlStats(reactor), pool, store, parser, fetcher, steps,
                pooled.turns if pooled is not None else None, paced)


def _worker(base: Base) -> WorkerService:
    """The Scrapyd-compatible worker and its feed shipper: in the worker role, and in "all" with a local target
    (which, with ``[items] skip_duplicate_content``, claims its pages' content digests in the pool, and tells it
    its fetches of the pages whose detail pages are recrawled)."""
    s, node = base.s, base.s.spiderd
    local_feed = s.batch.feed_uri if node.role == "all" and "local" in s.batch.targets else ""  # the all role's own
    shipper = base.top.add(feed_shipper(s.feed, base.reactor, node.path("spool"), base.blocking.lane("feed", 3),
                                        probe=(s.worker.feed_template, local_feed)))
    config = worker_config(s.worker, s.fetch, data_dir=node.data_dir, role=node.role,
                           failure_threshold=s.pool.failure_threshold, feed_format=s.items.format,
                           rotate_seconds=s.items.rotate_seconds, rotate_idle=s.items.rotate_idle)
    told = fetches_told(base.reactor, base.pool, s.sites) if base.pool is not None else None
    return base.top.add(build_worker(config, base.reactor, base.fetcher, base.parser, base.store, shipper,
                                     base.blocking.lane("worker-io"), base.stats, base.steps, on_fetched=told))


def _frontier(base: Base, worker: WorkerService | None, demo_site: bool) -> Frontier:
    """The frontier: items, batcher, seeds, timers, (demo site), progress, sitemaps, and the fetch loop last."""
    s, node, reactor, pool, stats = base.s, base.s.spiderd, base.reactor, base.pool, base.stats
    assert pool is not None  # (built only with a pool)
    items, archive = item_writers(s.items, node.path(s.items.dir), reactor, pool, base.blocking)
    local = LocalWorker(worker.config.project, worker.local_target) if worker is not None else None
    batcher = build_batcher(s.batch, reactor, pool, node.path("batches"), local, base.parser.rules,
                            base.blocking.lane("batcher"))
    seeds = SeedService(pool, s.pool.seeds, s.pool.hubs, s.pool.hub_refresh_span, store=base.store,
                        state_path=node.path("hubs-added.json"), lane=base.blocking.lane("seeds"), clock=reactor)
    seed_timer, recrawler = schedulers(s.pool, s.sites, reactor, pool, pool, lambda: stats.counts["requests"],
                                       batched=batcher.add_recrawls if batcher is not None else None)
    outputs = "feeds" if batcher is not None else s.items.dir
    site = demo.DemoSiteService(reactor, pool, node.data_dir, outputs) if demo_site else None
    extra = {"batches": batcher.status} if batcher is not None else {}
    if worker is not None:
        extra.update(worker=worker.status, feeds=worker.shipper.status)
    sink = batcher.add if batcher is not None else None
    sitemaps = sitemap_service(s.sitemaps, s.fetch, s.pool, s.sites, reactor, pool, base.fetcher,
                               base.blocking.lane("sitemaps"), stats, detail_sink=sink)
    crawler = crawl_service(node, s.fetch, s.pool, reactor, pool, base.fetcher, base.steps, base.parser.rules, stats,
                            items=items, archive=archive, detail_sink=sink,
                            discovery=(sitemaps,) if sitemaps is not None else (), turns=base.turns)
    for service in (items, archive, batcher, seeds, seed_timer, recrawler, site,
                    ProgressLogger(stats, pool, reactor, node.log_interval, extra), sitemaps, crawler):
        base.top.add(service)
    crawler.finished.addCallback(_complete_files, items, archive)
    if node.exit_when_done:
        crawler.finished.addCallback(lambda _: lifecycle.stop_when_idle(reactor, batcher, worker))
    return Frontier(crawler, seeds, batcher, recrawler, sitemaps)


def _tuners(base: Base, frontier: Frontier, worker: WorkerService | None) -> list[Tuner]:
    """The parts that take the live keys of their sections: the politeness of every role, the sitemap reader."""
    tuners = [on_keys(POLITENESS_KEYS, _pacing(base, frontier, worker), "politeness")]
    pool, recrawler = base.pool, frontier.recrawler
    if pool is not None:
        tuners.append(on_keys(frozenset({"max_hops", "allowed_hosts"}),
                              lambda fresh: pool.set_site_hops(site_hops(fresh.sites)), "sites' hop limits"))
    if pool is not None and recrawler is not None:
        tuners.append(on_keys(RECRAWL_SITE_KEYS | {"allowed_hosts"}, lambda fresh: _recrawl(fresh, pool, recrawler),
                              "sites' recrawl intervals"))
    if _render_pool(base) is not None:
        tuners.append(on_keys(RENDER_KEYS, lambda fresh: _render(fresh, base), "render settings"))
    sitemaps = frontier.sitemaps
    if sitemaps is not None:
        tuners.append(on_keys(SITEMAP_KEYS | POLITENESS_KEYS, lambda fresh: sitemaps.configure(fresh.sitemaps,
                                                                                                 fresh.fetch),
                              "sitemap settings"))
    return tuners


def _render_pool(base: Base) -> RenderPool | None:
    """The node's render pool (None: no site rendered at the start)."""
    return base.steps.modes.pool if base.steps.modes is not None else None


def _render(fresh: cfg.Settings, base: Base) -> None:
    """``[render]``'s new values: the render pool's (its browsers as they are replaced) and the auto choice's."""
    modes = base.steps.modes
    assert modes is not None and modes.pool is not None
    render = fresh.render
    modes.pool.reconfigure(render)
    modes.auto.configure(render.auto_probe, render.auto_recheck, render.auto_hosts)


def _recrawl(fresh: cfg.Settings, pool: IURLPool, recrawler: Recrawler) -> Any:
    """The sites' new recrawl intervals: the recrawler's next run, and the pages the pool keeps from now on."""
    policy = RecrawlPolicy.from_sites(fresh.sites)
    recrawler.set_policy(policy)
    return pool.set_recrawl(policy.pairs())


def _pacing(base: Base, frontier: Frontier, worker: WorkerService | None) -> Callable[[cfg.Settings], Any]:
    """What puts ``[fetch]``'s new politeness keys into effect: every politeness of the node, then a pull."""
    def pace(fresh: cfg.Settings) -> Any:
        rules = fresh.fetch.polite
        if base.paced is not None:
            base.paced.configure(rules)
        if worker is not None:
            worker.set_politeness(rules)
        if base.pool is None:
            return None
        crawler = frontier.crawler
        return base.pool.set_politeness(rules).addCallback(lambda _: crawler.kick() if crawler is not None else None)
    return pace


def _complete_files(_: object, *writers: ItemWriter | WarcWriter | None) -> None:
    """The crawl has finished: the writers' last files complete now, not at the stop."""
    for writer in writers:
        if writer is not None:
            writer.rotate()
