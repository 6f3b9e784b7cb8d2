"""What one more host costs each bounded per-host table, at 1,000 hosts and at 100,000: the same work (counted in
bytecodes and peak memory, never seconds), so that a scan or a copy of a whole table per host fails here."""

from __future__ import annotations

from typing import Any, Callable

from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.trial.unittest import TestCase

from spiderd.config.sections import SitemapsSection
from spiderd.core.blocking import Lane
from spiderd.core.rules import Site
from spiderd.core.stats import CrawlStats
from spiderd.fetch.extract import Rules
from spiderd.fetch.fetcher import FetchResult
from spiderd.fetch.robots import TTL, Robots
from spiderd.fetch.robotstore import MemoryStore, RobotsStore, robots_store
from spiderd.frontier.pool import open_memory_pool
from spiderd.frontier.sitemapservice import SitemapService

from .workcount import growth

Add = Callable[[int], Any]


def origin(i: int) -> str:
    """The origin of host number ``i`` (all under one site's allowed domain)."""
    return f"http://h{i}.hosts.test"


class NoClaims:
    """A pool whose sitemap claims are all taken by another node: a host's read ends at once."""

    def claim_once(self, name: str, ttl: float) -> defer.Deferred[bool]:
        return defer.succeed(False)


class NoRobots:
    """Where the sitemap reader listens for robots.txt reads (the test calls it instead)."""

    def add_sitemap_listener(self, listener: Any) -> None:
        pass


class HostCostTests(TestCase):
    """Each table, filled through the code that fills it in a crawl, costs the same per host at any size."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1_000_000)

    def assert_flat(self, table: Callable[[int], Add]) -> None:
        small, big = growth(table)
        self.assertTrue(big.flat_against(small), f"one more host: {small} at 1,000 hosts, {big} at 100,000")

    def test_claims(self) -> None:
        """claim_once (a host's sitemap claim) expires old claims by deadline, not by a copy of all of them."""

        def table(size: int) -> Add:
            pool = open_memory_pool(self.clock)
            self.addCleanup(pool.close)

            def add(i: int) -> None:
                pool.claim_once(f"sitemaps:{origin(i)}", size)  # a claim a second: the oldest one expires
                self.clock.advance(1)

            for i in range(size):
                add(i)
            return add

        self.assert_flat(table)

    def test_sitemap_hosts(self) -> None:
        """The sitemap reader forgets the idle host used longest ago from the head of its order, not by a copy."""
        sites = (Site("hosts", ("hosts.test",), (r"/$",), (r"/p/\d+$",)),)

        def table(size: int) -> Add:
            rules = (Rules(sites, 2048, 32), Rules(sites, 2048, 32))
            service = SitemapService(self.clock, NoClaims(), NoRobots(), lambda u, s: defer.Deferred(),  # type: ignore[arg-type]
                                     Lane(reactor, "host-costs"), rules, SitemapsSection(refresh=0),
                                     CrawlStats(self.clock))
            service.startService()
            self.addCleanup(service.stopService)

            def add(i: int) -> None:
                service.robots_read(origin(i), [])

            for i in range(size):
                add(i)
            return add

        self.assert_flat(table)

    def robots_table(self, store: Callable[[], RobotsStore]) -> Callable[[int], Add]:
        """Robots over ``store()``: every origin's robots.txt answers 404 at once; a TTL holds ``size`` origins."""

        def table(size: int) -> Add:
            answers = lambda url, limit, truncate=False: defer.succeed(FetchResult(url, 404, url))  # noqa: E731
            robots = Robots(answers, self.clock, "spiderd/1.0", store=store())
            self.addCleanup(robots.close)

            def add(i: int) -> None:
                self.successResultOf(robots.allowed(origin(i) + "/"))
                self.clock.advance(TTL / size)

            for i in range(size):
                add(i)
            return add

        return table

    def test_robots_in_memory(self) -> None:
        """Robots' parsed table and its memory store take one more origin without a scan."""
        self.assert_flat(self.robots_table(MemoryStore))

    def test_robots_on_disk(self) -> None:
        """Robots' parsed table and its LevelDB store take one more origin without a scan."""
        self.assert_flat(self.robots_table(lambda: robots_store(self.mktemp())))
