"""A bounded number of domains take turns on the Redis pool ([pool] max_active_hosts, as the embedded pools' hosts
in test_politeness_turns): a domain not in turn waits on the bench (``P bench``) until a pop finds no domain in
turn that may go, then enters while fewer than the limit are in turn (``P turns``)."""

from __future__ import annotations

import uuid
from typing import Any, Generator

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial.unittest import TestCase

from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool.redis import open_redis_pool
from spiderd.frontier.pool.redis.partitioned import turn_share
from spiderd.frontier.pool.redis.partitions import partition_of

from .clusterkeys import ClusterCase
from .test_pool_contract import RedisKeys

Gen = Generator[Any, Any, None]


def domains_of(urls: Any) -> set[str]:
    return {url.split("/")[2] for url in urls}


class TurnsCase:
    """Nodes on one key space (``open_node``), closed at the end; an injected clock that never moves by itself."""

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.nodes: list[Any] = []
        self.addCleanup(self._close_all)  # type: ignore[attr-defined]

    def open_node(self, politeness: Politeness, options: dict[str, Any]) -> defer.Deferred[Any]:
        raise NotImplementedError

    @defer.inlineCallbacks
    def node(self, limit: int, concurrency: int = 2) -> Generator[Any, Any, Any]:
        pool = yield self.open_node(Politeness(concurrency=concurrency),
                                    {"max_active_hosts": limit, "pending_threshold": 60.0})
        self.nodes.append(pool)
        return pool

    @defer.inlineCallbacks
    def _close_all(self) -> Gen:
        for pool in self.nodes:
            yield pool.close()


class RedisTurnsTests(RedisKeys, TurnsCase, TestCase):
    """On one Redis."""

    def open_node(self, politeness: Politeness, options: dict[str, Any]) -> defer.Deferred[Any]:
        return self.open_redis(self.clock, politeness, options)

    @defer.inlineCallbacks
    def test_the_third_domain_waits_until_one_in_turn_runs_out(self) -> Gen:
        """With room for two, the third domain's URLs are not handed out while the two in turn have work (their
        slots full or not), and are at once when one of them has nothing waiting and nothing to come."""
        pool = yield self.node(2)
        yield pool.addmany([f"http://{d}.example/{i}" for d in "abc" for i in range(3)])  # 2 slots a host
        first = yield pool.pop(10)
        assert domains_of(first) == {"a.example", "b.example"}, first
        assert (yield pool.stats())["hosts_in_turn"] == 2
        for url in first:
            if url.startswith("http://a."):
                yield pool.set_status(url, 200)
        assert sorted((yield pool.pop(10))) == ["http://a.example/2"]  # b's slots are full, c waits
        assert (yield pool.pop(10)) == {}
        yield pool.set_status("http://a.example/2", 200)  # a has nothing waiting or to come: c takes its place
        assert (yield pool.next_due()) == 0.0  # the crawler is told to pop now
        assert sorted((yield pool.pop(10))) == ["http://c.example/0", "http://c.example/1"]
        assert (yield pool.stats())["hosts_in_turn"] == 2

    @defer.inlineCallbacks
    def test_benched_domains_enter_in_the_order_they_came(self) -> Gen:
        """Domains added later wait behind those benched before them, whatever their names."""
        pool = yield self.node(1, concurrency=1)
        for domain in ("z", "y", "x"):
            yield pool.add(f"http://{domain}.example/")
            self.clock.advance(1)
        order = []
        for _ in range(3):
            popped = list((yield pool.pop(10)))
            assert len(popped) == 1, popped
            order.append(popped[0])
            yield pool.set_status(popped[0], 200)
        assert order == ["http://z.example/", "http://y.example/", "http://x.example/"]

    @defer.inlineCallbacks
    def test_a_fetch_over_keeps_its_domain_in_turn_until_its_status(self) -> Gen:
        """A fetch's end (fetched) frees its host's slot but keeps the domain's turn until the status: the links
        added before it follow in the same turn; with no links the turn ends at the status."""
        pool = yield self.node(1)
        yield pool.addmany(["http://a.example/", "http://b.example/"])
        assert list((yield pool.pop(10))) == ["http://a.example/"]
        self.clock.advance(1)  # (a domain benched now would wait behind b)
        yield pool.fetched("http://a.example/", 0.1)
        assert (yield pool.pop(10)) == {}  # b still waits
        yield pool.addmany(["http://a.example/list"], parent="http://a.example/")
        yield pool.set_status("http://a.example/", 200)
        assert list((yield pool.pop(10))) == ["http://a.example/list"]
        yield pool.fetched("http://a.example/list", 0.1)
        assert (yield pool.pop(10)) == {}
        yield pool.set_status("http://a.example/list", 200)  # no links: a's turn ends
        assert list((yield pool.pop(10))) == ["http://b.example/"]

    @defer.inlineCallbacks
    def test_a_retried_url_keeps_its_domain_in_turn(self) -> Gen:
        """A URL queued again after a failed fetch keeps its domain's turn: it is not benched behind the others."""
        pool = yield self.node(1)
        yield pool.addmany(["http://a.example/", "http://b.example/"])
        assert list((yield pool.pop(10))) == ["http://a.example/"]
        self.clock.advance(1)  # (a domain benched now would wait behind b)
        yield pool.fetched("http://a.example/", 0.1)
        yield pool.set_status("http://a.example/", 500)
        assert list((yield pool.pop(10))) == ["http://a.example/"]
        yield pool.set_status("http://a.example/", 200)
        assert list((yield pool.pop(10))) == ["http://b.example/"]

    @defer.inlineCallbacks
    def test_an_expired_lease_keeps_its_domain_in_turn(self) -> Gen:
        """A URL whose lease ran out (its node died) goes back to its domain, which keeps its turn."""
        pool = yield self.node(1)
        yield pool.addmany(["http://a.example/", "http://b.example/"])
        assert list((yield pool.pop(10))) == ["http://a.example/"]
        self.clock.advance(61)
        assert list((yield pool.pop(10))) == ["http://a.example/"]

    @defer.inlineCallbacks
    def test_the_limit_holds_for_a_new_node_on_the_same_redis(self) -> Gen:
        """The turns are the pool's, not a node's: a node started later on the same keys hands out nothing of the
        benched domain while the two in turn have work, and its URLs once one of them is done."""
        first = yield self.node(2)
        yield first.addmany([f"http://{d}.example/" for d in "abc"])
        assert domains_of((yield first.pop(10))) == {"a.example", "b.example"}
        yield first.close()
        self.nodes.remove(first)
        second = yield self.node(2)
        assert (yield second.pop(10)) == {}
        assert (yield second.stats())["hosts_in_turn"] == 2
        yield second.set_status("http://a.example/", 200)
        assert list((yield second.pop(10))) == ["http://c.example/"]

    @defer.inlineCallbacks
    def test_zero_is_no_limit(self) -> Gen:
        """max_active_hosts = 0: every domain with waiting URLs takes turns at once; the limit is the last started
        node's (P meta), and the domains a limit benched are handed out once a node without one started."""
        pool = yield self.node(0)
        yield pool.addmany([f"http://{d}.example/" for d in "abc"])
        assert (yield pool.stats())["hosts_in_turn"] == 3  # (no limit: the hosts waiting, as the embedded pools')
        assert domains_of((yield pool.pop(10))) == {"a.example", "b.example", "c.example"}
        limited = yield self.node(1)
        yield limited.addmany([f"http://{d}.example/more" for d in "xyz"])
        assert domains_of((yield limited.pop(10))) == {"x.example"}
        unlimited = yield self.node(0)
        assert domains_of((yield unlimited.pop(10))) == {"y.example", "z.example"}


    @defer.inlineCallbacks
    def test_a_limit_set_later_benches_the_ready_domains(self) -> Gen:
        """Domains queued while turns were not limited go onto the bench at the next pop of a node with a limit,
        and take turns as benched ones do."""
        unlimited = yield self.node(0, concurrency=1)
        yield unlimited.addmany([f"http://{d}.example/{i}" for d in "abc" for i in range(2)])
        limited = yield self.node(1, concurrency=1)
        first = yield limited.pop(10)
        assert len(first) == 1, first
        assert (yield limited.stats())["hosts_in_turn"] == 1
        yield limited.set_status(next(iter(first)), 200)
        assert domains_of((yield limited.pop(10))) == domains_of(first)  # its second URL: the same turn


    @defer.inlineCallbacks
    def test_hosts_says_which_wait_for_a_turn(self) -> Gen:
        """hosts() marks the hosts whose domain waits for a place while every place is taken, as the embedded
        pools' do; with room (or no limit) none is marked."""
        pool = yield self.node(1)
        yield pool.addmany(["http://a.example/1", "http://a.example/2", "http://b.example/1"])
        yield pool.pop(1)
        rows = {row["host"]: row for row in (yield pool.hosts())}
        assert (rows["a.example"].get("waiting_for_turn"), rows["b.example"].get("waiting_for_turn")) == (None, True)
        unlimited = yield self.node(0)
        yield unlimited.addmany(["http://c.example/1"])
        assert not [row for row in (yield unlimited.hosts()) if "waiting_for_turn" in row]


