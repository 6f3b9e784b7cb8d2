"""The partitioned pool on a real Redis Cluster of three masters with a replica each, through failovers: a
``CLUSTER FAILOVER`` and a master killed (its replica promoted by the cluster), during a crawl of three nodes,
with ``redis_durability = "replica"`` and (on a Redis 7.2 or later) ``"aof"``; and ``[pool] redis_durability`` on a
Redis with no replica."""

from __future__ import annotations

import subprocess
import time
import unittest
import uuid
from collections import defaultdict
from typing import Any, Generator

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import TestCase

from spiderd.core.urls import registered_domain
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool.redis import RedisPoolError, open_redis_pool
from spiderd.frontier.pool.redis.cluster import key_slot
from spiderd.frontier.pool.redis.partitions import partition_of, partition_tags

from .clusterkeys import ClusterCase, settle
from .rediscluster import waitaof_server
from .test_pool_contract import RedisKeys

Gen = Generator[Any, Any, None]
LEASE = 3600.0  # pending_threshold: no lease ends unless the test moves the clock past it
JUNK_MB = 48  # written to a master whose replica is stopped: the replication stream stays behind it
FAILOVER_TIMEOUT = 60.0  # a bounded poll for the cluster's own failover (cluster-node-timeout 2 s + an election)


class Crawl:
    """Three nodes (pools on the same cluster) popping and acknowledging statuses; what each was handed and when
    (the clock's), and which statuses were acknowledged (an item written once a status is: every item once)."""

    def __init__(self, nodes: list[Any], clock: Clock) -> None:
        self.nodes = nodes
        self.clock = clock
        self.handed: dict[str, list[float]] = defaultdict(list)
        self.acked: list[str] = []
        self.acked_at: dict[str, float] = {}
        self.calls: list[defer.Deferred[Any]] = []

    @defer.inlineCallbacks
    def round(self, node: Any, count: int = 20) -> Generator[Any, Any, int]:
        got = yield node.pop(count)
        now = self.clock.seconds()
        for url in got:
            self.handed[url].append(now)
        yield node.set_statuses([(url, 200) for url in got])
        for url in got:
            self.acked.append(url)
            self.acked_at.setdefault(url, self.clock.seconds())
        return len(got)

    def start(self, rounds: int) -> None:
        """``rounds`` rounds on every node, not waited for (see :meth:`finish`)."""
        for node in self.nodes:
            d: defer.Deferred[Any] = defer.succeed(None)
            for _ in range(rounds):
                d.addCallback(lambda _, n=node: self.round(n))
            self.calls.append(d)

    @defer.inlineCallbacks
    def drive(self, calls: list[defer.Deferred[Any]]) -> Generator[Any, Any, list[Any]]:
        """The results of ``calls``, the clock moving on meanwhile so that calls waiting on the backoff are tried
        again (a Deferred's ``called`` is no end: one waiting for another is called already)."""
        results = defer.gatherResults(calls, consumeErrors=True)
        ended: list[Any] = []
        results.addBoth(lambda result: ended.append(result) or result)
        while not ended:
            self.clock.advance(5)
            yield settle(lambda: bool(ended or self.clock.getDelayedCalls()), "the calls under way")
        return (yield results)

    @defer.inlineCallbacks
    def finish(self) -> Gen:
        """Every round started ends."""
        calls, self.calls = self.calls, []
        yield self.drive(calls)

    @defer.inlineCallbacks
    def to_the_end(self, total: int) -> Gen:
        """Crawl until every URL is done; leases of pops whose answer was lost end (the clock passes them)."""
        while True:
            yield self.finish()
            stats = (yield self.drive([self.nodes[0].stats()]))[0]
            if stats["done"] >= total and not stats["waiting"] and not stats["pending"]:
                return
            if not stats["waiting"]:
                self.clock.advance(LEASE + 1)  # held by a pop nobody got the answer of
            self.start(1)

    def check(self, urls: list[str]) -> None:
        """No URL handed out twice while its lease held, none after its status was acknowledged, none lost, each
        acknowledged once."""
        twice = {url: times for url, times in self.handed.items()
                 if any(b < a + LEASE for a, b in zip(times, times[1:]))}
        assert not twice, f"handed out twice while leased: {sorted(twice)[:5]} ({len(twice)})"
        redone = [url for url, at in self.acked_at.items() if any(t > at for t in self.handed[url])]
        assert not redone, f"handed out again after an acknowledged status: {sorted(redone)[:5]} ({len(redone)})"
        assert sorted(self.acked) == sorted(urls), (len(self.acked), len(set(self.acked)), len(urls))


