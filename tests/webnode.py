"""A small node for the API tests: a real memory pool, real stats and rules, stand-ins for the other parts."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from twisted.internet import defer
from twisted.internet.task import Clock
from zope.interface import implementer

from spiderd.config import settings as cfg
from spiderd.fetch.extract import Rules
from spiderd.contracts.pool import IURLPool, IURLPoolAdmin
from spiderd.frontier.pool import open_memory_pool
from spiderd.frontier.seeds import SeedService
from spiderd.core.stats import CrawlStats
from spiderd.core.net.listener import Listen
from spiderd.ops.web import ApiService, Auth, Node

SITES = [{"name": "shop", "allowed_hosts": ["shop.example"], "list_urls": [r"/list/\d+$"],
          "detail_urls": [r"/item/\d+$"]}]


class FakeCrawler:
    """What the API reads of a CrawlService, and what it calls."""

    def __init__(self) -> None:
        self.running = True
        self.paused = False
        self.fetching = 3
        self.processing = 1
        self.concurrency = 8
        self.queued = 0
        self.healthy = True
        self.pull_failures = 0
        self.last_error = ""
        self.details: list[str] = []

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def add_details(self, urls: list[str]) -> defer.Deferred[int]:
        fresh = [u for u in urls if u not in self.details]
        self.details += fresh
        return defer.succeed(len(fresh))


class FakeStatus:
    """A component with a ``status()`` dict the test changes."""

    def __init__(self, **values: Any) -> None:
        self.values = values

    def status(self) -> dict[str, Any]:
        return dict(self.values)


class FakeStore:
    pending = 4
    where = "sqlite:///pages.sqlite3"


class FakeRobots:
    """robots.txt answers known without fetching: disallowed below /private/."""

    def cached(self, url: str) -> bool | None:
        if "unknown-robots" in url:
            return None
        return "/private/" not in url


@implementer(IURLPool)
class CoreOnlyPool:
    """A real pool seen through its core contract only: a backend without IURLPoolAdmin (why, export, import)."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    def __getattr__(self, name: str) -> Any:
        if name in IURLPoolAdmin.names():
            raise AttributeError(name)
        return getattr(self._pool, name)


def make_node(clock: Clock, worker_role: bool = False) -> Node:
    """The parts of an "all" node (or of a worker node: no pool, no crawler)."""
    rules = Rules(cfg.from_dict({"sites": SITES}).sites)
    worker = FakeStatus(jobs_running=1, jobs_pending=2, pages=5, items=4, failed=0)
    shipper = FakeStatus(shipped=7, waiting=2, failures=1, quarantined=0, last_error=None)
    if worker_role:
        stats = CrawlStats(clock)
        stats.fetched(200, 500, 0.1)  # the worker's jobs count their fetches here
        stats.fetched(-4, 0, 30.0)
        return Node("worker", clock, stats=stats, worker=worker, shipper=shipper, store=FakeStore(), rules=rules)
    pool = open_memory_pool(clock)
    batcher = FakeStatus(open=10, in_flight=1, spooled=2, sent=3, urls_sent=3000, failures=0, last_error="")
    return Node("all", clock, stats=CrawlStats(clock), pool=pool, crawler=FakeCrawler(),
                seeds=SeedService(pool, [], [], 600.0), batcher=batcher, worker=worker, shipper=shipper,
                store=FakeStore(), robots=FakeRobots(), rules=rules,
                recrawler=SimpleNamespace(queued=5, queued_by_kind={"list": 3, "detail": 2}))


def start_api(reactor: Any, node: Node, clock: Clock, auth: Auth | None = None) -> ApiService:
    """The API on 127.0.0.1, a free port, its history sampled on ``clock``; stop it with stopService."""
    service = ApiService(reactor, node, listen=Listen("tcp:0:interface=127.0.0.1"), auth=auth or Auth(), clock=clock)
    service.startService()
    return service
