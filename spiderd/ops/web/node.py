"""What the API reads and drives: the parts of one node, and the status and "why" answers made from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

import spiderd

from spiderd.contracts.pool import IURLPoolAdmin, IURLQueue
from spiderd.core.urls import MAX_URL_LENGTH
from spiderd.store.interfaces import IPageStore

if TYPE_CHECKING:
    from spiderd.core.stats import CrawlStats
    from spiderd.core.storage import StorageGate
    from spiderd.engine.fetchmode import FetchModes
    from spiderd.fetch.fetchpool import FetchPool
    from spiderd.feed.shipper import FeedShipper
    from spiderd.fetch.extract import Rules
    from spiderd.fetch.robots import Robots
    from spiderd.frontier.batcher import Batcher
    from spiderd.frontier.crawler import CrawlService
    from spiderd.frontier.scheduler import Recrawler
    from spiderd.frontier.seeds import SeedService
    from spiderd.ops.liveconfig import LiveConfig
    from spiderd.ops.sitebook import SiteBook
    from spiderd.ops.web.history import History
    from spiderd.worker.service import WorkerService

log = Logger()


@dataclass
class Node:
    """The parts of one node; those absent in its role (the pool in the worker role, ...) are None."""

    role: str
    clock: IReactorTime
    stats: CrawlStats | None = None
    pool: IURLQueue | None = None  # its counts, the URLs the API adds; IURLPoolAdmin where the backend has it
    crawler: CrawlService | None = None
    seeds: SeedService | None = None
    batcher: Batcher | None = None
    worker: WorkerService | None = None
    shipper: FeedShipper | None = None
    store: IPageStore | None = None
    recrawler: Recrawler | None = None  # when sites have recrawl intervals
    robots: Robots | None = None  # when robots.txt is obeyed
    rules: Rules | None = None
    storage: StorageGate | None = None  # the node's storage gate (a full disk holds its work)
    render: FetchModes | None = None  # how sites' pages are fetched: its render pool, "auto"'s choices
    fetchers: FetchPool | None = None  # the fetch processes ([fetch] processes)
    config: LiveConfig | None = None  # the running configuration: reloads, the sites API
    sites: SiteBook | None = None  # the sites API's book (GET/PUT/DELETE /api/sites...)
    tester: Any = None  # the template tester (POST /api/sites/NAME/try), where the node fetches
    max_url_length: int = MAX_URL_LENGTH
    started: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.clock.seconds()

    def pages(self) -> int:
        """Pages fetched by this node: by the crawler and by its worker's jobs (both count into ``stats``)."""
        if self.stats is not None:
            return int(self.stats.counts["pages"])
        return int(self.worker.status().get("pages", 0)) if self.worker is not None else 0

    def queue(self) -> defer.Deferred[int]:
        """The queue size the chart shows: waiting URLs, or (worker role) pending jobs."""
        if self.pool is not None:
            return self.pool.stats().addCallback(lambda s: s["waiting"])
        if self.worker is not None:
            return defer.succeed(int(self.worker.status().get("jobs_pending", 0)))
        return defer.succeed(0)


def status(node: Node, history: History) -> defer.Deferred[dict[str, Any]]:
    """The whole status (``GET /api/status``): pool sizes, rates, errors, every component's counters."""
    d = node.pool.stats() if node.pool is not None else defer.succeed(None)
    return d.addCallback(lambda pool: _assemble(node, history, pool))


