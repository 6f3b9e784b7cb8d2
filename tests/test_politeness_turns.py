"""A bounded number of hosts take turns ([pool] max_active_hosts): hosts wait on a bench in the order they came and
enter when a pop finds no host in turn ready, up to the limit (Heritrix's active queues, BUbiNG's workbench)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.trial.unittest import TestCase

from spiderd.engine.politeness import BENCHED, IN_TURN, Politeness
from spiderd.frontier.pool import open_leveldb_pool, open_memory_pool

from .workcount import growth

HOSTS = [f"h{i}.example" for i in range(5)]
STEPS = st.lists(st.tuples(st.sampled_from(["add", "ready", "release", "drop", "group", "collect", "tick",
                                            "forget", "settle"]),
                           st.integers(0, len(HOSTS) - 1), st.integers(0, 3)), max_size=80)


def waiting_hosts(politeness: Politeness) -> set[str]:
    return {h for h, s in politeness.hosts.items() if s.waiting > 0}


@settings(max_examples=300, deadline=None)
@given(STEPS, st.integers(1, 3))
def test_turns_agree_with_a_scan(steps: list[tuple[str, int, int]], limit: int) -> None:
    """After any steps: at most ``limit`` hosts are in turn, each with waiting URLs, a request in flight or a status
    to come; a host with waiting URLs is in turn or benched; no benched host is handed out; a pop that finds nothing
    leaves no host on the bench while there is room, and the crawler is told to pop while one could enter."""
    politeness = Politeness(delay=0.5, concurrency=2)
    politeness.limit_turns(limit)
    now = 0.0
    for op, n, arg in steps:
        host = HOSTS[n]
        if op == "forget":
            slot = politeness.hosts.get(host)
            if (slot is not None and not slot.waiting and not slot.own_inflight
                    and host not in politeness._tally.unsettled):
                politeness.forget(host)
            continue
        slot = politeness.slot(host)
        if op == "add":
            slot.waiting += arg + 1
            politeness.requeue(slot)
        elif op == "ready":
            ready = politeness.ready(now)
            if ready is not None:
                assert ready.turn == IN_TURN, f"{ready.host} handed out from the bench"
                politeness.taken(ready, 1, now)
            else:
                benched = [s for s in politeness.hosts.values() if s.turn == BENCHED and s.waiting > 0]
                assert not benched or politeness.hosts_in_turn() == limit, "nothing popped, with room to admit"
        elif op == "release" and slot.own_inflight:
            politeness.release(slot, unsettled=arg == 1)
        elif op == "settle" and politeness._tally.unsettled.get(host):
            politeness.settle(slot)
        elif op == "drop":
            slot.waiting = max(0, slot.waiting - arg)
        elif op == "group":
            politeness.set_group(host, f"10.0.0.{arg}" if arg else host)
        elif op == "tick":
            now += arg / 2
        elif op == "collect":
            politeness.collect(now)
        slots = politeness.hosts.values()
        in_turn = [s for s in slots if s.turn == IN_TURN]
        assert len(in_turn) == politeness.hosts_in_turn() <= limit
        assert all(s.waiting > 0 or s.own_inflight > 0 or s.host in politeness._tally.unsettled for s in in_turn)
        benched = [s for s in slots if s.turn == BENCHED]
        assert all(s.turn in (IN_TURN, BENCHED) for s in slots if s.waiting > 0)
        if [s for s in benched if s.waiting > 0] and len(in_turn) < limit:
            assert politeness.next_time() is not None  # the crawler is told to pop now


def test_benched_hosts_enter_in_the_order_they_came() -> None:
    """With room for two, the third and fourth hosts wait; each enters as a host in turn runs out of URLs."""
    politeness = Politeness()
    politeness.limit_turns(2)
    for host in ("a", "b", "c", "d"):
        slot = politeness.slot(host)
        slot.waiting = 1
        politeness.requeue(slot)
    order = []
    while (slot := politeness.ready(0.0)) is not None:
        order.append(slot.host)
        politeness.taken(slot, 1, 0.0)
        politeness.release(slot)
    assert order == ["a", "b", "c", "d"]


def test_a_host_that_comes_back_goes_behind_those_waiting() -> None:
    """A host whose turn ended and that gets new URLs waits behind the hosts benched before it."""
    politeness = Politeness()
    politeness.limit_turns(1)
    a, b = (politeness.slot(host) for host in ("a", "b"))
    for slot in (a, b):
        slot.waiting = 1
        politeness.requeue(slot)
    assert politeness.ready(0.0) is a
    politeness.taken(a, 1, 0.0)
    politeness.release(a)  # nothing left: its turn ends
    a.waiting = 1
    politeness.requeue(a)
    assert a.turn == BENCHED
    assert politeness.ready(0.0) is b


def test_hosts_enter_on_demand() -> None:
    """A benched host enters only when no host in turn may go: not while the one in turn has a free slot and no
    delay, but as soon as its concurrency or its delay holds it."""
    politeness = Politeness(concurrency=2)
    politeness.limit_turns(10)
    a, b = (politeness.slot(host) for host in ("a", "b"))
    for slot in (a, b):
        slot.waiting = 5
        politeness.requeue(slot)
    assert politeness.ready(0.0) is a
    politeness.taken(a, 1, 0.0)
    assert politeness.ready(0.0) is a
    politeness.taken(a, 1, 0.0)
    assert b.turn == BENCHED
    assert politeness.ready(0.0) is b  # a is at its concurrency
    delayed = Politeness(delay=1.0)
    delayed.limit_turns(10)
    c, d = (delayed.slot(host) for host in ("c", "d"))
    for slot in (c, d):
        slot.waiting = 5
        delayed.requeue(slot)
    assert delayed.ready(0.0) is c
    delayed.taken(c, 1, 0.0)
    delayed.release(c)
    assert delayed.ready(0.5) is d  # c's delay holds it
    assert delayed.hosts_in_turn() == 2


def test_a_host_benched_while_still_in_the_heap_gets_no_turn() -> None:
    """A host whose turn ended while its entry was in the heap, and that was benched when it got URLs again, is
    not handed out by that old entry."""
    politeness = Politeness()
    politeness.limit_turns(1)
    a, b = (politeness.slot(host) for host in ("a", "b"))
    a.waiting = 2
    politeness.requeue(a)
    assert politeness.next_time() == 0.0  # a may enter: the crawler is told to pop now
    assert politeness.ready(0.0) is a
    politeness.requeue(a)  # not taken (a pop passed it over): back in the heap
    b.waiting = 1
    politeness.requeue(b)  # benched
    a.waiting = 0  # its URLs went: its turn ends, its heap entry stays
    a.waiting = 1
    politeness.requeue(a)  # benched behind b
    assert (a.turn, b.turn) == (BENCHED, BENCHED)
    assert politeness.ready(0.0) is b
    politeness.taken(b, 1, 0.0)
    assert politeness.ready(0.0) is None  # b's request in flight keeps its turn
    politeness.release(b)
    assert politeness.ready(0.0) is a


def test_a_group_hands_out_only_its_hosts_in_turn() -> None:
    """Per-IP politeness: hosts of one address share a ring; a benched host of the ring gets no turn."""
    politeness = Politeness(concurrency=2)
    politeness.limit_turns(1)
    for host in ("a", "b"):
        politeness.set_group(host, "10.0.0.1")
        slot = politeness.slot(host)
        slot.waiting = 3
        politeness.requeue(slot)
    got = []
    while (slot := politeness.ready(0.0)) is not None:
        got.append(slot.host)
        politeness.taken(slot, 1, 0.0)
    assert got == ["a", "a"]  # the group's two slots
    politeness.release(politeness.hosts["a"])
    slot = politeness.ready(0.0)
    assert slot is not None and slot.host == "a"  # a still has a URL: b waits
    politeness.taken(slot, 1, 0.0)
    politeness.release(politeness.hosts["a"])
    assert politeness.ready(0.0) is None  # a has nothing waiting but a request in flight: it keeps its turn
    politeness.release(politeness.hosts["a"])
    slot = politeness.ready(0.0)
    assert slot is not None and slot.host == "b"


def test_benching_and_admitting_cost_the_same_at_100000_hosts() -> None:
    """Benching a host and letting one in cost no more with 100,000 hosts on the bench than with 1,000."""
    def bench(count: int) -> Any:
        politeness = Politeness(delay=1.0)
        politeness.limit_turns(10)
        for i in range(count):
            slot = politeness.slot(f"h{i}")
            slot.waiting = 1
            politeness.requeue(slot)
        serial = iter(range(10**9))

        def one_more(_: int) -> None:
            slot = politeness.slot(f"new{next(serial)}")
            slot.waiting = 1
            politeness.requeue(slot)  # benched
            taken = politeness.ready(float(next(serial)))  # a host in turn takes its last URL: one enters
            if taken is not None:
                politeness.taken(taken, 1, 0.0)
        return one_more

    small, big = growth(bench)
    assert big.flat_against(small), (small, big)


class PoolTurnsTests(TestCase):
    """The embedded pools hand out the URLs of at most max_active_hosts hosts until one of them runs out."""

    def make(self, backend: str, limit: int) -> Any:
        clock = Clock()
        politeness = Politeness(concurrency=2)
        if backend == "memory":
            return open_memory_pool(clock, max_active_hosts=limit, politeness=politeness), clock
        pool = open_leveldb_pool(self.mktemp(), clock, max_active_hosts=limit, politeness=politeness)
        self.addCleanup(pool.close)
        return pool, clock

    def check(self, backend: str) -> None:
        pool, _ = self.make(backend, 2)
        pool.addmany([f"http://{h}.example/{i}" for h in "abc" for i in range(3)])  # 2 slots a host
        first = self.successResultOf(pool.pop(10))
        self.assertEqual({url.split("/")[2] for url in first}, {"a.example", "b.example"})
        self.assertEqual(self.successResultOf(pool.stats())["hosts_in_turn"], 2)
        for url in first:
            if url.startswith("http://a."):
                pool.set_status(url, 200)
        more = self.successResultOf(pool.pop(10))
        self.assertEqual(sorted(more), ["http://a.example/2"])  # b's slots are full, c waits
        pool.set_status("http://a.example/2", 200)  # a has nothing waiting or in flight: c takes its place
        self.assertEqual(sorted(self.successResultOf(pool.pop(10))), ["http://c.example/0", "http://c.example/1"])

    def test_memory(self) -> None:
        self.check("memory")

    def test_leveldb(self) -> None:
        self.check("leveldb")

    def test_no_limit(self) -> None:
        pool, _ = self.make("leveldb", 0)
        pool.addmany([f"http://{h}.example/{i}" for h in "abc" for i in range(2)])
        got = self.successResultOf(pool.pop(10))
        self.assertEqual({url.split("/")[2] for url in got}, {"a.example", "b.example", "c.example"})

    def test_reopened_pool_keeps_the_limit(self) -> None:
        path = self.mktemp()
        clock = Clock()
        pool = open_leveldb_pool(path, clock, max_active_hosts=1)
        pool.addmany([f"http://{h}.example/{i}" for h in "abc" for i in range(2)])
        self.successResultOf(pool.close())
        pool = open_leveldb_pool(path, clock, max_active_hosts=1)
        self.addCleanup(pool.close)
        got = self.successResultOf(pool.pop(10))
        self.assertEqual(len(got), 1)  # one host in turn, one URL a host at a time (the other still waits)

    def test_a_fetch_over_keeps_its_host_in_turn_until_its_status(self) -> None:
        """The crawler frees a host's slot when a fetch ends and gives the status (with the page's links) later:
        the host keeps its turn until then, so its links follow in the same turn; with no links its turn ends
        at the status, and the next host enters."""
        for backend in ("memory", "leveldb"):
            pool, _ = self.make(backend, 1)
            pool.addmany(["http://a.example/", "http://b.example/"])
            self.assertEqual(list(self.successResultOf(pool.pop(10))), ["http://a.example/"])
            self.successResultOf(pool.fetched("http://a.example/", 0.1))
            self.assertEqual(self.successResultOf(pool.pop(10)), {})  # b still waits
            pool.addmany(["http://a.example/list"], parent="http://a.example/")
            pool.set_status("http://a.example/", 200)
            self.assertEqual(list(self.successResultOf(pool.pop(10))), ["http://a.example/list"])
            self.successResultOf(pool.fetched("http://a.example/list", 0.1))
            self.assertEqual(self.successResultOf(pool.pop(10)), {})
            pool.set_status("http://a.example/list", 200)  # no links: a's turn ends
            self.assertEqual(list(self.successResultOf(pool.pop(10))), ["http://b.example/"])

    def test_a_retried_url_keeps_its_host_in_turn(self) -> None:
        """A failed URL going back to its queue keeps its host's turn (it is not benched behind every host)."""
        pool, clock = self.make("leveldb", 1)
        pool.addmany(["http://a.example/", "http://b.example/"])
        self.successResultOf(pool.pop(10))
        self.successResultOf(pool.fetched("http://a.example/", 0.1))
        pool.set_status("http://a.example/", 500)
        clock.advance(3600)
        self.assertEqual(list(self.successResultOf(pool.pop(10))), ["http://a.example/"])

    def test_hosts_says_which_wait_for_a_turn(self) -> None:
        """hosts() marks the hosts waiting for a place; spiderctl hosts says so in its next-turn column."""
        from spiderd.ops.listings import _next_turn

        pool, _ = self.make("leveldb", 1)
        pool.addmany(["http://a.example/1", "http://a.example/2", "http://b.example/1"])
        self.successResultOf(pool.pop(1))
        rows = {row["host"]: row for row in self.successResultOf(pool.hosts())}
        self.assertEqual((rows["a.example"].get("waiting_for_turn"), rows["b.example"].get("waiting_for_turn")),
                         (None, True))
        self.assertEqual(_next_turn(rows["b.example"]), "after a host in turn")
        pool, _ = self.make("memory", 0)
        pool.addmany(["http://c.example/1"])
        self.assertNotIn("waiting_for_turn", self.successResultOf(pool.hosts())[0])