class FailoverTests(ClusterCase, TestCase):
    """Three nodes crawl 600 URLs of 60 domains on a cluster of three masters, each with a replica."""

    replicas = 1
    durability = "replica"

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
    def open(self) -> Generator[Any, Any, Any]:
        pool = yield open_redis_pool(self.cluster.url, self.clock, prefix=self.namespace + "spiderd:",
                                     namespace=self.namespace, pending_threshold=LEASE,
                                     politeness=Politeness(0.0, 100), durability=self.durability)
        self.pools.append(pool)
        return pool

    @defer.inlineCallbacks
    def crawl(self) -> Generator[Any, Any, Any]:
        nodes = []
        for _ in range(3):
            nodes.append((yield self.open()))
        urls = [f"http://www.shop{i % 60}.com/item/{i}" for i in range(600)]
        assert (yield nodes[0].addmany(urls)) == 600
        crawl = Crawl(nodes, self.clock)
        crawl.start(2)
        yield crawl.finish()
        return crawl, urls

    def victim(self, urls: list[str], crawl: Crawl) -> int:
        """The master of the partition holding most URLs not handed out yet."""
        tags = partition_tags(12)
        left: dict[int, int] = defaultdict(int)
        for url in urls:
            if url not in crawl.handed:
                left[partition_of(registered_domain(url.split("/")[2]), 12)] += 1
        partition = max(left, key=left.__getitem__)
        return self.cluster.master_of(key_slot("{%s}" % tags[partition]))

    def fcalls(self, i: int, command: str = "fcall") -> int:
        """Calls of ``command`` (script calls by default) node ``i`` has run (INFO commandstats)."""
        for line in self.cluster.cli(self.cluster.ports[i], "INFO", "commandstats").splitlines():
            if line.startswith(f"cmdstat_{command}:"):
                return int(line.split("calls=")[1].split(",")[0])
        return 0

    def asked(self, i: int, before: int) -> bool:
        """Whether a node has asked master ``i`` for an acknowledgement of its writes since ``before`` calls of
        WAIT (WAITAOF): one blocked (its replica paused) or answered; always with "none", which never asks."""
        command = "waitaof" if self.durability == "aof" else "wait"
        blocked = "blocked_clients:0" not in self.cluster.cli(self.cluster.ports[i], "INFO", "clients")
        return self.durability == "none" or blocked or self.fcalls(i, command) > before

    def junk_on(self, i: int) -> None:
        """Write JUNK_MB megabytes to a key of master ``i`` (blocking: redis-cli)."""
        n = 0
        while self.cluster.master_of(key_slot(f"{self.namespace}junk{n}")) != i:
            n += 1
        done = subprocess.run(["redis-cli", "-p", str(self.cluster.ports[i]), "-x", "SET", f"{self.namespace}junk{n}"],
                              input=b"x" * (JUNK_MB << 20), capture_output=True, timeout=60)
        assert done.stdout.strip() == b"OK", done

    def warnings(self, events: list[dict[str, Any]], port: int) -> list[str]:
        return [formatEvent(e) for e in events
                if e.get("log_level") is not None and e["log_level"].name == "warn"
                and f"127.0.0.1:{port}" in formatEvent(e) and "Redis Cluster: master" in formatEvent(e)]

    @defer.inlineCallbacks
    def test_cluster_failover_on_a_replica_loses_nothing(self) -> Gen:
        """CLUSTER FAILOVER on a master's replica while three nodes pop and acknowledge statuses: commands follow
        MOVED to the promoted replica; no URL is handed out twice, none is lost, every status acknowledged stays."""
        crawl, urls = yield self.crawl()
        master = self.victim(urls, crawl)
        replica = self.cluster.replica_of(master)
        crawl.start(3)
        self.cluster.failover(replica)
        yield settle(lambda: self.cluster.promoted(replica), "the replica promoted")
        yield crawl.to_the_end(len(urls))
        crawl.check(urls)
        slot = key_slot("{%s}" % partition_tags(12)[0])
        assert self.cluster.master_of(slot) != master or crawl.nodes[0]._cluster.master(slot).port == \
            self.cluster.ports[master]
        served = {self.cluster.ports[self.cluster.master_of(key_slot("{%s}" % tag))] for tag in partition_tags(12)}
        assert {node._cluster.master(key_slot("{%s}" % tag)).port for node in crawl.nodes
                for tag in partition_tags(12)} == served  # the promoted replica's slots are sent to it
        stats = (yield crawl.drive([crawl.nodes[1].stats()]))[0]
        assert (stats["waiting"], stats["pending"], stats["done"]) == (0, 0, 600)

    @defer.inlineCallbacks
    def test_a_master_killed_with_writes_its_replica_lacks_loses_nothing(self) -> Gen:
        """A master killed (kill -9) while its replica lags (stopped, the stream held behind a large write) and
        three nodes pop and give statuses there: its replica, promoted by the cluster, lacks the last writes; the
        nodes had none of them acknowledged (redis_durability = "replica"), so they send them again or never got
        them: no URL handed out twice while leased, none lost, every status acknowledged stays; one warning per
        node names the master, then the replica serving its slots."""
        crawl, urls = yield self.crawl()
        master = self.victim(urls, crawl)
        replica = self.cluster.replica_of(master)
        with capturedLogs() as events:
            self.cluster.pause(replica)
            try:
                self.junk_on(master)
                before = self.fcalls(master)
                waits = self.fcalls(master, "waitaof" if self.durability == "aof" else "wait")
                crawl.start(3)
                yield settle(lambda: self.fcalls(master) >= before + 3, "writes on the master")
                yield settle(lambda: self.asked(master, waits), "a node asking for its writes' acknowledgement")
                killed = time.monotonic()
                self.cluster.kill(master)
            finally:
                self.cluster.resume(replica)
            yield settle(lambda: self.cluster.promoted(replica), "the replica promoted", FAILOVER_TIMEOUT)
            promoted = time.monotonic() - killed
            yield crawl.to_the_end(len(urls))
        crawl.check(urls)
        text = [formatEvent(e) for e in events]
        warned = self.warnings(events, self.cluster.ports[master])
        assert 1 <= len(warned) <= 3, text
        took_over = [line for line in text if "are served by" in line and f"{self.cluster.ports[master]}" in line]
        assert took_over and all(f"127.0.0.1:{self.cluster.ports[replica]}" in line for line in took_over), text
        stats = (yield crawl.drive([crawl.nodes[2].stats()]))[0]
        assert (stats["waiting"], stats["pending"], stats["done"]) == (0, 0, 600), (stats, promoted)