def _assemble(node: Node, history: History, pool: dict[str, Any] | None) -> dict[str, Any]:
    now = node.clock.seconds()
    out: dict[str, Any] = {
        "version": spiderd.__version__,
        "role": node.role,
        "uptime": round(now - node.started, 3),
        "pages": node.pages(),
        "rates": {"pages_per_min_last_minute": round(history.rate(60.0), 2),
                  "pages_per_min_last_hour": round(history.rate(3600.0), 2)},
    }
    if pool is not None:
        out["pool"] = {key: pool.get(key, 0) for key in ("waiting", "pending", "done", "failed", "batched", "hosts",
                                                          "hubs")}
        out["pool"]["largest"] = pool.get("largest", [])
        out["pool"]["rejected"] = pool.get("rejected", {})
        if "known_skipped" in pool:  # a shared pool's (Redis)
            out["pool"]["known_skipped"] = pool["known_skipped"]
        if "hosts_in_turn" in pool:  # (on Redis: the domains in turn)
            out["pool"]["hosts_in_turn"] = pool["hosts_in_turn"]
    if node.stats is not None:
        out["counts"] = {**dict.fromkeys(("requests", "pages", "bytes", "items", "stored", "not_modified",
                                         "duplicate_content"), 0),
                         **node.stats.counts}
        out["errors"] = dict(node.stats.errors)
        out["statuses"] = dict(node.stats.statuses)
    parts = {"crawler": _crawler, "batches": _batches, "feeds": _feeds, "worker": _worker, "store": _store,
             "recrawl": _recrawl, "storage": _storage, "render": _render, "fetchers": _fetchers, "config": _config}
    for name, part in parts.items():
        try:
            value = part(node)
        except Exception as e:  # one broken part must not hide the others
            log.failure("Status of {name}", name=name)
            value = {"error": f"{type(e).__name__}: {e}"}
        if value is not None:
            out[name] = value
    return out


def _fetchers(node: Node) -> dict[str, Any] | None:
    """The fetch processes' counters (configured, up, fetches in flight and answered, exits)."""
    return node.fetchers.status() if node.fetchers is not None else None


def _render(node: Node) -> dict[str, Any] | None:
    """The render pool's counters (browsers, pages rendering and waiting, rendered, failed, replaced ...)."""
    modes = node.render
    return modes.pool.status() if modes is not None and modes.pool is not None else None


def render_rows(node: Node, limit: int) -> list[dict[str, Any]]:
    """"auto"'s choice per host section: rendered or not, and how many pages each way."""
    modes = node.render
    return modes.auto.rows(limit) if modes is not None and modes.pool is not None else []


def _storage(node: Node) -> dict[str, Any] | None:
    """Whether a sink refuses writes (a full disk, a read-only database): the node takes no new work then."""
    gate = node.storage
    if gate is None:
        return None
    return {"blocked": gate.blocked() or bool(gate.blocks), "sinks": gate.status()}


def _config(node: Node) -> dict[str, Any] | None:
    """The running configuration: its file, the rules' version, the keys waiting for a restart, the last error."""
    return node.config.status() if node.config is not None else None


def _crawler(node: Node) -> dict[str, Any] | None:
    crawler = node.crawler
    if crawler is None:
        return None
    state = "paused" if crawler.paused else ("running" if crawler.running else "stopped")
    if state == "running" and not crawler.healthy:
        state = "failing"  # the fetch loop cannot take URLs from the pool
    return {"state": state, "paused": crawler.paused, "fetching": crawler.fetching,
            "queued": crawler.queued, "processing": crawler.processing,
            "concurrency": crawler.concurrency,
            "pull_failures": crawler.pull_failures, "last_error": crawler.last_error}


def _batches(node: Node) -> dict[str, Any] | None:
    return node.batcher.status() if node.batcher is not None else None


def _feeds(node: Node) -> dict[str, Any] | None:
    return node.shipper.status() if node.shipper is not None else None


def _worker(node: Node) -> dict[str, Any] | None:
    if node.worker is None:
        return None
    return node.worker.status()  # the feeds have their own part (the shipper's status)


def _store(node: Node) -> dict[str, Any] | None:
    if node.store is None:
        return None
    return {"pending": node.store.pending, "where": node.store.where}


def _recrawl(node: Node) -> dict[str, Any] | None:
    recrawler = node.recrawler
    return None if recrawler is None else {"queued": recrawler.queued, **recrawler.queued_by_kind}