class ClusterTurnsTests(ClusterCase, TurnsCase, TestCase):
    """On a Redis Cluster: each partition takes its share of the limit (at least one domain)."""

    def setUp(self) -> None:
        super().setUp()
        self.namespace = f"t{uuid.uuid4().hex[:12]}:"

    def open_node(self, politeness: Politeness, options: dict[str, Any]) -> defer.Deferred[Any]:
        return open_redis_pool(self.cluster.url, self.clock, prefix=self.namespace + "spiderd:",
                               namespace=self.namespace, politeness=politeness, **options)

    def test_share(self) -> None:
        """A partition's share: the limit divided by the partitions, at least 1; 0 stays 0 (no limit)."""
        assert (turn_share(10000, 12), turn_share(5, 12), turn_share(0, 12)) == (833, 1, 0)

    @defer.inlineCallbacks
    def test_each_partition_takes_its_share(self) -> Gen:
        """With 24 for 12 partitions, three domains of one partition take turns two at a time, while a domain of
        another partition goes at once."""
        names = (f"d{i}.example" for i in range(1000))
        same = [d for d in names if partition_of(d, 12) == 0][:3]
        other = next(d for d in (f"e{i}.example" for i in range(1000)) if partition_of(d, 12) == 1)
        pool = yield self.node(24, concurrency=1)
        yield pool.addmany([f"http://{d}/" for d in same + [other]])
        first = yield pool.pop(10)
        assert domains_of(first) == {*sorted(same)[:2], other}, first
        yield pool.set_status(f"http://{sorted(same)[0]}/", 200)
        assert list((yield pool.pop(10))) == [f"http://{sorted(same)[2]}/"]
