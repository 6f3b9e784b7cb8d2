"""What only the Redis pool has: many nodes on the same keys, the seed-002 layout, a compact seen set, connection errors."""

from __future__ import annotations

import hashlib
import socket
from collections import Counter
from typing import Any, Generator
from urllib.parse import urlsplit

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial.unittest import TestCase

from spiderd.core.conditional import Validators
from spiderd.core.rules import AdaptiveDelay
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool.redis import RedisPoolError, open_redis_pool
from spiderd.frontier.pool.redis import channel as redis_channel_module
from spiderd.frontier.pool.redis.keys import KEEP_SKIPLIST
from spiderd.frontier.pool.redis.link import RedisLink, Script, parse_redis_url

from .test_pool_contract import V1, V2, RedisKeys

Gen = Generator[Any, Any, None]


class TwoNodeTests(RedisKeys, TestCase):
    """Two pool objects on the same keys stand for two nodes sharing one Redis."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.pools: list[Any] = []
        self.addCleanup(self._close_all)

    @defer.inlineCallbacks
    def node(self, delay: float = 0.0, concurrency: int = 1, **options: Any) -> Generator[Any, Any, Any]:
        options.setdefault("pending_threshold", 60.0)
        politeness = Politeness(delay, concurrency, overrides=options.pop("overrides", {}),
                                adaptive=options.pop("adaptive", AdaptiveDelay()),
                                adaptive_overrides=options.pop("adaptive_overrides", {}))
        pool = yield self.open_redis(self.clock, politeness, options)
        self.pools.append(pool)
        return pool

    @defer.inlineCallbacks
    def _close_all(self) -> Gen:
        for pool in self.pools:
            yield pool.close()

    @defer.inlineCallbacks
    def test_concurrent_pops_never_share_a_url(self) -> Gen:
        """Many pops from two nodes at once hand out every URL exactly once overall."""
        a = yield self.node(concurrency=1000)
        b = yield self.node(concurrency=1000)
        urls = [f"http://h{i % 40}.example/{i}" for i in range(2000)]
        assert (yield a.addmany(urls)) == 2000
        pops = [node.pop(25) for _ in range(45) for node in (a, b)]
        answers = yield defer.gatherResults(pops)
        handed = Counter(url for answer in answers for url in answer)
        assert set(handed) == set(urls) and max(handed.values()) == 1
        assert (yield a.pop(100)) == {} and (yield b.pop(100)) == {}
        stats = yield b.stats()
        assert (stats["waiting"], stats["pending"]) == (0, 2000)

    @defer.inlineCallbacks
    def test_delay_holds_across_nodes(self) -> Gen:
        """A host's delay counts from the last request of any node."""
        a = yield self.node(delay=2.0, concurrency=4)
        b = yield self.node(delay=2.0, concurrency=4)
        yield a.addmany([f"http://a.example/{i}" for i in range(10)])
        assert len((yield a.pop(10))) == 1
        assert (yield b.pop(10)) == {}
        self.clock.advance(1)
        assert (yield b.pop(10)) == {}
        self.clock.advance(1)
        assert len((yield b.pop(10))) == 1
        assert (yield a.pop(10)) == {}
        assert abs((yield a.next_due()) - 2.0) < 1e-6

    @defer.inlineCallbacks
    def test_adaptive_delay_holds_across_nodes(self) -> Gen:
        """A fetch's adaptive delay, reported by one node, holds the host on every node; a host's own rule (in
        ``P conf``, from the node that has it configured) applies to fetches any node reports."""
        a = yield self.node(adaptive=AdaptiveDelay(3.0, 0.0, 30.0),
                            adaptive_overrides={"slow.example": AdaptiveDelay(2.0, 0.0, 30.0)})
        b = yield self.node()  # adaptive politeness off by default on this node
        yield a.addmany([f"http://a.example/{i}" for i in range(3)])
        url = next(iter((yield a.pop(10))))
        self.clock.advance(2)
        yield a.fetched(url, 2.0)
        self.clock.advance(5.99)
        assert (yield b.pop(10)) == {}
        self.clock.advance(0.01)
        url = next(iter((yield b.pop(10))))
        yield b.set_status(url, 200)
        yield b.fetched(url, 2.0)  # b's own rule: off, and the host has none of its own
        assert len((yield a.pop(10))) == 1
        yield a.addmany([f"http://slow.example/{i}" for i in range(2)])
        url = next(iter((yield b.pop(10))))
        yield b.fetched(url, 1.5)  # the host's own rule: 2 x 1.5 s
        self.clock.advance(2.99)
        assert (yield a.pop(10)) == {}
        self.clock.advance(0.01)
        assert [u.split("/")[2] for u in (yield a.pop(10))] == ["slow.example"]

    @defer.inlineCallbacks
    def test_throttle_block_holds_across_nodes(self) -> Gen:
        """A host blocked by one node's throttling answer (Retry-After) is handed out by no node before then;
        the URL's throttle count is shared too (the other node's throttle past the limit is a failure)."""
        a = yield self.node(concurrency=4, failure_threshold=0, max_throttles=1, pending_threshold=600.0)
        b = yield self.node(concurrency=4, failure_threshold=0, max_throttles=1, pending_threshold=600.0)
        yield a.addmany(["http://a.example.com/1", "http://a.example.com/2", "http://b.example.net/1"])
        yield a.pop(1)
        yield a.throttle("http://a.example.com/1", self.clock.seconds() + 120, 429, "throttled: http 429, retry after 120 s")
        assert (yield b.pop(10)) == {"http://b.example.net/1": False}
        self.clock.advance(119)
        assert (yield b.pop(10)) == {} and (yield a.pop(10)) == {}
        assert 0 < (yield b.next_due()) <= 1.0
        self.clock.advance(1)
        assert set((yield b.pop(10))) == {"http://a.example.com/1", "http://a.example.com/2"}
        yield b.throttle("http://a.example.com/1", self.clock.seconds() + 5, 429)
        assert (yield a.stats())["failed"] == 1

    def test_validators_hold_across_nodes(self) -> Any:
        """The validators one node's done fetches kept (a hub's, a recrawled page's) come back with another
        node's pop, in its answer (validators() sends nothing to Redis); that node's 304 updates them for all."""
        return self.validators_hold_across_nodes(spy=True)

    @defer.inlineCallbacks
    def validators_hold_across_nodes(self, spy: bool) -> Gen:
        """The validators test; ``spy``: also check validators() sends nothing (a pool with one link to spy on)."""
        recrawl = [("a.example", "list")]
        a = yield self.node(concurrency=4, recrawl=recrawl)
        b = yield self.node(concurrency=4, recrawl=recrawl)
        hub, page = "http://a.example/hub", "http://a.example/l"
        for node in (a, b):
            yield node.set_hubs([hub], 60)
        yield a.add(page)
        assert (yield a.pop(10)) == {hub: True, page: False}
        yield a.set_statuses([(hub, 200, None, V1), (page, 200, None, V2)])
        self.clock.advance(61)
        assert (yield b.recrawl([("a.example", "list", self.clock.seconds())], 10)) == 1
        assert (yield b.pop(10)) == {hub: True, page: False}
        asked: list[Any] = []
        if spy:
            real, b.channel.execute = b.channel.execute, lambda *args: asked.append(args) or real(*args)
        assert [(yield b.validators(hub)), (yield b.validators(page))] == [V1, V2]
        assert asked == []
        yield b.set_statuses([(hub, 304, None, V1.updated(V2)), (page, 304, None, V2)])
        assert (yield a.validators(hub)) == Validators('W/"v2"', V2.last_modified)
        assert (yield a.validators(page)) == V2
        assert (yield a.stats())["done"] == 2

    @defer.inlineCallbacks
    def test_concurrency_holds_across_nodes(self) -> Gen:
        """A host's concurrency counts the requests in flight on every node."""
        a = yield self.node(concurrency=2)
        b = yield self.node(concurrency=2)
        yield a.addmany([f"http://a.example/{i}" for i in range(10)])
        first = yield a.pop(10)
        assert len(first) == 2
        assert (yield b.pop(10)) == {}
        yield a.fetched(sorted(first)[0])
        assert len((yield b.pop(10))) == 1
        assert (yield a.pop(10)) == {}

    @defer.inlineCallbacks
    def test_dead_node_urls_come_back_after_the_lease(self) -> Gen:
        """A node that dies with leased URLs (no set_status) loses nothing: another node gets them once the leases end."""
        a = yield self.node(concurrency=5)
        b = yield self.node(concurrency=5)
        yield a.addmany([f"http://a.example/{i}" for i in range(5)])
        yield a.set_hubs(["http://h.example/"], 3600)
        taken = yield a.pop(10, hub_percent=10)
        assert len(taken) == 6 and sum(taken.values()) == 1
        yield a.close()  # killed: its leases and host slots stay in Redis
        assert (yield b.pop(10)) == {}
        self.clock.advance(59)
        assert (yield b.pop(10)) == {}
        self.clock.advance(2)
        back = yield b.pop(10, hub_percent=0)
        assert set(back) == {u for u in taken if not taken[u]} and len(back) == 5
        for url in back:
            yield b.set_status(url, 200)
        stats = yield b.stats()
        assert (stats["waiting"], stats["pending"], stats["done"]) == (0, 0, 5)
        assert (yield b.why("http://h.example/"))["host_inflight"] == 0

    @defer.inlineCallbacks
    def test_statuses_go_out_together_and_in_order(self) -> Gen:
        """Statuses given at once share a script call, and a pop given after them sees them all: those still
        waiting go out in the pop's own call (statuspop), before its pop."""
        pool = yield self.node(concurrency=3)
        yield pool.addmany([f"http://a.example/{i}" for i in range(6)])
        first = yield pool.pop(10)
        sent: list[str] = []
        run = pool.channel.link.run
        pool.channel.link.run = lambda script, args: sent.append(script.name) or run(script, args)
        acks = [pool.set_status(url, 200) for url in first]
        second = yield pool.pop(10)
        yield defer.gatherResults(acks)
        assert sent == ["status", "statuspop"]  # one alone, the next two together with the pop
        assert len(first) == len(second) == 3 and not set(first) & set(second)
        assert (yield pool.stats())["done"] == 3

    @staticmethod
    def sent_calls(pool: Any) -> list[tuple[str, list[str]]]:
        """(script name, arguments) of every script call ``pool`` makes from now on."""
        sent: list[tuple[str, list[str]]] = []
        run = pool.channel.link.run
        pool.channel.link.run = lambda script, args: sent.append((script.name, list(args))) or run(script, args)
        return sent

    @defer.inlineCallbacks
    def test_statuses_wait_for_the_next_pop_or_status_wait(self) -> Gen:
        """With status_wait, statuses wait: they go out in the next pop's call (which then sees their freed host
        slots), or alone once status_wait has passed, or at close."""
        pool = yield self.node(concurrency=3, status_wait=5.0)
        yield pool.addmany([f"http://a.example/{i}" for i in range(8)])
        first = yield pool.pop(10)
        sent = self.sent_calls(pool)
        acks = [pool.set_status(url, 200) for url in first]
        assert sent == [] and not any(d.called for d in acks)
        second = yield pool.pop(10)
        yield defer.gatherResults(acks)
        assert [name for name, _ in sent] == ["statuspop"]
        assert len(first) == len(second) == 3 and not set(first) & set(second)
        acks = [pool.set_status(url, 200) for url in second]
        self.clock.advance(4.9)
        assert len(sent) == 1 and not any(d.called for d in acks)
        self.clock.advance(0.1)
        yield defer.gatherResults(acks)
        assert [name for name, _ in sent] == ["statuspop", "status"]
        third = yield pool.pop(10)
        last = pool.set_status(sorted(third)[0], 200)
        yield pool.close()
        yield last
        assert [name for name, _ in sent] == ["statuspop", "status", "pop", "status"]
        assert (yield self.admin.execute("HGET", self.prefix + "counters", "done")) == "7"

    @defer.inlineCallbacks
    def test_waiting_statuses_go_out_at_a_thousand(self) -> Gen:
        """However long status_wait is, STATUS_BATCH entries waiting go out at once."""
        self.patch(redis_channel_module, "STATUS_BATCH", 3)
        pool = yield self.node(concurrency=5, status_wait=60.0)
        yield pool.addmany([f"http://a.example/{i}" for i in range(5)])
        first = sorted((yield pool.pop(10)))
        sent = self.sent_calls(pool)
        acks = [pool.set_status(url, 200) for url in first]
        yield defer.gatherResults(acks[:3])
        assert [name for name, _ in sent] == ["status"] and not any(d.called for d in acks[3:])

    @defer.inlineCallbacks
    def test_fetched_left_out_when_its_status_waits_with_it(self) -> Gen:
        """A status given while its URL's 'fetched' entry still waits frees the host slot itself: the entry is
        left out; with adaptive politeness it goes too (the fetch's duration paces the host)."""
        for host, adaptive in (("a.example", AdaptiveDelay()), ("b.example", AdaptiveDelay(2.0, 0.0, 30.0))):
            pool = yield self.node(concurrency=2, status_wait=5.0, adaptive=adaptive)
            yield pool.addmany([f"http://{host}/0", f"http://{host}/1"])
            first = list((yield pool.pop(10)))
            sent = self.sent_calls(pool)
            calls = [call for url in first for call in (pool.fetched(url, 1.0), pool.set_status(url, 200))]
            self.clock.advance(5)
            yield defer.gatherResults(calls)
            (name, args), = sent
            assert name == "status" and args.count("fetched") == (2 if adaptive.on else 0)
            assert (yield pool.why(f"http://{host}/0"))["host_inflight"] == 0
            yield pool.addmany([f"http://{host}/2"])
            assert len((yield pool.pop(10))) == (0 if adaptive.on else 1)  # paced for 2 s by its fetches
            yield pool.close()

    @defer.inlineCallbacks
    def test_fetched_goes_out_with_the_statuses(self) -> Gen:
        """fetched() calls and statuses given while one call is on its way share the next call, in their order:
        every host slot freed once, every URL done, and the adaptive delay of a fetch still paces its host."""
        pool = yield self.node(concurrency=3, adaptive=AdaptiveDelay(2.0, 0.0, 30.0))
        yield pool.addmany([f"http://a.example/{i}" for i in range(3)] + ["http://b.example/0"])
        first = list((yield pool.pop(10)))
        sent: list[str] = []
        run = pool.channel.link.run
        pool.channel.link.run = lambda script, args: sent.append(script.name) or run(script, args)
        calls = [call for url in first for call in (pool.fetched(url, 1.0), pool.set_status(url, 200))]
        yield defer.gatherResults(calls)
        assert sent == ["status", "status"]  # the first fetched alone, the rest together
        assert (yield pool.stats())["done"] == 4
        assert (yield pool.why("http://a.example/0"))["host_inflight"] == 0
        yield pool.addmany(["http://a.example/9", "http://c.example/0"])
        assert list((yield pool.pop(10))) == ["http://c.example/0"]  # a.example paced for 2 s by its fetches
        self.clock.advance(2)
        assert list((yield pool.pop(10))) == ["http://a.example/9"]

    @defer.inlineCallbacks
    def test_seed_002_keys_where_tools_expect_them(self) -> Gen:
        """Domains in spider.website.domains, list URLs in <domain>.higher, details in <domain>.lower, seeds in spider.seed.urls."""
        pool = yield self.node(concurrency=10)
        yield pool.addmany(["http://list.shop.example.com/c1", "http://list.shop.example.com/c2"])
        yield pool.addmany(["http://item.shop.example.com/1", "http://www.other.example.org/p"], detail=True)
        yield pool.set_seeds(["http://list.shop.example.com/", "http://LIST.shop.example.com/#top"])
        ns, admin = self.namespace, self.admin
        assert sorted((yield admin.execute("SMEMBERS", ns + "spider.website.domains"))) == ["example.com", "example.org"]
        assert (yield admin.execute("LRANGE", ns + "example.com.higher", "0", "-1")) == [
            "http://list.shop.example.com/c1", "http://list.shop.example.com/c2"]
        assert (yield admin.execute("LRANGE", ns + "example.com.lower", "0", "-1")) == ["http://item.shop.example.com/1"]
        assert (yield admin.execute("SMEMBERS", ns + "spider.seed.urls")) == ["http://list.shop.example.com/"]
        yield pool.pop(10)
        assert (yield admin.execute("EXISTS", ns + "example.com.higher", ns + "example.com.lower")) == 0
        # drained domains stay registered: seed 002's tools register a domain once and push to it later
        assert sorted((yield admin.execute("SMEMBERS", ns + "spider.website.domains"))) == ["example.com", "example.org"]
        assert (yield admin.execute("ZRANGE", self.prefix + "ready", "0", "-1")) == [KEEP_SKIPLIST]  # no domain

    @defer.inlineCallbacks
    def test_small_keys_keep_constant_time_encodings(self) -> Gen:
        """However few hosts and short their URLs, P inflight and P lease are hash tables and P leases, ready,
        waiting and next are skiplists from the start (a listpack is scanned at every command: bench/redis_ir.py); the entries that keep them so are
        in no count or listing."""
        pool = yield self.node(delay=1.0, concurrency=2)
        yield pool.addmany(["http://a.example/1", "http://a.example/2", "http://b.example/1"])
        popped = yield pool.pop(2)
        assert len(popped) == 2
        for key, encoding in (("inflight", "hashtable"), ("lease", "hashtable"), ("leases", "skiplist"),
                              ("ready", "skiplist"), ("waiting", "skiplist"), ("next", "skiplist")):
            assert (yield self.admin.execute("OBJECT", "ENCODING", self.prefix + key)) == encoding, key
        stats = yield pool.stats()
        assert (stats["waiting"], stats["pending"], stats["hosts"]) == (1, 2, 1)
        assert stats["largest"] == [["a.example", 1]]
        assert [row["host"] for row in (yield pool.hosts())] == ["a.example"]
        assert (yield pool.next_due()) == 1.0  # a.example's delay: the +inf entries are no due time
        self.clock.advance(61)  # the leases end (no lease range reaches the +inf entry): one URL of each host again
        again = yield pool.pop(5)
        assert sorted(urlsplit(url).hostname for url in again) == ["a.example", "b.example"]
        stats = yield pool.stats()
        assert (stats["waiting"], stats["pending"], stats["hosts"]) == (1, 2, 1)

    @defer.inlineCallbacks
    def test_small_keys_keep_their_encodings_after_the_data_is_lost(self) -> Gen:
        """A pool that lost its data (a Redis restarted empty, a flush: a new epoch) gets the entries that keep its
        small keys out of listpacks again from the next add's answer."""
        pool = yield self.node(concurrency=2)
        yield pool.add("http://a.example/1")
        yield self.admin.execute("DEL", *(yield self.keys()))
        yield pool.add("http://a.example/2")
        yield pool.size()  # (after the writes on the same connection)
        assert (yield self.admin.execute("OBJECT", "ENCODING", self.prefix + "inflight")) == "hashtable"
        assert (yield self.admin.execute("ZRANGE", self.prefix + "leases", "0", "-1")) == [KEEP_SKIPLIST]
        assert (yield self.admin.execute("OBJECT", "ENCODING", self.prefix + "ready")) == "skiplist"

    @defer.inlineCallbacks
    def test_hosts_of_a_domain_queue_at_its_head(self) -> Gen:
        """Politeness is per host; the hosts of one domain share its lists, so a host waits behind the head's."""
        pool = yield self.node(delay=5.0, concurrency=4)
        urls = ["http://a.shop.example/1", "http://b.shop.example/1", "http://a.shop.example/2", "http://a.shop.example/3",
                "http://b.shop.example/2"]
        yield pool.addmany(urls)
        assert list((yield pool.pop(10))) == urls[:2]
        assert (yield pool.pop(10)) == {}
        self.clock.advance(5)
        assert list((yield pool.pop(10))) == urls[2:3]  # b.shop.example/2 waits behind a.shop.example/3
        self.clock.advance(5)
        assert list((yield pool.pop(10))) == urls[3:]

    @defer.inlineCallbacks
    def test_claiming_a_blocked_head_lets_the_next_host_go(self) -> Gen:
        """When a claim takes the head URL out of a domain's list, the next URL's host goes at its own time."""
        pool = yield self.node(delay=5.0, concurrency=4)
        yield pool.addmany(["http://a.shop.example/1", "http://a.shop.example/2", "http://b.shop.example/1"])
        assert list((yield pool.pop(10))) == ["http://a.shop.example/1"]
        assert (yield pool.claim("http://a.shop.example/2")) is True
        assert (yield pool.next_due()) == 0
        assert list((yield pool.pop(10))) == ["http://b.shop.example/1"]

    @defer.inlineCallbacks
    def test_startup_deletes_nothing(self) -> Gen:
        """Opening another pool on the same keys changes no key."""
        pool = yield self.node(concurrency=2, overrides={"a.example": (0.0, 2)})
        yield pool.addmany([f"http://a.example/{i}" for i in range(5)] + ["http://b.example/d"])
        yield pool.set_hubs(["http://a.example/hub"], 60)
        yield pool.set_host_delay("b.example", 3.0)
        yield pool.set_seeds(["http://a.example/"])
        yield pool.seen_add(["http://c.example/x"])
        yield pool.pop(3)
        before = yield self.snapshot()
        yield self.node(concurrency=2, overrides={"a.example": (0.0, 2)})
        assert (yield self.snapshot()) == before and len(before) > 10

    @defer.inlineCallbacks
    def snapshot(self) -> Generator[Any, Any, dict[str, Any]]:
        keys = yield self.keys()
        values = yield defer.gatherResults([self.admin.execute("DUMP", key) for key in keys])
        return dict(zip(keys, values))

    @defer.inlineCallbacks
    def test_seen_buckets_stay_intsets(self) -> Gen:
        """States live in small buckets of integers (Redis intsets), 8 bytes a URL, whatever their state."""
        pool = yield self.node(concurrency=100)
        yield pool.addmany([f"http://a{i % 7}.example/{i}" for i in range(300)])
        yield pool.seen_add([f"http://b.example/{i}" for i in range(300)])
        for url in (yield pool.pop(50)):
            yield pool.set_status(url, 200)
        buckets = [key for key in (yield self.keys()) if key.startswith(self.prefix + "s:")]
        encodings = yield defer.gatherResults([self.admin.execute("OBJECT", "ENCODING", key) for key in buckets])
        sizes = yield defer.gatherResults([self.admin.execute("SCARD", key) for key in buckets])
        assert set(encodings) == {"intset"} and sum(map(int, sizes)) == 600


    @defer.inlineCallbacks
    def test_hop_counts_dropped_at_the_final_status(self) -> Gen:
        """A link's hop count lives while it is active and goes at its final status, given by any node."""
        tracking = yield self.node(concurrency=10, max_hops=3)
        other = yield self.node(concurrency=10)
        seed, link = "http://a.example/", "http://a.example/1"
        yield tracking.add(seed)
        yield tracking.addmany([link], parent=seed)
        hops = [key for key in (yield self.keys()) if key.startswith(self.prefix + "h:")]
        assert (yield defer.gatherResults([self.admin.execute("HLEN", key) for key in hops])) == [1]
        assert sorted((yield other.pop(10))) == [seed, link]
        yield other.set_statuses([(seed, 200), (link, 404)])
        assert [key for key in (yield self.keys()) if key.startswith(self.prefix + "h:")] == []

    @defer.inlineCallbacks
    def test_hop_counts_kept_without_the_mark_still_dropped(self) -> Gen:
        """A node with a hop limit marks hop counts as kept when it starts: counts an older version left go too."""
        seed, link = "http://a.example/", "http://a.example/1"
        older = yield self.node(concurrency=10, max_hops=3)
        yield older.add(seed)
        yield older.addmany([link], parent=seed)
        yield self.admin.execute("HDEL", self.prefix + "meta", "hops")  # as an older version left it
        tracking = yield self.node(concurrency=10, max_hops=3)
        assert sorted((yield tracking.pop(10))) == [seed, link]
        yield tracking.set_statuses([(seed, 200), (link, 200)])
        assert [key for key in (yield self.keys()) if key.startswith(self.prefix + "h:")] == []

    @defer.inlineCallbacks
    def test_bucket_bits_fixed_by_the_first_node(self) -> Gen:
        """The first node records its seen_bucket_bits; a node asking for other bits adopts the recorded ones."""
        first = yield self.node(seen_bucket_bits=18)
        yield first.addmany(["http://a.example/1"])
        other = yield self.node(seen_bucket_bits=16)
        assert (first.channel.bits, other.channel.bits) == (18, 18)
        assert (yield other.add("http://a.example/1")) is False  # the same bucket: known