# -- why --------------------------------------------------------------------------------------------------


@defer.inlineCallbacks
def why(node: Node, url: str) -> Any:
    """``GET /api/why``: the pool's record of ``url``, robots.txt and site rules, and a plain-language reason."""
    info = dict((yield cast(IURLPoolAdmin, node.pool).why(url)))  # the API checked that the pool has it
    now = node.clock.seconds()
    if info["state"] != "rejected":
        info["robots"] = _robots(node, info["url"])
        info["rule"] = _rule(node, info["url"])
        if "lease_until" in info:
            info["lease_remaining"] = round(max(0.0, info["lease_until"] - now), 3)
        if "host_next_allowed" in info:
            info["host_next_in"] = round(max(0.0, info["host_next_allowed"] - now), 3)
    info["reason"] = explain(info, paused=bool(node.crawler is not None and node.crawler.paused))
    return info


def _robots(node: Node, url: str) -> str:
    if node.robots is None:
        return "not obeyed"
    known = node.robots.cached(url)
    return "unknown" if known is None else ("allowed" if known else "disallowed")


def _rule(node: Node, url: str) -> dict[str, Any]:
    if node.rules is None:
        return {"kind": None, "site": None}
    site = node.rules.site_for(url)
    return {"kind": node.rules.classify(url), "site": site.name if site is not None else None}


def explain(info: dict[str, Any], paused: bool = False) -> str:
    """One line: why the URL is (not) crawled, from what ``why`` found."""
    state = info["state"]
    if state == "rejected":
        return f"rejected: not a URL spiderd crawls ({info.get('reason')})"
    robots = " robots.txt disallows it, so fetching it fails at once." if info.get("robots") == "disallowed" else ""
    host = info.get("host", "?")
    if state == "unknown":
        rule = info.get("rule") or {}
        if rule.get("site") is None:
            return f"never seen: no [[sites]] entry allows host {host}, so links to it are not followed.{robots}"
        if rule.get("kind") is None:
            return (f"never seen: site {rule['site']!r} has no list_urls or detail_urls pattern that matches it "
                    f"(or its path is too deep), so links to it are not followed.{robots}")
        return f"never seen: no crawled page linked to it yet (site {rule['site']!r} would take it as a " \
               f"{rule['kind']} page).{robots}"
    if state == "done":
        return "crawled already (done): it is not fetched again unless added again with recrawl."
    if state == "failed":
        last = info.get("last_failure")
        if last:
            return f"failed for good after {last['failures']} failure(s), the last: {last['reason']}."
        return "failed for good (a final answer such as 404/410 or robots.txt, or too many failed attempts)."
    if state == "batched":
        return "a detail page sent to a worker in a batch: the worker fetches it, not this crawler."
    if state == "pending":
        again = " Added again meanwhile: it is queued again when the lease ends." if info.get("queued_again") else ""
        return f"being fetched now: leased for {info.get('lease_remaining', 0):.0f}s more.{again}{robots}"
    return _waiting(info, paused, robots)


def _waiting(info: dict[str, Any], paused: bool, robots: str) -> str:
    last = info.get("last_failure")
    because = f" (the last: {last['reason']})" if last else ""
    retried = f" It failed {info['failures']} time(s) and is retried{because}." if info.get("failures") else ""
    queued = info.get("host_waiting", 0)
    host = info.get("host", "?")
    if paused:
        head = "waiting: the crawler is paused (POST /api/resume)"
    elif info.get("host_next_in", 0) > 0:
        head = f"waiting: host {host} may be fetched again in {info['host_next_in']:.1f}s (politeness delay)"
    elif info.get("host_inflight", 0):
        head = f"waiting: {info['host_inflight']} request(s) to {host} are in flight (per-host concurrency)"
    else:
        head = f"waiting for its turn in the queue of {host}"
    return f"{head}; {queued} URL(s) of this host wait.{retried}{robots}"
