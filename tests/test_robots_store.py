"""robots.txt fetched at most once per origin per TTL, whatever the number of origins: the answers that leave
Robots' in-memory table wait out their TTL in a store (in memory, or a node's LevelDB that outlives a restart)."""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.trial import unittest
from twisted.web import resource, server

from spiderd.fetch.fetcher import FetchConfig, Fetcher
from spiderd.fetch.robots import ERROR_TTL, TTL, Parses, Robots
from spiderd.fetch.robotstore import ANSWER, DiskStore, Kept, MemoryStore, RobotsStore, robots_store

from .helpers import ClockedReactor

ORIGINS = 6


class RobotsSite(resource.Resource):
    """robots.txt with a Disallow, a Crawl-delay and a Sitemap line; counts the robots.txt requests per port."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.robots: Counter[int] = Counter()

    def render_GET(self, request: Any) -> bytes:
        if request.path == b"/robots.txt":
            self.robots[request.getHost().port] += 1
            return b"User-agent: *\nDisallow: /private\nCrawl-delay: 2\nSitemap: /sitemap.xml\n"
        return b"<html></html>"


class RobotsStoreTests(unittest.TestCase):
    """A real fetcher and ORIGINS origins on 127.0.0.1; Robots keeps two of them in memory."""

    def setUp(self) -> None:
        self.site = RobotsSite()
        factory = server.Site(self.site)
        factory.noisy = False
        self.origins = []
        for _ in range(ORIGINS):
            port = reactor.listenTCP(0, factory, interface="127.0.0.1")
            self.addCleanup(port.stopListening)
            self.origins.append(f"http://127.0.0.1:{port.getHost().port}")
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.fetcher = Fetcher(ClockedReactor(reactor, self.clock), FetchConfig(user_agent="spiderd/1.0"))
        self.addCleanup(self.fetcher.close)
        self.heard: list[tuple[str, Any]] = []

    def robots(self, store: RobotsStore) -> Robots:
        robots = Robots(functools.partial(self.fetcher.fetch_raw, redirects=5), self.clock, "spiderd/1.0",
                        on_delay=lambda host, delay: self.heard.append(("delay", host)), max_entries=2, store=store)
        robots.add_sitemap_listener(lambda origin, urls: self.heard.append(("sitemaps", origin)))
        return robots

    def disk(self) -> RobotsStore:
        store = robots_store(self.path)
        self.addCleanup(store.close)
        return store

    @defer.inlineCallbacks
    def visit_all(self, robots: Robots, rounds: int = 3) -> Any:
        """Check a disallowed and an allowed URL of every origin, ``rounds`` times over."""
        for _ in range(rounds):
            for origin in self.origins:
                self.assertEqual((yield robots.allowed(origin + "/private/1")), False)
                self.assertEqual((yield robots.allowed(origin + "/a")), True)

    @defer.inlineCallbacks
    def once_per_ttl(self, store: RobotsStore) -> Any:
        robots = self.robots(store)
        yield self.visit_all(robots)
        self.assertEqual(sorted(self.site.robots.values()), [1] * ORIGINS)
        self.clock.advance(TTL)
        yield self.visit_all(robots)
        self.assertEqual(sorted(self.site.robots.values()), [2] * ORIGINS)
        self.assertEqual(Counter(kind for kind, _ in self.heard)["sitemaps"], 2 * ORIGINS)

    def test_once_per_ttl_in_memory(self) -> Any:
        """Six origins, two kept parsed: each robots.txt is fetched once per TTL (the memory store)."""
        return self.once_per_ttl(MemoryStore())

    def test_once_per_ttl_on_disk(self) -> Any:
        """Six origins, two kept parsed: each robots.txt is fetched once per TTL (a node's LevelDB store)."""
        self.path = self.mktemp()
        return self.once_per_ttl(self.disk())

    @defer.inlineCallbacks
    def test_a_restart_fetches_nothing_again_within_the_ttl(self) -> Any:
        """A node restarted within the TTL fetches no robots.txt again; its listeners hear of each origin again."""
        self.path = self.mktemp()
        first = self.disk()
        yield self.visit_all(self.robots(first), rounds=1)
        first.close()
        self.heard.clear()
        yield self.visit_all(self.robots(self.disk()))
        self.assertEqual(sorted(self.site.robots.values()), [1] * ORIGINS)
        heard = Counter(kind for kind, _ in self.heard)
        self.assertEqual(heard["sitemaps"], ORIGINS)  # once per run, however often the rules are parsed again
        self.assertGreaterEqual(heard["delay"], ORIGINS)  # each parse again: a listener may have forgotten


class StoreExpiryTests(unittest.TestCase):
    """The stores drop expired answers as they take new ones, so they hold the answers of one TTL at most."""

    def fill(self, store: RobotsStore) -> None:
        for i in range(1000):
            store.put(f"http://old{i}.test", Kept(10.0, b"User-agent: *\n" if i % 2 else None), 0.0)
        assert store.get("http://old1.test", 5.0) == Kept(10.0, b"User-agent: *\n")
        assert store.get("http://old1.test", 10.0) is None
        for i in range(600):
            store.put(f"http://new{i}.test", Kept(20.0 + ERROR_TTL, None), 20.0)

    def test_memory(self) -> None:
        """The memory store holds only the answers not yet expired once as many new ones came."""
        store = MemoryStore()
        self.fill(store)
        self.assertEqual(len(store), 600)

    def test_disk(self) -> None:
        """The LevelDB store drops two expired answers for each new one, earliest first."""
        store = robots_store(self.mktemp())
        self.addCleanup(store.close)
        assert isinstance(store, DiskStore)
        self.fill(store)
        self.assertEqual(sum(1 for _ in store._db.iterator(prefix=ANSWER)), 600)

    def test_disk_reads_the_expiry_order_only_when_one_is_due(self) -> None:
        """Puts before the earliest expiry do not read the LevelDB's expiry order; one after it does."""
        store = robots_store(self.mktemp())
        self.addCleanup(store.close)
        assert isinstance(store, DiskStore)
        db, reads = store._db, []

        class Counted:
            def __getattr__(self, name: str) -> Any:
                return getattr(db, name)

            def iterator(self, **kw: Any) -> Any:
                reads.append(kw)
                return db.iterator(**kw)

        store._db = Counted()
        for i in range(100):
            store.put(f"http://h{i}.test", Kept(100.0 + i, None), float(i) / 10)
        self.assertEqual(len(reads), 1)  # the first put: when the next answer expires was not known
        store.put("http://late.test", Kept(500.0, None), 100.5)
        self.assertEqual(len(reads), 2)
        self.assertIsNone(store.get("http://h0.test", 0.0))  # expired at 100, and swept
        self.assertIsNotNone(store.get("http://h1.test", 100.5))


class SharedParseTests(unittest.SynchronousTestCase):
    """Files with the same rules share one parse; their Sitemap: lines stay each origin's own."""

    def test_same_rules_one_parse(self) -> None:
        """Two files that differ only in their Sitemap: lines (one between two groups) share a parse."""
        parses = Parses()
        a, named_a = parses.parse(b"User-agent: a\nSitemap: /a.xml\nUser-agent: b\nDisallow: /x\n", "http://a")
        b, named_b = parses.parse(b"User-agent: a\nUser-agent: b\nDisallow: /x\nsitemap : /b.xml\n", "http://b")
        self.assertIs(a, b)
        self.assertEqual((named_a, named_b), (["/a.xml"], ["/b.xml"]))
        assert a is not None
        self.assertFalse(a.can_fetch("http://a/x", "a"))  # one group of two agents: the Sitemap line split none

    def test_other_rules_their_own_parse(self) -> None:
        """A rule on a line of its own (after a carriage return) is a rule: the files do not share a parse."""
        parses = Parses()
        a, _ = parses.parse(b"User-agent: *\nSitemap: /a.xml\rDisallow: /x\n", "http://a")
        b, named = parses.parse(b"User-agent: *\nSitemap: /a.xml\n", "http://b")
        self.assertIsNot(a, b)
        assert a is not None and b is not None
        self.assertEqual((a.can_fetch("http://a/x", "spiderd"), b.can_fetch("http://b/x", "spiderd")), (False, True))
        self.assertEqual(named, ["/a.xml"])
