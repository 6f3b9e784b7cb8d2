"""Seed 004 in the pool, on memory, LevelDB and Redis: crawled sets and recrawl, the linkbase, claim_once."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any, Generator

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial.unittest import TestCase

from spiderd.core.digest import content_digest
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool import open_leveldb_pool, open_memory_pool

from .test_pool_contract import RedisKeys

Gen = Generator[Any, Any, None]
LISTS = [("a.example", "list")]


class Seed004Contract:
    """The contract; a subclass per backend provides ``open_pool`` and ``reopens``."""

    backend = ""
    reopens = True

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.pools: list[Any] = []
        self.addCleanup(self._close_all)  # type: ignore[attr-defined]

    def open_pool(self, options: dict[str, Any]) -> defer.Deferred[Any]:
        raise NotImplementedError

    @defer.inlineCallbacks
    def make_pool(self, **options: Any) -> Generator[Any, Any, Any]:
        options.setdefault("pending_threshold", 60.0)
        options.setdefault("politeness", Politeness(0.0, 100))
        pool = yield self.open_pool(options)
        self.pools.append(pool)
        return pool

    @defer.inlineCallbacks
    def _close_all(self) -> Gen:
        for pool in self.pools:
            yield pool.close()

    @defer.inlineCallbacks
    def crawl(self, pool: Any, urls: list[str], detail: bool = False) -> Gen:
        """Add, pop and finish ``urls`` (200), at the clock's time."""
        yield pool.addmany(urls, detail=detail)
        popped = yield pool.pop(len(urls) + 10)
        assert sorted(popped) == sorted(urls), popped
        for url in urls:
            yield pool.set_status(url, 200)

    # -- crawled sets and recrawl -------------------------------------------------------

    @defer.inlineCallbacks
    def test_recrawl_requeues_pages_fetched_before_the_cutoff(self) -> Gen:
        """A done page of a recrawled (domain, kind) is queued again once its fetch time is before the cut-off."""
        pool = yield self.make_pool(recrawl=LISTS)
        yield self.crawl(pool, ["http://a.example/l1"])
        fetched = self.clock.seconds()
        self.clock.advance(100)
        assert (yield pool.recrawl([("a.example", "list", fetched - 1)], 10)) == 0
        assert (yield pool.recrawl([("a.example", "list", fetched)], 10)) == 1
        stats = yield pool.stats()
        assert (stats["waiting"], stats["done"]) == (1, 0)
        assert (yield pool.why("http://a.example/l1"))["state"] == "waiting"
        assert (yield pool.recrawl([("a.example", "list", self.clock.seconds())], 10)) == 0  # out until done again
        assert (yield pool.pop(10)) == {"http://a.example/l1": False}
        yield pool.set_status("http://a.example/l1", 200)
        assert (yield pool.recrawl([("a.example", "list", fetched + 99)], 10)) == 0  # its new fetch time counts
        assert (yield pool.recrawl([("a.example", "list", fetched + 100)], 10)) == 1

    @defer.inlineCallbacks
    def test_only_configured_kinds_and_known_urls_are_kept(self) -> Gen:
        """Details of a list-only domain, other domains, hubs and never-queued URLs are not in crawled sets."""
        pool = yield self.make_pool(recrawl=LISTS)
        yield self.crawl(pool, ["http://a.example/d1"], detail=True)
        yield self.crawl(pool, ["http://b.example/l1"])
        yield pool.set_status("http://a.example/redirect-target", 200)
        yield pool.set_hubs(["http://a.example/hub"], 600)
        popped = yield pool.pop(10)
        assert popped == {"http://a.example/hub": True}
        yield pool.set_status("http://a.example/hub", 200)
        later = self.clock.seconds() + 1
        cutoffs = [("a.example", "list", later), ("a.example", "detail", later), ("b.example", "list", later)]
        assert (yield pool.recrawl(cutoffs, 100)) == 0
        assert (yield pool.stats())["done"] == 4

    @defer.inlineCallbacks
    def test_recrawl_is_bounded_and_oldest_first(self) -> Gen:
        """At most ``limit`` pages per call, the longest unfetched first, over the sets in the order given."""
        pool = yield self.make_pool(recrawl=[("a.example", "detail"), ("b.example", "list")])
        for i in range(5):
            yield self.crawl(pool, [f"http://a.example/d{i}"], detail=True)
            self.clock.advance(10)
        yield self.crawl(pool, ["http://b.example/l0"])
        now = self.clock.seconds()
        cutoffs = [("a.example", "detail", now), ("b.example", "list", now)]
        assert (yield pool.recrawl(cutoffs, 2)) == 2
        assert sorted((yield pool.pop(10))) == ["http://a.example/d0", "http://a.example/d1"]
        assert (yield pool.recrawl(cutoffs, 4)) == 4
        assert sorted((yield pool.pop(10))) == [*(f"http://a.example/d{i}" for i in (2, 3, 4)), "http://b.example/l0"]
        assert (yield pool.recrawl(cutoffs, 4)) == 0

    @defer.inlineCallbacks
    def test_requeued_by_hand_leaves_the_crawled_set(self) -> Gen:
        """A done page queued again by add(always=True) (the seed timer) is not queued twice by recrawl."""
        pool = yield self.make_pool(recrawl=LISTS)
        yield self.crawl(pool, ["http://a.example/"])
        self.clock.advance(10)
        assert (yield pool.add("http://a.example/", always=True)) is True
        assert (yield pool.recrawl([("a.example", "list", self.clock.seconds())], 10)) == 0
        assert (yield pool.stats())["waiting"] == 1
        assert list((yield pool.pop(10))) == ["http://a.example/"]
        yield pool.set_status("http://a.example/", 200)
        self.clock.advance(10)
        assert (yield pool.recrawl([("a.example", "list", self.clock.seconds())], 10)) == 1

    @defer.inlineCallbacks
    def test_crawled_sets_survive_a_reopen(self) -> Gen:
        """Crawled sets are stored with the pool: a restarted node recrawls what the old one fetched."""
        if not self.reopens:
            self.skipTest("the memory backend keeps nothing across a reopen")  # type: ignore[attr-defined]
        pool = yield self.make_pool(recrawl=LISTS)
        yield self.crawl(pool, ["http://a.example/l1", "http://a.example/l2"])
        pool = yield self.make_pool(recrawl=LISTS)
        self.clock.advance(60)
        assert (yield pool.recrawl([("a.example", "list", self.clock.seconds())], 10)) == 2

    # -- linkbase -----------------------------------------------------------------------

    @defer.inlineCallbacks
    def test_linkbase_keeps_the_first_discovery(self) -> Gen:
        """add_links records parent and anchor of each URL once; why() shows them."""
        pool = yield self.make_pool(linkbase=True)
        parent = "http://a.example/list"
        links = ["http://a.example/1", "http://A.example/2#x"]
        assert (yield pool.add_links(parent, links, ["First  one", " two\n"])) == 2
        assert (yield pool.add_links("http://a.example/other", ["http://a.example/1"], ["again"])) == 0
        answer = yield pool.why("http://a.example/1")
        assert (answer["parent"], answer["anchor"]) == (parent, "First one")
        answer = yield pool.why("http://a.example/2")
        assert (answer["parent"], answer["anchor"], answer["state"]) == (parent, "two", "unknown")
        assert "parent" not in (yield pool.why("http://a.example/3"))

    @defer.inlineCallbacks
    def test_linkbase_keeps_the_link_xpath(self) -> Gen:
        """add_links keeps each link's xpath (seed 004's linkinfo); why() shows it; a link given none, or a
        path that is not one line, has ""."""
        pool = yield self.make_pool(linkbase=True)
        parent = "http://a.example/list"
        links = [f"http://a.example/{i}" for i in range(4)]
        xpaths = ["/html/body/a[1]", "/html/body/ul/li[2]/a", "/bad\npath"]
        assert (yield pool.add_links(parent, links, ["one", "two"], xpaths)) == 4
        found = []
        for url in links:
            found.append((yield pool.why(url)))
        assert [w["xpath"] for w in found] == ["/html/body/a[1]", "/html/body/ul/li[2]/a", "", ""]
        assert [w["anchor"] for w in found] == ["one", "two", "", ""]

    @defer.inlineCallbacks
    def test_linkbase_entries_without_xpath_still_load(self) -> Gen:
        """An entry written before spiderd kept the xpath (URL, parent, anchor) reads with an empty xpath, and
        stays the first discovery."""
        pool = yield self.make_pool(linkbase=True)
        yield self.write_old_link(pool, "http://a.example/old", "http://a.example/list", "Old one")
        answer = yield pool.why("http://a.example/old")
        assert (answer["parent"], answer["anchor"], answer["xpath"]) == ("http://a.example/list", "Old one", "")
        assert (yield pool.add_links("http://a.example/new", ["http://a.example/old"], ["new"], ["/html/a"])) == 0
        assert (yield pool.why("http://a.example/old"))["parent"] == "http://a.example/list"

    def write_old_link(self, pool: Any, url: str, parent: str, anchor: str) -> defer.Deferred[Any]:
        """Store a linkbase entry as spiderd wrote it before the xpath: URL, parent, anchor."""
        from spiderd.frontier.pool import keys
        from spiderd.core.urls import fingerprint

        pool._kv.put(keys.link_key(fingerprint(url)), "\n".join((url, parent, anchor)).encode())
        return defer.succeed(None)

    @defer.inlineCallbacks
    def test_linkbase_off_or_full(self) -> Gen:
        """With the linkbase off nothing is recorded; with linkbase_max it stops adding (nothing is evicted)."""
        off = yield self.make_pool()
        assert (yield off.add_links("http://a.example/", ["http://a.example/1"], ["x"])) == 0
        assert "parent" not in (yield off.why("http://a.example/1"))
        yield off.close()
        capped = yield self.make_pool(linkbase=True, linkbase_max=3)
        links = [f"http://c.example/{i}" for i in range(5)]
        assert (yield capped.add_links("http://c.example/", links[:2], [])) == 2
        assert (yield capped.add_links("http://c.example/", links[2:], [])) == 1
        assert (yield capped.add_links("http://c.example/", ["http://c.example/9"], [])) == 0
        assert (yield capped.why(links[0]))["anchor"] == ""
        assert "parent" not in (yield capped.why(links[3]))

    # -- claims -------------------------------------------------------------------------

    @defer.inlineCallbacks
    def test_claim_once(self) -> Gen:
        """The first claim of a name wins, later ones lose; other names are independent."""
        pool = yield self.make_pool()
        assert (yield pool.claim_once("cron:1000", 60)) is True
        assert (yield pool.claim_once("cron:1000", 60)) is False
        assert (yield pool.claim_once("cron:2000", 60)) is True


    # -- content digests (claim_content) ------------------------------------------------

    @defer.inlineCallbacks
    def test_claim_content(self) -> Gen:
        """The first URL to claim a digest holds it: again True for it, False for any other URL (a duplicate)."""
        pool = yield self.make_pool()
        same, other = content_digest(b"<p>same</p>"), content_digest(b"<p>other</p>")
        assert (yield pool.claim_content(same, "http://a.example/1")) is True
        assert (yield pool.claim_content(same, "http://a.example/1")) is True  # fetched again: still its own
        assert (yield pool.claim_content(same, "http://A.example/1#x")) is True  # the same canonical URL
        assert (yield pool.claim_content(same, "http://a.example/1?sid=2")) is False
        assert (yield pool.claim_content(other, "http://a.example/1?sid=2")) is True
        assert (yield pool.claim_content(other, "http://a.example/1")) is False

    @defer.inlineCallbacks
    def test_content_claims_survive_a_reopen(self) -> Gen:
        """Claims are kept with the pool: a restarted node (Redis: another node) knows them."""
        if not self.reopens:
            self.skipTest("the memory backend keeps nothing across a reopen")  # type: ignore[attr-defined]
        pool = yield self.make_pool()
        assert (yield pool.claim_content(content_digest(b"x"), "http://a.example/1")) is True
        pool = yield self.make_pool()
        assert (yield pool.claim_content(content_digest(b"x"), "http://a.example/2")) is False
        assert (yield pool.claim_content(content_digest(b"x"), "http://a.example/1")) is True


