"""The engine's host queue (the worker's politeness over all its jobs, per host or per address), on a Clock.

:class:`Slots` drives a :class:`HostQueue` as the worker's pipeline does (take what is ready at every change and
when the next host is due, ``done`` when a request ends), one owner per request, so each request's start is a
Deferred the tests can look at.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.task import Clock
from twisted.trial import unittest

from spiderd.core.rules import AdaptiveDelay
from spiderd.engine.hostqueue import FREED, NOW, Entry, HostQueue, entry
from spiderd.engine.politeness import Politeness
from spiderd.worker.files import JobHosts

from .test_worker import assert_fires_after
from .workcount import growth


class Waiter:
    """One request's owner: it may always go; ``started`` fires when the queue hands it out."""

    def __init__(self) -> None:
        self.started: Deferred[None] = Deferred()

    def gate(self, host: str, now: float) -> float:
        return NOW


class Slots:
    """A HostQueue on a Clock, driven as the worker's pipeline drives it."""

    def __init__(self, limit: int, delay: float = 0.0, clock: Clock | None = None, **politeness: Any) -> None:
        self.clock = clock or Clock()
        self.politeness = Politeness(delay=delay, concurrency=limit, **politeness)
        self.queue = HostQueue(self.politeness)
        self._wake: IDelayedCall | None = None

    def acquire(self, host: str) -> Deferred[None]:
        """Fires when a request to ``host`` may start (cancelling it drops the request from the queue)."""
        waiter = Waiter()
        waiter.started = Deferred(lambda _: self._cancel(waiter))
        self.queue.add(Entry(waiter, f"http://{host}/", host))
        self.pump()
        return waiter.started

    def release(self, host: str, elapsed: float | None = None) -> None:
        self.queue.done(host, self.clock.seconds(), elapsed)
        self.pump()

    def set_group(self, host: str, address: str) -> None:
        self.politeness.set_group(host, address)
        self.pump()

    def pump(self) -> None:
        now = self.clock.seconds()
        while (taken := self.queue.take(now)) is not None:
            taken.owner.started.callback(None)  # type: ignore[attr-defined]
        due = self.queue.next_time()
        if self._wake is not None and self._wake.active():
            self._wake.cancel()
        if due is not None:
            self._wake = self.clock.callLater(max(0.0, due - now), self.pump)

    def _cancel(self, waiter: Waiter) -> None:
        self.queue.drop(waiter)
        self.pump()

    def __len__(self) -> int:
        """Host slots the queue still keeps."""
        self.pump()
        return len(self.politeness.hosts)


class HostQueueTests(unittest.SynchronousTestCase):
    """Per-host limits, pacing and adaptive delay through the engine's politeness."""

    def test_host_slots(self) -> None:
        """At most ``limit`` per host; a released slot goes to the next waiter; idle hosts are forgotten."""
        slots = Slots(1)
        first, second = slots.acquire("h"), slots.acquire("h")
        self.successResultOf(first)
        self.assertNoResult(second)
        slots.release("h")
        self.successResultOf(second)
        slots.release("h")
        self.assertEqual(len(slots), 0)

    def test_host_slots_pace_request_starts(self) -> None:
        """With a delay, a host's requests start ``delay`` apart even with free slots; Crawl-delay and
        per-host overrides change it; a wait that is cancelled gives its place back."""
        clock = Clock()
        slots = Slots(8, delay=2.0, clock=clock, overrides={"fast.example": (0.0, 2)})
        first, second, third = (slots.acquire("h") for _ in range(3))
        self.successResultOf(first)
        self.assertNoResult(second)
        clock.advance(2)
        self.successResultOf(second)
        self.assertNoResult(third)
        third.cancel()
        self.failureResultOf(third, CancelledError)
        self.assertEqual(slots.queue.waiting, 0)
        for _ in range(2):
            slots.release("h")
        clock.advance(2)
        self.assertEqual(len(slots), 0)
        self.assertEqual([slots.acquire("fast.example").called for _ in range(3)], [True, True, False])
        slots.politeness.set_robots_delay("h", 5.0)
        delays = {host: max(slots.politeness.delays(host)) for host in ("h", "fast.example", "other")}
        self.assertEqual(delays, {"h": 5.0, "fast.example": 0.0, "other": 2.0})
        clock.advance(10)
        self.successResultOf(slots.acquire("h"))
        assert_fires_after(self, clock, slots.acquire("h"), 5.0)

    def test_host_slots_adaptive_delay(self) -> None:
        """With adaptive politeness, a request released with its duration holds the host's next start for
        delay_factor x that duration from the release, within min_delay and max_delay; a host's own rule
        applies to it; a release without a duration, or with the rule off, holds nothing."""
        clock = Clock()
        slots = Slots(1, clock=clock, adaptive=AdaptiveDelay(3.0, 1.0, 10.0),
                      adaptive_overrides={"off.example": AdaptiveDelay()})
        for took, wait in ((2.0, 6.0), (0.1, 1.0), (60.0, 10.0)):
            self.successResultOf(slots.acquire("h"))
            later = slots.acquire("h")
            clock.advance(took)
            slots.release("h", took)
            clock.advance(wait - 0.01)
            self.assertNoResult(later)
            clock.advance(0.01)
            self.successResultOf(later)
            slots.release("h")
            clock.advance(10)
        self.successResultOf(slots.acquire("h"))
        slots.release("h")  # no duration: no wait
        self.successResultOf(slots.acquire("h"))
        slots.release("h")
        self.successResultOf(slots.acquire("off.example"))
        slots.release("off.example", 5.0)
        self.successResultOf(slots.acquire("off.example"))