WAITAOF, NO_WAITAOF = waitaof_server()


@unittest.skipIf(WAITAOF is None, NO_WAITAOF)
class AofFailoverTests(FailoverTests):
    """The same failovers with ``redis_durability = "aof"`` (``WAITAOF 1 1``: a write is acknowledged once its
    master's AOF and a replica's have it), on a redis-server 7.2 or later ($SPIDERD_REDIS_SERVER_72 or PATH)."""

    durability = "aof"
    server = WAITAOF or "redis-server"


class DurabilityAloneTests(RedisKeys, TestCase):
    """``redis_durability`` on the machine's Redis, which has no replica."""

    @defer.inlineCallbacks
    def test_a_master_without_replica_acknowledges_alone_with_one_warning(self) -> Gen:
        """With "replica" and no replica connected, writes are acknowledged by the master alone (ROLE), not held
        for WAIT's timeout, and one warning says so."""
        clock = Clock()
        with capturedLogs() as events:
            pool = yield open_redis_pool(self.redis_url, clock, prefix=self.prefix, namespace=self.namespace,
                                         durability="replica")
            self.addCleanup(pool.close)
            assert (yield pool.addmany([f"http://a{i}.example/" for i in range(5)])) == 5
            got = yield pool.pop(5)
            yield pool.set_statuses([(url, 200) for url in got])
            assert (yield pool.stats())["done"] == 5
        warned = [formatEvent(e) for e in events if "has no replica connected" in formatEvent(e)]
        assert len(warned) == 1, [formatEvent(e) for e in events]

    @defer.inlineCallbacks
    def test_aof_needs_waitaof_and_the_aof(self) -> Gen:
        """"aof" on a Redis without WAITAOF (before 7.2) or without appendonly is refused when the pool opens,
        with what it needs."""
        appendonly = yield self.admin.execute("CONFIG", "GET", "appendonly")
        info = yield self.admin.execute("INFO", "server")
        version = tuple(int(n) for n in info.split("redis_version:")[1].split()[0].split(".")[:2])
        if version >= (7, 2) and appendonly[1] == "yes":
            self.skipTest("this Redis has WAITAOF and its AOF on")
        opened = open_redis_pool(self.redis_url, Clock(), prefix=self.prefix, namespace=self.namespace,
                                 durability="aof")
        self.assertFailure(opened, RedisPoolError)
        error = yield opened
        assert "WAITAOF (Redis 7.2 or later) and appendonly yes" in str(error), str(error)

    def test_an_unknown_durability_is_refused(self) -> None:
        """A durability other than none, replica and aof is an error naming the three."""
        failed = open_redis_pool(self.redis_url, Clock(), prefix=self.prefix, durability="sync")
        assert "none, replica, aof" in str(self.failureResultOf(failed, ValueError).value)