class MemorySeed004Tests(Seed004Contract, TestCase):
    """Seed 004 on the in-memory pool."""

    backend = "memory"
    reopens = False

    def open_pool(self, options: dict[str, Any]) -> defer.Deferred[Any]:
        return defer.succeed(open_memory_pool(self.clock, **options))

    @defer.inlineCallbacks
    def test_claim_expires(self) -> Gen:
        """A claim is free again after its ttl (one process: the clock decides)."""
        pool = yield self.make_pool()
        assert (yield pool.claim_once("cron:1", 30)) is True
        self.clock.advance(31)
        assert (yield pool.claim_once("cron:1", 30)) is True


class LevelDBSeed004Tests(Seed004Contract, TestCase):
    """Seed 004 on the LevelDB pool; a reopen closes the open pool first."""

    backend = "leveldb"

    def setUp(self) -> None:
        super().setUp()
        self.path = self.mktemp()

    @defer.inlineCallbacks
    def open_pool(self, options: dict[str, Any]) -> Generator[Any, Any, Any]:
        for old in self.pools:
            yield old.close()
        return open_leveldb_pool(self.path, self.clock, **options)

    @defer.inlineCallbacks
    def test_store_stays_consistent(self) -> Gen:
        """fsck finds nothing wrong after pages go through crawled sets and back."""
        from spiderd.frontier.pool.fsck import check

        pool = yield self.make_pool(recrawl=[("a.example", "list"), ("a.example", "detail")])
        yield self.crawl(pool, [f"http://a.example/l{i}" for i in range(3)])
        yield self.crawl(pool, [f"http://a.example/d{i}" for i in range(3)], detail=True)
        self.clock.advance(10)
        yield pool.recrawl([("a.example", "detail", self.clock.seconds())], 2)
        yield pool.add("http://a.example/l0", always=True)
        yield pool.claim_content(content_digest(b"x"), "http://a.example/d0")
        assert check(pool._kv) == []
        assert [len(key) for key, _ in pool._kv.iterator(prefix=b"Z")] == [21]  # Z and the SHA-1's 20 bytes
        assert len(list(pool._kv.iterator(prefix=b"R"))) == 3


