"""The partitioned Redis pool on a real 3-master Redis Cluster: its key layout, its partitions, a master killed."""

from __future__ import annotations

import functools
import uuid
from typing import Any, Callable, Generator

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import TestCase

from spiderd.core.urls import registered_domain
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool.redis import RedisPoolError, open_redis_pool
from spiderd.frontier.pool.redis.cluster import SLOTS, key_slot
from spiderd.frontier.pool.redis.partitions import partition_of, partition_tags, stride_order

from . import test_pool_redis as single  # (a module, so pytest does not collect its classes here again)
from .clusterkeys import ClusterCase, settle

Gen = Generator[Any, Any, None]
CREATED = [(0, 5460), (5461, 10922), (10923, 16383)]  # what redis-cli --cluster create gives three masters


def test_partition_tags_spread_evenly_over_the_slots() -> None:
    """Each tag's slot lies at the middle of its 1/P of the slots: 4 of 12 partitions on each of 3 masters, 2 of 12
    on each of 6."""
    tags = partition_tags(12)
    slots = [key_slot("{%s}" % tag) for tag in tags]
    assert all(abs(slot - (2 * p + 1) * SLOTS // 24) <= 4 for p, slot in enumerate(slots))
    assert [sum(lo <= s <= hi for s in slots) for lo, hi in CREATED] == [4, 4, 4]
    sixths = [(i * SLOTS // 6, (i + 1) * SLOTS // 6 - 1) for i in range(6)]
    assert [sum(lo <= s <= hi for s in slots) for lo, hi in sixths] == [2] * 6
    order = stride_order(12)
    assert sorted(order) == list(range(12))
    assert all(slots[a] // 5461 != slots[b] // 5461 for a, b in zip(order, order[1:]))  # next in turn: another master
    assert partition_tags(12) == tags  # the same on every node


def test_domains_spread_over_partitions() -> None:
    """A thousand registered domains fall into 12 partitions within 30% of the mean each."""
    counts = [0] * 12
    for i in range(1000):
        counts[partition_of(f"shop{i}.example.com", 12)] += 1
    assert max(counts) < 1000 / 12 * 1.3 and min(counts) > 1000 / 12 * 0.7, counts


class ClusterPoolTests(ClusterCase, TestCase):
    """The partitioned pool on the cluster of this class; each test has a key space of its own."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.namespace = f"t{uuid.uuid4().hex[:12]}:"
        self.pools: list[Any] = []
        self.addCleanup(self._close)

    @defer.inlineCallbacks
    def _close(self) -> Gen:
        for pool in self.pools:
            yield pool.close()

    @defer.inlineCallbacks
    def open(self, **options: Any) -> Generator[Any, Any, Any]:
        options.setdefault("politeness", Politeness(0.0, 100))
        pool = yield open_redis_pool(self.cluster.url, self.clock, prefix=self.namespace + "spiderd:",
                                     namespace=self.namespace, pending_threshold=3600, **options)
        self.pools.append(pool)
        return pool

    def keys(self) -> dict[int, list[str]]:
        """Every key of this test, per master."""
        return {i: self.cluster.cli(port, "--scan", "--pattern", self.namespace + "*").split()
                for i, port in enumerate(self.cluster.ports)}

    @defer.inlineCallbacks
    def test_every_key_of_a_partition_is_in_its_slot(self) -> Gen:
        """After adds, pops and statuses over 60 domains, every key lies in the slot of a partition's tag, a domain's
        queues and its seen entries in its own partition's, and every master holds four partitions."""
        pool = yield self.open()
        urls = [f"http://www.shop{i % 60}.com/item/{i}" for i in range(600)]
        assert (yield pool.addmany(urls)) == 600
        popped = yield pool.pop(200)
        yield pool.set_statuses([(url, 200) for url in popped])
        assert (yield pool.size()) == 600 - len(popped) and len(popped) == 200
        tags = partition_tags(12)
        tag_slots = {key_slot("{%s}" % tag): p for p, tag in enumerate(tags)}
        held: dict[int, set[int]] = {}
        for master, keys in self.keys().items():
            assert keys
            for key in keys:
                if key == f"{self.namespace}spiderd:{{partitions}}":  # the partition count, outside any script
                    continue
                assert key_slot(key) in tag_slots, key
                held.setdefault(master, set()).add(tag_slots[key_slot(key)])
            for key in keys:
                if key.endswith(".higher"):
                    domain = key[len(self.namespace):].split(":", 1)[1][: -len(".higher")]
                    assert tag_slots[key_slot(key)] == partition_of(domain, 12), key
        assert sorted(len(parts) for parts in held.values()) == [4, 4, 4]

    @defer.inlineCallbacks
    def test_known_skips_counted_once_over_partitions(self) -> Gen:
        """The partitions share one known-URL memory: stats give its skips once, not once a partition."""
        pool = yield self.open()
        urls = [f"http://www.shop{i}.com/item" for i in range(40)]  # over most of the 12 partitions
        assert (yield pool.addmany(urls)) == 40
        assert (yield pool.addmany(urls)) == 0
        assert (yield pool.stats())["known_skipped"] == 40

    @defer.inlineCallbacks
    def test_every_partition_keeps_its_small_keys_out_of_listpacks(self) -> Gen:
        """Each partition's P inflight and P lease are hash tables and its P leases, ready, waiting and next are
        skiplists from the node's start, as on one Redis."""
        yield self.open()
        names = {"inflight": "hashtable", "lease": "hashtable", "leases": "skiplist", "ready": "skiplist",
                 "waiting": "skiplist", "next": "skiplist"}
        small = [(master, key) for master, keys in self.keys().items() for key in keys
                 if key.rsplit(":", 1)[-1] in names]
        assert len(small) == 12 * len(names)
        for master, key in small:
            encoding = self.cluster.cli(self.cluster.ports[master], "OBJECT", "ENCODING", key).strip()
            assert encoding == names[key.rsplit(":", 1)[-1]], key

    @defer.inlineCallbacks
    def test_another_partition_count_is_refused(self) -> Gen:
        """A node configured with other partitions than the pool has is refused with the count to set."""
        yield self.open()
        failed = self.open(redis_partitions=6)
        self.assertFailure(failed, RedisPoolError)
        error = yield failed
        assert "has 12 partitions" in str(error) and "redis_partitions = 12" in str(error)

    @defer.inlineCallbacks
    def test_host_groups_are_recorded_in_the_host_partition(self) -> Gen:
        """set_host_group keeps a host's address in P group of its registered domain's partition (where that
        domain's pops run), none elsewhere; a host told its own name leaves it."""
        pool = yield self.open()
        hosts = [f"www.shop{i}.com" for i in range(24)] + ["b.example:8080"]
        for host in hosts:
            yield pool.set_host_group(host, "192.0.2.1")
        yield pool.set_host_group("www.shop0.com", "www.shop0.com")
        tags = partition_tags(12)
        recorded: dict[str, int] = {}
        for p, tag in enumerate(tags):
            key = f"{self.namespace}spiderd:{{{tag}}}:group"
            master = self.cluster.master_of(key_slot(key))
            answer = self.cluster.cli(self.cluster.ports[master], "HKEYS", key).split()
            recorded.update((host, p) for host in answer)
        assert recorded == {host: partition_of(registered_domain(host), 12) for host in hosts[1:]}
        assert len(set(recorded.values())) > 1  # the hosts' partitions differ: it is routed, not all in one

    def crash_after_first(self, pool: Any, method: str) -> list[defer.Deferred[Any]]:
        """Each partition's ``method`` goes out for the first call only, over all partitions; later calls never
        go out (the node died after its first script call).  The first call's Deferred is in the list returned."""
        sent: list[defer.Deferred[Any]] = []

        def once(real: Any, *args: Any, **kwargs: Any) -> defer.Deferred[Any]:
            if sent:
                return defer.Deferred()
            sent.append(real(*args, **kwargs))
            return sent[0]

        for part in pool.parts:
            self.patch(part, method, functools.partial(once, getattr(part, method)))
        return sent

    def domain_in(self, wanted: Callable[[int], bool]) -> str:
        """A host (www.shopN.com) whose registered domain's partition is ``wanted``."""
        return next(f"www.shop{i}.com" for i in range(1000) if wanted(partition_of(f"shop{i}.com", 12)))

    @defer.inlineCallbacks
    def test_an_items_checkpoint_goes_with_the_statuses_it_commits(self) -> Gen:
        """An items commit whose statuses lie in one partition other than 0 (one domain), its node dying after its
        first script call: another node reads the checkpoint of that commit and its URLs done, or neither (exactly
        once; not the new checkpoint with the URLs not done, whose items would be written twice)."""
        pool = yield self.open()
        urls = [f"http://{self.domain_in(lambda p: p != 0)}/item/{i}" for i in range(3)]
        assert (yield pool.addmany(urls)) == 3
        assert sorted((yield pool.pop(10))) == urls
        yield pool.set_statuses((), checkpoint=("items:f", 0))  # the file opened
        sent = self.crash_after_first(pool, "set_statuses")
        pool.set_statuses([(url, 200) for url in urls], checkpoint=("items:f", 120))
        yield sent[0]
        other = yield self.open()
        committed = yield other.checkpoint("items:f")
        done = (yield other.stats())["done"]
        assert (committed, done) in [(0, 0), (120, 3)], (committed, done)

    @defer.inlineCallbacks
    def test_a_checkpoint_is_the_latest_of_the_partitions_and_dropped_latest_last(self) -> Gen:
        """A checkpoint recorded in two partitions (a commit of one domain's statuses, then one of two partitions'):
        checkpoint() reads the latest; a drop that dies after its first call leaves the latest, not an older count
        (which would cut committed items); a whole drop leaves none."""
        pool = yield self.open()
        other = self.domain_in(lambda p: p != 0)
        urls = [f"http://{other}/a", f"http://{other}/b", f"http://{self.domain_in(lambda p: p == 0)}/c"]
        assert (yield pool.addmany(urls)) == 3
        assert sorted((yield pool.pop(10))) == sorted(urls)
        yield pool.set_statuses([(urls[0], 200)], checkpoint=("items:g", 50))
        yield pool.set_statuses([(urls[1], 200), (urls[2], 200)], checkpoint=("items:g", 80))
        assert (yield pool.checkpoint("items:g")) == 80
        sent = self.crash_after_first(pool, "drop_checkpoint")
        pool.drop_checkpoint("items:g")
        yield settle(lambda: bool(sent), "the first drop")  # (after the reads of each partition's count)
        yield sent[0]
        reader = yield self.open()
        assert (yield reader.checkpoint("items:g")) == 80
        yield reader.drop_checkpoint("items:g")
        assert (yield reader.checkpoint("items:g")) is None

    @defer.inlineCallbacks
    def test_a_master_killed_during_a_crawl_loses_nothing(self) -> Gen:
        """A master killed halfway through a crawl of 40 domains and started again (same port, same AOF): pops go
        on from the other partitions, statuses for its partitions wait and go out once it is back, one warning names
        it; in the end every URL was handed out exactly once and is done."""
        pool = yield self.open()
        urls = [f"http://www.shop{i % 40}.com/item/{i}" for i in range(800)]
        assert (yield pool.addmany(urls)) == 800
        handed: list[str] = []
        acks: list[defer.Deferred[None]] = []

        @defer.inlineCallbacks
        def crawl(pops: int) -> Gen:
            for _ in range(pops):
                got = yield pool.pop(40)
                handed.extend(got)
                acks.append(pool.set_statuses([(url, 200) for url in got]))

        yield crawl(5)
        yield defer.gatherResults(acks)
        popped = yield pool.pop(200)
        handed.extend(popped)
        tags = partition_tags(12)
        master = {url: self.cluster.master_of(key_slot("{%s}" % tags[partition_of(registered_domain(
            url.split("/")[2]), 12)])) for url in urls}
        assert len({master[url] for url in popped}) >= 2  # the pop took from several masters
        victim = master[next(iter(popped))]
        with capturedLogs() as events:
            self.cluster.kill(victim)
            acks.append(pool.set_statuses([(url, 200) for url in popped]))
            yield crawl(10)  # the other partitions go on; statuses for the victim's wait
            yield settle(lambda: bool(self.clock.getDelayedCalls()), "statuses waiting for the killed master")
            assert not all(d.called for d in acks)
            self.cluster.restart(victim)
            while not all(d.called for d in acks):
                self.clock.advance(5)
                yield settle(lambda: all(d.called for d in acks) or bool(self.clock.getDelayedCalls()),
                             "the waiting statuses")
            yield defer.gatherResults(acks)
            while (yield pool.size()):
                yield crawl(1)
                yield defer.gatherResults(acks)
        warnings = [formatEvent(e) for e in events if "Redis Cluster: master" in formatEvent(e)]
        assert len(warnings) == 1 and f"127.0.0.1:{self.cluster.ports[victim]}" in warnings[0], warnings
        assert sorted(handed) == sorted(urls)  # each once: none twice, none lost
        stats = yield pool.stats()
        assert (stats["waiting"], stats["pending"], stats["done"]) == (0, 0, 800)



def _single_redis_only(test: Any) -> Any:
    """A TwoNodeTests test that reads the keys of the one Redis (layout, encodings, the commands sent) rather than
    what two nodes see: not run on the cluster, whose partitions' keys are spread over the masters."""
    def skipped(self: Any) -> None:
        pytest.skip("reads the single Redis's own keys or commands; the cluster's layout is tested by "
                    "ClusterPoolTests")

    skipped.__doc__ = test.__doc__  # a new function: marking ``test`` itself would skip it on the single Redis too
    return skipped


class TwoNodeClusterTests(ClusterCase, single.TwoNodeTests):
    """Two nodes sharing one Redis Cluster: what holds across nodes on one Redis (leases, delays, concurrency, a
    throttling answer's host block, validators for conditional GET) holds on the partitioned pool too."""

    def open_redis(self, clock: Clock, politeness: Politeness, options: dict[str, Any]) -> defer.Deferred[Any]:
        return open_redis_pool(self.cluster.url, clock, prefix=self.prefix, namespace=self.namespace,
                               politeness=politeness, **options)

    test_bucket_bits_fixed_by_the_first_node = _single_redis_only(single.TwoNodeTests.test_bucket_bits_fixed_by_the_first_node)
    test_hop_counts_dropped_at_the_final_status = _single_redis_only(
        single.TwoNodeTests.test_hop_counts_dropped_at_the_final_status)
    test_seed_002_keys_where_tools_expect_them = _single_redis_only(
        single.TwoNodeTests.test_seed_002_keys_where_tools_expect_them)
    test_seen_buckets_stay_intsets = _single_redis_only(single.TwoNodeTests.test_seen_buckets_stay_intsets)
    test_small_keys_keep_constant_time_encodings = _single_redis_only(
        single.TwoNodeTests.test_small_keys_keep_constant_time_encodings)
    test_small_keys_keep_their_encodings_after_the_data_is_lost = _single_redis_only(
        single.TwoNodeTests.test_small_keys_keep_their_encodings_after_the_data_is_lost)
    test_startup_deletes_nothing = _single_redis_only(single.TwoNodeTests.test_startup_deletes_nothing)
    test_statuses_go_out_together_and_in_order = _single_redis_only(
        single.TwoNodeTests.test_statuses_go_out_together_and_in_order)
    test_fetched_goes_out_with_the_statuses = _single_redis_only(single.TwoNodeTests.test_fetched_goes_out_with_the_statuses)
    test_statuses_wait_for_the_next_pop_or_status_wait = _single_redis_only(
        single.TwoNodeTests.test_statuses_wait_for_the_next_pop_or_status_wait)
    test_waiting_statuses_go_out_at_a_thousand = _single_redis_only(
        single.TwoNodeTests.test_waiting_statuses_go_out_at_a_thousand)
    test_fetched_left_out_when_its_status_waits_with_it = _single_redis_only(
        single.TwoNodeTests.test_fetched_left_out_when_its_status_waits_with_it)

    @defer.inlineCallbacks
    def test_throttle_block_holds_across_nodes(self) -> Gen:
        """A host one node's throttling answer (Retry-After) blocks is handed out by no node before then, whatever
        partition a pop asks first."""
        a = yield self.node(concurrency=4, failure_threshold=0, max_throttles=1, pending_threshold=600.0)
        b = yield self.node(concurrency=4, failure_threshold=0, max_throttles=1, pending_threshold=600.0)
        yield a.addmany(["http://a.example.com/1", "http://a.example.com/2", "http://b.example.net/1"])
        assert len((yield a.pop(10))) == 3
        yield a.throttle("http://a.example.com/1", self.clock.seconds() + 120, 429, "throttled: http 429, retry after 120 s")
        yield a.set_status("http://a.example.com/2", 200)
        yield a.add("http://a.example.com/3")
        assert (yield b.pop(10)) == {}
        self.clock.advance(119)
        assert (yield b.pop(10)) == {} and (yield a.pop(10)) == {}
        assert 0 < (yield b.next_due()) <= 1.0
        self.clock.advance(1)
        assert set((yield b.pop(10))) == {"http://a.example.com/1", "http://a.example.com/3"}

    def test_validators_hold_across_nodes(self) -> Any:
        """The validators one node's done fetches kept (a hub's, a recrawled page's) come back with another node's
        pop; that node's 304 updates them for all (the partitioned pool has no one link to spy on)."""
        return self.validators_hold_across_nodes(spy=False)