class KnownURLsTests(RedisKeys, TestCase):
    """A node remembers the URLs the pool knows and sends them no more, answering as the pool would."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.clock.advance(1_000_000)

    @defer.inlineCallbacks
    def node(self, **options: Any) -> Generator[Any, Any, Any]:
        options.setdefault("pending_threshold", 60.0)
        pool = yield self.open_redis(self.clock, Politeness(0.0, 100), options)
        self.addCleanup(pool.close)
        self.calls: Counter[str] = Counter()
        run = pool.channel.run

        def counted(name: str, args: list[str], now: float | None = None) -> Any:
            self.calls[name] += 1
            return run(name, args, now)

        pool.channel.run = counted
        return pool

    @defer.inlineCallbacks
    def test_known_links_are_not_sent_again(self) -> Gen:
        """Links added once (new or known) cost no script call when found again; new ones among them still go."""
        pool = yield self.node()
        links = [f"http://a.example/{i}" for i in range(5)]
        assert (yield pool.addmany(links)) == 5
        assert (yield pool.addmany(links)) == 0
        assert self.calls["add"] == 1 and pool.known.skipped == 5
        assert (yield pool.addmany(links + ["http://a.example/new"])) == 1
        assert self.calls["add"] == 2 and pool.known.skipped == 10
        assert (yield pool.stats())["known_skipped"] == 10  # /metrics: spiderd_pool_known_skipped
        handed = yield pool.pop(10)
        yield pool.set_statuses([(url, 200) for url in handed])
        assert (yield pool.addmany(links)) == 0 and self.calls["add"] == 2

    @defer.inlineCallbacks
    def test_always_goes_to_the_pool(self) -> Gen:
        """A re-add (always) is never skipped: a done URL is queued again."""
        pool = yield self.node()
        yield pool.add("http://a.example/1")
        yield pool.set_statuses([(url, 200) for url in (yield pool.pop(1))])
        assert (yield pool.add("http://a.example/1", always=True)) is True
        assert list((yield pool.pop(1))) == ["http://a.example/1"]

    @defer.inlineCallbacks
    def test_refused_links_are_not_remembered(self) -> Gen:
        """A link past the hop limit is not known to the pool: found again nearer a seed, it is added."""
        pool = yield self.node(max_hops=1)
        yield pool.addmany(["http://a.example/", "http://a.example/far-seed"])
        yield pool.addmany(["http://a.example/1"], parent="http://a.example/")
        assert (yield pool.addmany(["http://a.example/x"], parent="http://a.example/1")) == 0  # hop 2
        assert (yield pool.addmany(["http://a.example/x"], parent="http://a.example/")) == 1  # hop 1

    @defer.inlineCallbacks
    def test_only_the_refused_links_of_a_call_are_not_remembered(self) -> Gen:
        """A host's budget refuses some links of a call; the others are remembered, the refused ones sent again."""
        pool = yield self.node(max_urls_per_host=2)
        links = ["http://a.example/1", "http://b.example/1", "http://a.example/2", "http://a.example/3"]
        assert (yield pool.addmany(links)) == 3  # a.example/3: past a.example's budget
        assert (yield pool.addmany(links)) == 0
        assert self.calls["add"] == 2 and pool.known.skipped == 3 and len(pool.known) == 3

    @defer.inlineCallbacks
    def test_re_adds_are_not_remembered(self) -> Gen:
        """A re-add (always: seeds, sitemaps, recrawls) goes to the pool and leaves the memory to the links."""
        pool = yield self.node()
        yield pool.addmany(["http://a.example/1", "http://a.example/2"], always=True)
        assert len(pool.known) == 0 and (yield pool.addmany(["http://a.example/1"])) == 0
        assert self.calls["add"] == 2 and len(pool.known) == 1

    @defer.inlineCallbacks
    def test_a_pool_that_lost_its_data_is_noticed(self) -> Gen:
        """Redis emptied (restarted without persistence, flushed): the next answer's epoch differs, the node
        forgets what it remembered, and a link it had remembered is added again."""
        pool = yield self.node()
        yield pool.addmany(["http://a.example/menu"])
        yield self.admin.execute("DEL", *(yield self.keys()))
        assert (yield pool.addmany(["http://a.example/menu"])) == 0  # skipped: the loss is not known yet
        assert (yield pool.addmany(["http://a.example/other"])) == 1  # its answer carries the new epoch
        assert (yield pool.addmany(["http://a.example/menu"])) == 1
        assert (yield pool.size()) == 2

    @defer.inlineCallbacks
    def test_seen_filter_and_add_remember_what_the_pool_knows(self) -> Gen:
        """seen_filter skips URLs known before (an add's too); seen_add's URLs are known after it, batched or not."""
        pool = yield self.node()
        yield pool.add("http://a.example/queued")
        urls = ["http://a.example/queued", "http://a.example/1", "http://a.example/2"]
        assert (yield pool.seen_filter(urls)) == urls[1:] and pool.known.skipped == 1  # queued by the add
        assert (yield pool.seen_filter(urls)) == urls[1:] and pool.known.skipped == 2
        assert (yield pool.seen_add(urls[1:])) == 2
        assert (yield pool.seen_filter(urls)) == [] and self.calls["seen"] == 3
        assert (yield pool.seen_add(urls)) == 0 and self.calls["seen"] == 3

    @defer.inlineCallbacks
    def test_none_remembered_with_size_0(self) -> Gen:
        """``redis_known_urls = 0``: every add goes to the pool, as before."""
        pool = yield self.node(redis_known_urls=0)
        yield pool.add("http://a.example/1")
        assert (yield pool.add("http://a.example/1")) is False
        assert self.calls["add"] == 2 and len(pool.known) == 0