class RedisSeed004Tests(RedisKeys, Seed004Contract, TestCase):
    """Seed 004 on Redis; a reopen is a restarted node (a new pool object on the same keys)."""

    backend = "redis"

    @defer.inlineCallbacks
    def open_pool(self, options: dict[str, Any]) -> Generator[Any, Any, Any]:
        politeness = options.pop("politeness")
        return (yield self.open_redis(self.clock, politeness, options))

    def write_old_link(self, pool: Any, url: str, parent: str, anchor: str) -> defer.Deferred[Any]:
        """Store a linkbase entry as spiderd wrote it before the xpath, in its ``P l:<bucket>`` hash."""
        fp = hashlib.sha1(url.encode()).hexdigest()[:16]
        return self.admin.execute("HSET", f"{self.prefix}l:{int(fp[:3], 16)}", fp, "\n".join((url, parent, anchor)))

    @defer.inlineCallbacks
    def test_crawled_set_is_a_sorted_set_by_fetch_time(self) -> Gen:
        """Seed 004's layout: one sorted set per domain and kind, URL members scored by fetch time."""
        pool = yield self.make_pool(recrawl=LISTS)
        yield self.crawl(pool, ["http://a.example/l1"])
        key = self.prefix + "crawled:list:a.example"
        answer = yield self.admin.execute("ZRANGE", key, 0, -1, "WITHSCORES")
        assert answer[0] == "http://a.example/l1" and float(answer[1]) == self.clock.seconds()

    @defer.inlineCallbacks
    def test_claim_is_a_key_with_a_ttl(self) -> Gen:
        """claim_once is SET NX PX on <prefix><name>: Redis forgets it after the ttl."""
        pool = yield self.make_pool()
        assert (yield pool.claim_once("cron:1000", 30)) is True
        ttl = yield self.admin.execute("PTTL", self.prefix + "cron:1000")
        assert 0 < int(ttl) <= 30000

    @defer.inlineCallbacks
    def test_two_nodes_never_recrawl_a_page_twice(self) -> Gen:
        """Two nodes recrawling the same sets at once queue each due page once in all."""
        a = yield self.make_pool(recrawl=LISTS)
        b = yield self.make_pool(recrawl=LISTS)
        urls = [f"http://a.example/l{i}" for i in range(50)]
        yield self.crawl(a, urls)
        cutoffs = [("a.example", "list", self.clock.seconds())]
        counts = yield defer.gatherResults([node.recrawl(cutoffs, 7) for _ in range(5) for node in (a, b)])
        assert sum(counts) == 50
        popped = Counter(url for answer in (yield defer.gatherResults([a.pop(30), b.pop(30)])) for url in answer)
        assert sorted(popped) == sorted(urls) and max(popped.values()) == 1