class Capped:
    """An owner that lets ``cap`` requests go at once, and its own per-host limits (a job's)."""

    def __init__(self, cap: int = 0, hosts: JobHosts | None = None) -> None:
        self.cap, self.hosts, self.active = cap, hosts, 0

    def gate(self, host: str, now: float) -> float:
        if self.cap and self.active >= self.cap:
            return FREED
        return NOW if self.hosts is None else self.hosts.gate(host, now)


class OwnerTests(unittest.SynchronousTestCase):
    """Owners (jobs) take turns in a host's line and hold their own entries back; others go meanwhile."""

    def take_all(self, queue: HostQueue, now: float) -> list[str]:
        taken = []
        while (e := queue.take(now)) is not None:
            taken.append(e.url)
            owner = e.owner
            if isinstance(owner, Capped):
                owner.active += 1
                if owner.hosts is not None:
                    owner.hosts.started(e.host, now)
        return taken

    def test_owners_take_turns_in_a_hosts_line(self) -> None:
        """Two owners' URLs on one host alternate, whatever order they came in."""
        queue = HostQueue(Politeness(concurrency=4))
        a, b = Capped(), Capped()
        for i in range(3):
            queue.add(entry(a, f"http://h/a{i}"))
        for i in range(3):
            queue.add(entry(b, f"http://h/b{i}"))
        self.assertEqual(self.take_all(queue, 0.0), ["http://h/a0", "http://h/b0", "http://h/a1", "http://h/b1"])

    def test_a_capped_owner_lets_the_others_go_and_comes_back_when_freed(self) -> None:
        """An owner at its cap holds back its URLs on every host, the other owner's go; once it frees a request
        (``freed``), its parked hosts have their turn again."""
        queue = HostQueue(Politeness(concurrency=8))
        capped, free = Capped(cap=1), Capped()
        for host in ("x", "y", "z"):
            queue.add(entry(capped, f"http://{host}/c"))
        queue.add(entry(free, "http://y/f"))
        taken = self.take_all(queue, 0.0)
        self.assertEqual(sorted(taken), ["http://x/c", "http://y/f"])
        self.assertIsNone(queue.take(0.0))
        capped.active -= 1
        queue.done("x", 0.0)
        queue.freed(capped)
        self.assertEqual(len(self.take_all(queue, 0.0)), 1)  # one more of its hosts, at its cap again
        self.assertEqual(queue.waiting, 1)

    def test_an_owners_own_delay_parks_the_host_until_it_ends(self) -> None:
        """A job's DOWNLOAD_DELAY (JobHosts) holds its next URL to the host until then; the queue says when."""
        queue = HostQueue(Politeness(concurrency=8))
        job = Capped(hosts=JobHosts(0, 5.0))
        for i in range(2):
            queue.add(entry(job, f"http://h/{i}"))
        self.assertEqual(self.take_all(queue, 0.0), ["http://h/0"])
        self.assertEqual(queue.next_time(), 5.0)
        self.assertEqual(self.take_all(queue, 4.9), [])
        self.assertEqual(self.take_all(queue, 5.0), ["http://h/1"])

    def test_a_dropped_owner_leaves_nothing(self) -> None:
        """Dropping an owner (a halted job) removes its entries from every host's line."""
        queue = HostQueue(Politeness(concurrency=1))
        gone, kept = Capped(), Capped()
        for host in ("x", "y"):
            queue.add(entry(gone, f"http://{host}/g"))
        queue.add(entry(kept, "http://x/k"))
        self.assertEqual(queue.drop(gone), 2)
        self.assertEqual(self.take_all(queue, 0.0), ["http://x/k"])
        self.assertEqual(queue.waiting, 0)


class JobHostsTests(unittest.SynchronousTestCase):
    """A job's own per-host limits, sans I/O."""

    def test_limit_and_delay(self) -> None:
        """Starts are ``delay`` apart from each actual start, at most ``limit`` in flight; a host without either
        goes at once."""
        hosts = JobHosts(2, 5.0)
        self.assertEqual(hosts.gate("h", 0.0), NOW)
        hosts.started("h", 0.0)
        self.assertEqual(hosts.gate("h", 3.0), 5.0)
        hosts.started("h", 9.0)  # the worker's own turn came 4 s later: the next start is 5 s after this one
        self.assertEqual(hosts.gate("h", 14.0), FREED)  # two in flight
        hosts.released("h")
        self.assertEqual(hosts.gate("h", 13.9), 14.0)
        self.assertEqual(hosts.gate("h", 14.0), NOW)
        hosts.released("h")
        self.assertEqual((len(hosts), hosts.gate("other", 0.0)), (0, NOW))


class CostTests(unittest.SynchronousTestCase):
    """What a request costs the queue does not grow with the hosts an owner waits on (tests/workcount.py)."""

    def test_a_capped_owner_over_many_hosts_costs_the_same_a_request(self) -> None:
        """An owner at its cap of 1 with URLs on 1,000 or 100,000 parked hosts: one request ending and the next
        starting (``done``, ``freed``, ``take``) costs about the same work at both sizes."""

        def table(n: int) -> Any:
            queue = HostQueue(Politeness(concurrency=1))
            owner = Capped(cap=1)
            for i in range(n):
                queue.add(entry(owner, f"http://h{i}.test/"))
            first = queue.take(0.0)
            assert first is not None
            owner.active = 1
            self.assertIsNone(queue.take(0.0))  # every other host is parked on the owner
            current = [first.host]

            def step(i: int) -> None:
                queue.add(entry(owner, f"http://h{i}.test/"))
                owner.active -= 1
                queue.done(current[0], 0.0)
                queue.freed(owner)
                taken = queue.take(0.0)
                assert taken is not None
                owner.active += 1
                current[0] = taken.host

            return step

        small, big = growth(table)
        self.assertTrue(big.flat_against(small), (small, big))
