"""Seed 002's keys as an interface: another tool, on a Redis client of its own, registers domains, pushes
URLs and adds seeds; spiderd polls those domains, adopts those URLs, injects those seeds and deletes none."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Generator

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial.unittest import TestCase

from spiderd.core.cron import parse
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool.redis.link import parse_redis_url
from spiderd.frontier.pool.redis.keys import KEEP_HASHTABLE, KEEP_SKIPLIST
from spiderd.frontier.pool.redis.queues import DOMAIN_SWEEP_EVERY
from spiderd.frontier.scheduler import SeedTimer
from spiderd.frontier.seeds import SeedService

from .test_pool_contract import RedisKeys

Gen = Generator[Any, Any, None]
START = datetime(2024, 3, 10, 22, 0, 0, tzinfo=timezone.utc).timestamp()
FIRING = datetime(2024, 3, 11, 1, 10, 0, tzinfo=timezone.utc).timestamp()  # seed 002's 0 10 1 * * ?


class Seed002Keys(RedisKeys):
    """A node's pool on this test's keys, and ``tool``: a txredisapi connection of its own (not spiderd's link)."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.clock.advance(START)

    @defer.inlineCallbacks
    def node(self, concurrency: int = 10, **options: Any) -> Generator[Any, Any, Any]:
        options.setdefault("pending_threshold", 60.0)
        pool = yield self.open_redis(self.clock, Politeness(0.0, concurrency), options)
        self.addCleanup(pool.close)
        return pool

    @defer.inlineCallbacks
    def tool(self) -> Generator[Any, Any, Any]:
        import txredisapi

        address = parse_redis_url(self.redis_url)
        conn = yield txredisapi.Connection(address.host, address.port, dbid=address.db, reconnect=False)
        self.addCleanup(conn.disconnect)
        return conn

    @defer.inlineCallbacks
    def popped(self, pool: Any, pops: int = 3) -> Generator[Any, Any, list[str]]:
        """The URLs handed out over a few pops (a tool's entries are adopted by one pop, handed out by the next)."""
        out: list[str] = []
        for _ in range(pops):
            out += list((yield pool.pop(100, hub_percent=0)))
        return out


class ToolDomainTests(Seed002Keys, TestCase):
    """Domains and URLs another tool writes straight into spider.website.domains and <domain>.higher/.lower."""

    @defer.inlineCallbacks
    def test_a_tools_domain_and_urls_are_polled(self) -> Gen:
        """The tool SADDs a domain and RPUSHes to its lists: the pool hands the URLs out, list URLs first."""
        pool = yield self.node()
        tool = yield self.tool()
        ns = self.namespace
        yield tool.rpush(ns + "shop.example.lower", ["http://a.shop.example/item/1", "http://a.shop.example/item/2"])
        yield tool.rpush(ns + "shop.example.higher", "http://a.shop.example/list")
        yield tool.sadd(ns + "spider.website.domains", "shop.example")
        handed = yield self.popped(pool)
        assert handed == ["http://a.shop.example/list", "http://a.shop.example/item/1", "http://a.shop.example/item/2"]
        stats = yield pool.stats()
        assert (stats["waiting"], stats["pending"]) == (0, 3)
        assert (yield pool.why("http://a.shop.example/list"))["kind"] == "list"
        assert (yield pool.why("http://a.shop.example/item/1"))["kind"] == "detail"

    @defer.inlineCallbacks
    def test_a_domain_registered_later_is_polled_within_a_sweep(self) -> Gen:
        """A domain the tool registers while the pool runs is found by the next sweep (every DOMAIN_SWEEP_EVERY s)."""
        pool = yield self.node()
        tool = yield self.tool()
        assert (yield pool.pop(10)) == {}  # a sweep: nothing registered yet
        yield tool.rpush(self.namespace + "late.example.higher", "http://late.example/")
        yield tool.sadd(self.namespace + "spider.website.domains", "late.example")
        assert (yield self.popped(pool)) == []  # the next sweep is not due
        self.clock.advance(DOMAIN_SWEEP_EVERY)
        assert (yield self.popped(pool)) == ["http://late.example/"]

    @defer.inlineCallbacks
    def test_a_sweep_takes_a_step_per_pop(self) -> Gen:
        """A pop looks at about DOMAIN_SWEEP_COUNT registered domains; the sweep goes on at the next pops."""
        pool = yield self.node(concurrency=1000)
        tool = yield self.tool()
        domains = [f"d{i}.example" for i in range(250)]
        for domain in domains:
            yield tool.rpush(self.namespace + domain + ".lower", f"http://{domain}/item")
        yield tool.sadd(self.namespace + "spider.website.domains", domains)
        assert (yield pool.pop(1000)) == {}
        first = yield pool.size()  # adopted by the first pop: its step's domains only
        assert 0 < first < len(domains)
        handed = yield self.popped(pool, pops=8)  # the same instant: no new sweep, the same one goes on
        assert sorted(handed) == sorted(f"http://{domain}/item" for domain in domains)

    @defer.inlineCallbacks
    def test_a_registered_domain_stays_for_the_tools_later_pushes(self) -> Gen:
        """Seed 002's tools register a domain once and push (LPUSH, its offerUrl) later: the pool never drops it."""
        pool = yield self.node()
        tool = yield self.tool()
        yield pool.add("http://a.shop.example/1")
        assert (yield self.popped(pool)) == ["http://a.shop.example/1"]
        assert (yield tool.smembers(self.namespace + "spider.website.domains")) == {"shop.example"}
        yield tool.lpush(self.namespace + "shop.example.lower", "http://a.shop.example/2")
        self.clock.advance(DOMAIN_SWEEP_EVERY)
        assert (yield self.popped(pool)) == ["http://a.shop.example/2"]

    @defer.inlineCallbacks
    def test_tool_urls_are_canonical_deduplicated_and_done_ones_skipped(self) -> Gen:
        """A pushed URL is adopted in its canonical form, once; a done one and a bad one are dropped."""
        pool = yield self.node()
        tool = yield self.tool()
        yield pool.add("http://a.shop.example/done")
        for url in (yield self.popped(pool)):
            yield pool.set_status(url, 200)
        self.clock.advance(DOMAIN_SWEEP_EVERY)
        yield tool.rpush(self.namespace + "shop.example.higher", [
            "http://a.shop.example/done", "HTTP://A.shop.example:80/new#top", "http://a.shop.example/new",
            "ftp://a.shop.example/bad"])
        assert (yield self.popped(pool)) == ["http://a.shop.example/new"]
        stats = yield pool.stats()
        assert (stats["waiting"], stats["pending"], stats["done"]) == (0, 1, 1)
        assert stats["rejected"]  # the ftp:// entry, with its reason
        assert (yield tool.llen(self.namespace + "shop.example.higher")) == 0

    @defer.inlineCallbacks
    def test_tool_urls_taken_by_a_node_that_dies_are_adopted_by_another(self) -> Gen:
        """A node that dies after its pop took a tool's entries, before adopting them, loses none of them."""
        dying = yield self.node()
        tool = yield self.tool()
        yield tool.rpush(self.namespace + "shop.example.lower", "http://a.shop.example/item/1")
        yield tool.sadd(self.namespace + "spider.website.domains", "shop.example")
        dying.queues._popped = lambda answer: {}  # the pop script ran; the node died before adding what it took
        assert (yield dying.pop(10)) == {}
        assert (yield tool.llen(self.namespace + "shop.example.lower")) == 0
        other = yield self.node()
        assert (yield self.popped(other)) == []  # held for the dead node until its deadline
        self.clock.advance(61)
        assert (yield self.popped(other)) == ["http://a.shop.example/item/1"]
        assert (yield other.why("http://a.shop.example/item/1"))["kind"] == "detail"


class ToolSeedTests(Seed002Keys, TestCase):
    """spider.seed.urls: set_seeds adds to it, the seed timer injects all of it."""

    @defer.inlineCallbacks
    def test_the_seed_firing_injects_the_tools_seeds(self) -> Gen:
        """A URL the tool SADDs to spider.seed.urls is queued again (always) by the next firing, beside the node's."""
        pool = yield self.node()
        tool = yield self.tool()
        seeds = SeedService(pool, ["http://conf.example/"], [], 600.0)
        yield seeds.load()
        yield tool.sadd(self.namespace + "spider.seed.urls", "http://tool.example/")
        for url in (yield self.popped(pool)):
            yield pool.set_status(url, 200)
        timer = SeedTimer(self.clock, pool, parse("0 10 1 * * ?", timezone.utc))
        timer.startService()
        self.addCleanup(timer.stopService)
        self.clock.advance(FIRING - START)
        yield timer.settled()
        assert sorted((yield self.popped(pool))) == ["http://conf.example/", "http://tool.example/"]

    @defer.inlineCallbacks
    def test_node_starts_and_reloads_keep_the_tools_seeds(self) -> Gen:
        """A node's start (set_seeds) and a reload add their seeds to spider.seed.urls and delete nothing."""
        tool = yield self.tool()
        key = self.namespace + "spider.seed.urls"
        yield tool.sadd(key, ["http://tool.example/", "http://tool.example/b"])
        seeds = SeedService((yield self.node()), ["http://conf.example/"], [], 600.0)
        yield seeds.load()
        other = SeedService((yield self.node()), ["http://other.example/"], [], 600.0)
        yield other.load()
        yield other.load(seeds=["http://reloaded.example/"])
        assert (yield tool.smembers(key)) == {"http://tool.example/", "http://tool.example/b", "http://conf.example/",
                                              "http://other.example/", "http://reloaded.example/"}


class ToolEntryNamedLikeTheSentinelTests(Seed002Keys, TestCase):
    """A tool's bad entry whose host (as the scripts read it: host_of in common.lua) is the name of the entry that
    keeps P inflight or P next out of a listpack (KEEP_HASHTABLE, KEEP_SKIPLIST) is dropped as any bad entry: it
    neither breaks every pop (HGET P inflight would answer that entry's text) nor parks its domain for good (ZSCORE
    P next would answer +inf, and its domain would wait in P ready at +inf, where nothing wakes it)."""

    @defer.inlineCallbacks
    def pushed_before_a_good_one(self, host: str) -> Generator[Any, Any, Any]:
        """A node's pool after a tool pushed ``http://<host>/x``, then a good URL, onto a registered domain's list;
        the pops hand out the good one only."""
        pool = yield self.node()
        tool = yield self.tool()
        yield tool.sadd(self.namespace + "spider.website.domains", "shop.example")
        yield tool.rpush(self.namespace + "shop.example.higher", [f"http://{host}/x", "http://a.shop.example/ok"])
        assert (yield self.popped(pool)) == ["http://a.shop.example/ok"]
        return pool

    @defer.inlineCallbacks
    def test_a_host_named_like_the_inflight_field(self) -> Gen:
        yield self.pushed_before_a_good_one(KEEP_HASHTABLE[0])

    @defer.inlineCallbacks
    def test_a_host_named_like_the_next_member(self) -> Gen:
        pool = yield self.pushed_before_a_good_one(KEEP_SKIPLIST)
        yield pool.add("http://a.shop.example/later")
        self.clock.advance(DOMAIN_SWEEP_EVERY)
        assert (yield self.popped(pool)) == ["http://a.shop.example/later"]
