"""``GET /metrics``: the node's counters in the Prometheus text format, from a registry of its own.

Counters and gauges are read from the components when scraped (nothing is
counted twice); the fetch latency is a real histogram, fed by the crawler
through ``CrawlStats.on_elapsed``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from twisted.internet import defer

import spiderd

if TYPE_CHECKING:
    from spiderd.ops.web.history import History
    from spiderd.ops.web.node import Node

CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)


class Metrics:
    """One registry per daemon (never the global one): a collector over the node, and the fetch histogram."""

    def __init__(self, node: Node, history: History) -> None:
        self._node = node
        self.registry = CollectorRegistry(auto_describe=False)
        self.fetch_seconds = Histogram(
            "spiderd_fetch_duration_seconds", "Seconds the crawler's fetches took (errors and timeouts too).",
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.reactor_lag = Histogram(
            "spiderd_reactor_lag_seconds", "How late the reactor ran a timer, sampled every 50 ms (spiderd.ops.lag).",
            buckets=LAG_BUCKETS, registry=self.registry,
        )
        self._collector = NodeCollector(node, history)
        self.registry.register(self._collector)
        if node.stats is not None:
            node.stats.on_elapsed = self.fetch_seconds.observe

    def render(self) -> defer.Deferred[bytes]:
        """The text exposition (the pool's sizes are asked first: Redis answers over the network)."""
        d = self._node.pool.stats() if self._node.pool is not None else defer.succeed(None)
        return d.addCallback(self._generate)

    def _generate(self, pool: dict[str, Any] | None) -> bytes:
        self._collector.pool = pool
        try:
            return generate_latest(self.registry)
        finally:
            self._collector.pool = None


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _labelled(family: Any, label: str, values: dict[str, Any]) -> Any:
    for key, value in sorted(values.items()):
        family.add_metric([str(key)], value)
    return family


class NodeCollector:
    """Yields the node's figures at scrape time; ``pool`` is set to the pool's stats just before."""

    def __init__(self, node: Node, history: History) -> None:
        self._node = node
        self._history = history
        self.pool: dict[str, Any] | None = None

    def collect(self) -> Iterator[Metric]:
        node = self._node
        info = GaugeMetricFamily("spiderd_info", "The version and role of this node.", labels=["version", "role"])
        info.add_metric([spiderd.__version__, node.role], 1)
        yield info
        yield _gauge("spiderd_uptime_seconds", "Seconds since the node started.", node.clock.seconds() - node.started)
        yield _gauge("spiderd_pages_per_minute", "Pages fetched per minute over the last minute.",
                     self._history.rate(60.0))
        yield from self._crawl()
        yield from self._pool()
        yield from self._crawler()
        yield from self._batches()
        yield from self._feeds()
        yield from self._worker()
        yield from self._render()
        yield from self._fetchers()
        if node.store is not None:
            yield _gauge("spiderd_store_pending_writes", "Pages accepted by the page store, not yet committed.",
                         node.store.pending)
        if node.storage is not None:
            yield _gauge("spiderd_storage_blocked", "Sinks refusing writes now (a full disk, a read-only database): "
                         "the node takes no new work while this is above 0.", len(node.storage.blocks))

    def _crawl(self) -> Iterator[Metric]:
        stats = self._node.stats
        if stats is None:
            return
        counts = stats.counts
        yield _counter("spiderd_requests", "Fetches the crawler finished (any outcome).", counts["requests"])
        yield _counter("spiderd_pages", "Pages the crawler fetched (an HTTP answer).", counts["pages"])
        yield _counter("spiderd_bytes", "Bytes received by the crawler, as on the wire.", counts["bytes"])
        yield _counter("spiderd_items", "Items the crawler wrote.", counts["items"])
        yield _counter("spiderd_not_modified", "Pages fetched again that answered 304 Not Modified to a conditional "
                       "GET (done and unchanged: not parsed or stored).", counts["not_modified"])
        yield _counter("spiderd_sitemap_files", "Sitemap files read (fetched and parsed).", counts["sitemaps"])
        yield _counter("spiderd_sitemap_urls", "URLs queued from sitemaps.", counts["sitemap_urls"])
        yield _counter("spiderd_duplicate_content", "Detail pages whose content another URL gave first "
                       "([items] skip_duplicate_content: done, no item, not stored).", counts["duplicate_content"])
        yield _labelled(CounterMetricFamily("spiderd_responses", "Fetch outcomes by status (HTTP code or error name).",
                                            labels=["status"]), "status", stats.statuses)
        yield _labelled(CounterMetricFamily("spiderd_errors", "Fetch and processing errors by kind.",
                                            labels=["kind"]), "kind", stats.errors)

    def _pool(self) -> Iterator[Metric]:
        pool = self.pool
        if pool is None:
            return
        states = {k: pool.get(k, 0) for k in ("waiting", "pending", "done", "failed", "batched")}
        yield _labelled(GaugeMetricFamily("spiderd_pool_urls", "URLs in the pool by state.", labels=["state"]),
                        "state", states)
        yield _gauge("spiderd_pool_hosts", "Hosts with waiting URLs.", pool.get("hosts", 0))
        yield _gauge("spiderd_pool_hubs", "Hub URLs.", pool.get("hubs", 0))
        if "hosts_in_turn" in pool:
            yield _gauge("spiderd_pool_hosts_in_turn", "Hosts (on Redis: domains) with waiting URLs taking turns "
                         "now ([pool] max_active_hosts); the rest wait for a place.", pool["hosts_in_turn"])
        yield _labelled(CounterMetricFamily("spiderd_pool_rejected", "URLs the pool refused, by reason.",
                                            labels=["reason"]), "reason", pool.get("rejected", {}))
        if "known_skipped" in pool:
            yield _counter("spiderd_pool_known_skipped", "URLs not sent to the shared pool: this node remembered it "
                           "knows them ([pool] redis_known_urls).", pool["known_skipped"])

    def _crawler(self) -> Iterator[Metric]:
        crawler = self._node.crawler
        if crawler is None:
            return
        yield _gauge("spiderd_crawler_fetching", "Fetches in flight.", crawler.fetching)
        yield _gauge("spiderd_crawler_processing", "Fetched pages being parsed and stored.", crawler.processing)
        yield _gauge("spiderd_crawler_queued", "URLs popped ahead of the free fetch slots, leased, waiting for one "
                     "([pool] redis_pop_ahead).", crawler.queued)
        yield _gauge("spiderd_crawler_paused", "1 while the crawl is paused.", 1 if crawler.paused else 0)

    def _batches(self) -> Iterator[Metric]:
        batcher = self._node.batcher
        if batcher is None:
            return
        s = batcher.status()
        yield _counter("spiderd_batches_sent", "Batches a worker accepted.", s["sent"])
        yield _counter("spiderd_batch_urls_sent", "Detail URLs in accepted batches.", s["urls_sent"])
        yield _counter("spiderd_batch_failures", "Batch POSTs that failed (each is retried).", s["failures"])
        yield _gauge("spiderd_batches_in_flight", "Batch POSTs waiting for an answer.", s["in_flight"])
        yield _gauge("spiderd_batches_spooled", "Sealed batches not yet accepted (in the spool).", s["spooled"])
        yield _gauge("spiderd_batch_open_urls", "Detail URLs in the open batch.", s["open"])

    def _feeds(self) -> Iterator[Metric]:
        shipper = self._node.shipper
        if shipper is None:
            return
        s = shipper.status()
        yield _counter("spiderd_feed_uploads", "Feed files shipped.", s["shipped"])
        yield _counter("spiderd_feed_upload_failures", "Feed upload attempts that failed (retried).", s["failures"])
        yield _gauge("spiderd_feed_files_waiting", "Feed files in the spool, not yet shipped.", s["waiting"])

    def _fetchers(self) -> Iterator[Metric]:
        pool = self._node.fetchers
        if pool is None:
            return
        s = pool.status()
        yield _gauge("spiderd_fetch_processes_up", "Fetch processes up (of [fetch] processes).", s["up"])
        yield _gauge("spiderd_fetch_processes_in_flight", "Fetches in the fetch processes' hands.", s["in_flight"])
        yield _counter("spiderd_fetch_processes_exits", "Fetch processes that exited (what each held failed as "
                       "network errors, retried; another started in its place).", s["exited"])

    def _render(self) -> Iterator[Metric]:
        modes = self._node.render
        if modes is None or modes.pool is None:
            return
        s = modes.pool.status()
        yield _counter("spiderd_render_pages", "Pages rendered in a browser.", s["rendered"])
        yield _labelled(CounterMetricFamily("spiderd_render_failures", "Pages that could not be rendered, by reason "
                                            "(navigation_timeout, navigation_error, settle_timeout, page_error, "
                                            "browser_died, stopped).", labels=["reason"]), "reason", s["failures"])
        yield _counter("spiderd_render_again", "Pages rendered again because their browser died under them.",
                       s["again"])
        yield _labelled(CounterMetricFamily("spiderd_render_browser_restarts", "Browsers started in another's place, "
                                            "by why it went (max_pages, max_rss, page_crashed, hung, exited, "
                                            "protocol).", labels=["reason"]), "reason", s["restarts"])
        yield _counter("spiderd_render_contexts_replaced", "Browser contexts closed after [render] "
                       "pages_per_context pages (a new one served the next pages).", s["contexts_replaced"])
        yield _gauge("spiderd_render_browsers", "Browsers up.", s["browsers"])
        yield _gauge("spiderd_render_pages_rendering", "Pages in a browser now.", s["rendering"])
        yield _gauge("spiderd_render_pages_waiting", "Pages waiting for a browser.", s["waiting"])
        yield _counter("spiderd_render_subrequests", "Sub-requests of rendered pages fetched (or on their way).",
                       s["subrequests"])
        yield _counter("spiderd_render_subrequests_refused", "Sub-requests of rendered pages refused by spiderd "
                       "(not a host of the site, a bad URL).", s["refused"])

    def _worker(self) -> Iterator[Metric]:
        worker = self._node.worker
        if worker is None:
            return
        s = worker.status()
        jobs = GaugeMetricFamily("spiderd_worker_jobs", "The worker's jobs by state.", labels=["state"])
        yield _labelled(jobs, "state", {"running": s["jobs_running"], "pending": s["jobs_pending"]})
        yield _counter("spiderd_worker_pages", "Pages the worker's jobs fetched.", s["pages"])
        yield _counter("spiderd_worker_items", "Items the worker's jobs wrote.", s["items"])