class ConnectionTests(RedisKeys, TestCase):
    """Connection errors fail Deferreds with a message naming host:port, never hang, never show the password."""

    @defer.inlineCallbacks
    def test_refused_connection(self) -> Gen:
        """Opening a pool on a port where nothing listens fails at once, naming host:port and not the password."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        d = open_redis_pool(f"redis://:s3cret@127.0.0.1:{port}/0", Clock())
        error = yield self.assertFailure(d, RedisPoolError)
        assert f"127.0.0.1:{port}" in str(error) and "cannot connect" in str(error) and "s3cret" not in str(error)

    @defer.inlineCallbacks
    def test_wrong_password(self) -> Gen:
        """A password Redis refuses fails the open without echoing it."""
        host, port = parse_redis_url(self.redis_url).host, parse_redis_url(self.redis_url).port
        d = open_redis_pool(f"redis://:n0t-the-password@{host}:{port}/0", Clock())
        error = yield self.assertFailure(d, RedisPoolError)
        assert f"{host}:{port}" in str(error) and "n0t-the-password" not in str(error)

    @defer.inlineCallbacks
    def test_lost_connection_fails_the_call_in_flight_then_reconnects(self) -> Gen:
        """A connection killed under a command fails that command clearly; the next call reconnects."""
        link = RedisLink(parse_redis_url(self.redis_url))
        self.addCleanup(link.close)
        client = yield link.execute("CLIENT", "ID")
        blocked = link.execute("BLPOP", self.namespace + "never", "20")
        yield self.admin.execute("CLIENT", "KILL", "ID", str(client))
        error = yield self.assertFailure(blocked, RedisPoolError)
        assert str(link.address) in str(error) and "connection lost" in str(error)
        assert (yield link.execute("PING")) == "PONG"

    @defer.inlineCallbacks
    def test_command_after_an_idle_loss_is_sent_after_reconnecting(self) -> Gen:
        """A command that finds the connection already gone was never sent: it goes out once reconnected."""
        link = RedisLink(parse_redis_url(self.redis_url))
        self.addCleanup(link.close)
        assert (yield link.execute("PING")) == "PONG"
        yield link._conn.disconnect()
        assert (yield link.execute("PING")) == "PONG"

    @defer.inlineCallbacks
    def test_close_lets_calls_on_their_way_finish(self) -> Gen:
        """Statuses given just before close() are recorded, not cut off."""
        pool = yield self.open_redis(Clock(), Politeness(concurrency=10), {})
        yield pool.addmany([f"http://a.example/{i}" for i in range(5)])
        acks = [pool.set_status(url, 200) for url in (yield pool.pop(10))]
        yield defer.gatherResults([pool.close(), pool.close()])  # twice is harmless
        yield defer.gatherResults(acks)
        assert (yield self.admin.execute("HGET", self.prefix + "counters", "done")) == "5"

    @defer.inlineCallbacks
    def test_closed_pool_fails_calls(self) -> Gen:
        """After close(), calls fail with a clear error instead of reconnecting."""
        pool = yield self.open_redis(Clock(), Politeness(), {})
        yield pool.close()
        error = yield self.assertFailure(pool.size(), RedisPoolError)
        assert "closed" in str(error)

    @defer.inlineCallbacks
    def test_noscript_falls_back_to_eval(self) -> Gen:
        """A script Redis does not have (flushed, restarted) is sent with EVAL and then found by EVALSHA."""
        source = f"return '{self.namespace}'"
        script = Script("probe", source, hashlib.sha1(source.encode()).hexdigest())
        link = RedisLink(parse_redis_url(self.redis_url))
        self.addCleanup(link.close)
        assert (yield link.run(script, [])) == self.namespace
        assert (yield link.execute("SCRIPT", "EXISTS", script.sha)) == [1]
        assert (yield link.run(script, [])) == self.namespace

    @defer.inlineCallbacks
    def test_lost_function_library_is_loaded_again(self) -> Gen:
        """Scripts run by FCALL from the library loaded at connecting; a library Redis lost (FUNCTION DELETE,
        a restart without persistence) is loaded again by the next call, which then runs."""
        lib = "probe_" + self.namespace.split(":")[1]
        library = f"#!lua name={lib}\nredis.register_function('{lib}_f', function(KEYS, ARGV) return ARGV[1] end)\n"
        script = Script("probe", "return 'eval'", hashlib.sha1(b"return 'eval'").hexdigest(), f"{lib}_f", library)
        link = RedisLink(parse_redis_url(self.redis_url), [script])
        self.addCleanup(link.close)
        self.addCleanup(lambda: self.admin.execute("FUNCTION", "DELETE", lib).addErrback(lambda _: None))
        assert (yield link.run(script, ["fcall"])) == "fcall"
        assert (yield self.admin.execute("FUNCTION", "DELETE", lib)) == "OK"
        assert (yield link.run(script, ["again"])) == "again"
        assert len((yield self.admin.execute("FUNCTION", "LIST", "LIBRARYNAME", lib))) == 1

    def test_bad_urls(self) -> None:
        """A URL that is not redis:// is refused without showing its password."""
        for url in ("http://x:6379/0", "redis://:pw@host:notaport/0"):
            with self.assertRaises(ValueError) as caught:
                parse_redis_url(url)
            assert "pw" not in str(caught.exception)
