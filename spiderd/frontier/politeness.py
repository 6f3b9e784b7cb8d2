"""Per-host politeness, sans I/O: hosts take turns by next-allowed time.

This is Mercator's back-queue heap: one entry per host that has waiting URLs
and a free slot, keyed by the time it may be fetched from next, so a host with
a million URLs never starves one with ten.  Delays count from one request's
start to the next (as Scrapy's ``DOWNLOAD_DELAY``); concurrency caps the
requests in flight per host.

Adaptive politeness (optional, :class:`~spiderd.core.rules.AdaptiveDelay`):
when a fetch ends, the host's next request waits ``delay_factor x`` that
fetch's duration from its end, within ``min_delay`` and ``max_delay``.  It
only ever pushes the next-allowed time later, so the configured delay and a
robots.txt Crawl-delay (start to start) stay lower bounds.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any

from spiderd.core.rules import AdaptiveDelay


@dataclass(slots=True)
class HostSlot:
    """What the pool knows of one host."""

    host: str
    hid: bytes
    delay: float
    concurrency: int
    waiting: int = 0
    inflight: int = 0
    next_allowed: float = 0.0
    queued: bool = False
    cursor: Any = None  # the backend's read state in this host's queues
    seen: int | None = None  # new URLs the host took in all, when the backend counts them (None: not read yet)
    throttled_until: float = 0.0  # the end of the last block by a throttling answer (see Politeness.block)


@dataclass
class Politeness:
    """The host table and the heap of hosts ready to be fetched from."""

    delay: float = 0.0
    concurrency: int = 1
    overrides: dict[str, tuple[float, int]] = field(default_factory=dict)
    adaptive: AdaptiveDelay = field(default_factory=AdaptiveDelay)  # off unless its factor is above 0
    adaptive_overrides: dict[str, AdaptiveDelay] = field(default_factory=dict)  # host -> its own rule
    hosts: dict[str, HostSlot] = field(default_factory=dict)
    _heap: list[tuple[float, int, HostSlot]] = field(default_factory=list)
    _tiebreak: itertools.count[int] = field(default_factory=itertools.count)
    _robots_delay: dict[str, float] = field(default_factory=dict)

    def slot(self, host: str, hid: bytes) -> HostSlot:
        """The slot of ``host``, created on first use."""
        slot = self.hosts.get(host)
        if slot is None:
            delay, concurrency = self.overrides.get(host, (self.delay, self.concurrency))
            delay = max(delay, self._robots_delay.get(host, 0.0))
            slot = self.hosts[host] = HostSlot(host, hid, delay, concurrency)
        return slot

    def ready(self, now: float) -> HostSlot | None:
        """Take the host whose turn it is, if its next-allowed time has come."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            slot = heapq.heappop(heap)[2]
            slot.queued = False
            if slot.next_allowed > now:
                self.requeue(slot)
            elif slot.waiting > 0 and slot.inflight < slot.concurrency:
                return slot
        return None

    def quota(self, slot: HostSlot, now: float, wanted: int) -> int:
        """How many URLs to take from ``slot`` in this turn.

        One, unless the host has no delay and no other host is ready: then as
        many as its free slots allow (a single-host crawl at full speed).
        """
        free = min(slot.concurrency - slot.inflight, slot.waiting, wanted)
        if slot.delay > 0 or (self._heap and self._heap[0][0] <= now):
            return min(free, 1)
        return free

    def taken(self, slot: HostSlot, count: int, now: float) -> None:
        """``count`` URLs of ``slot`` were leased at ``now``."""
        slot.waiting -= count
        slot.inflight += count
        slot.next_allowed = now + slot.delay
        self.requeue(slot)

    def release(self, slot: HostSlot) -> None:
        """A leased URL of ``slot`` finished (or its lease expired)."""
        if slot.inflight > 0:
            slot.inflight -= 1
        self.requeue(slot)

    def fetched(self, slot: HostSlot, elapsed: float, now: float) -> None:
        """A request to ``slot``'s host that took ``elapsed`` seconds ended at ``now``: with adaptive politeness,
        its next request waits the adaptive delay from now (never sooner than the configured delay allows)."""
        wait = self.adaptive_of(slot.host).wait(elapsed)
        if wait > 0:
            slot.next_allowed = max(slot.next_allowed, now + wait)

    def adaptive_of(self, host: str) -> AdaptiveDelay:
        """The adaptive rule of ``host``: its own (``[fetch.hosts]``), else the default."""
        return self.adaptive_overrides.get(host, self.adaptive)

    def requeue(self, slot: HostSlot) -> None:
        """Put ``slot`` in the heap if it has work and a free slot."""
        if not slot.queued and slot.waiting > 0 and slot.inflight < slot.concurrency:
            slot.queued = True
            heapq.heappush(self._heap, (slot.next_allowed, next(self._tiebreak), slot))

    def next_time(self) -> float | None:
        """The earliest next-allowed time of a ready host, or None."""
        return self._heap[0][0] if self._heap else None

    def delays(self, host: str) -> tuple[float, float]:
        """``host``'s configured delay (the default or its override) and its robots.txt Crawl-delay (0: none)."""
        return self.overrides.get(host, (self.delay, self.concurrency))[0], self._robots_delay.get(host, 0.0)

    def set_robots_delay(self, host: str, delay: float) -> None:
        """Raise ``host``'s delay to its robots.txt Crawl-delay."""
        self._robots_delay[host] = delay
        slot = self.hosts.get(host)
        if slot is not None:
            slot.delay = max(slot.delay, delay)

    def block(self, slot: HostSlot, until: float) -> None:
        """Hand out nothing of ``slot`` before ``until`` (a throttling answer's Retry-After); an earlier
        entry in the heap is put back at the new time when its turn comes (see ``ready``)."""
        slot.next_allowed = max(slot.next_allowed, until)
        slot.throttled_until = max(slot.throttled_until, until)

    def collect(self, now: float) -> None:
        """Forget hosts with nothing waiting, nothing in flight and no pending delay."""
        idle = [h for h, s in self.hosts.items() if not s.waiting and not s.inflight and s.next_allowed <= now]
        for host in idle:
            del self.hosts[host]

    def top(self, count: int) -> list[list[Any]]:
        """The ``count`` hosts with the most waiting URLs, as ``[host, waiting]``, largest first."""
        busiest = heapq.nlargest(count, self.hosts.values(), key=lambda s: s.waiting)
        return [[s.host, s.waiting] for s in busiest if s.waiting]

    def attention(self, count: int, now: float) -> list[HostSlot]:
        """At most ``count`` hosts an operator looks at first: those blocked by a throttling answer now (the
        latest block end first), then those with the most waiting URLs; one pass over the host table."""
        def key(s: HostSlot) -> tuple[float, int]:
            return (s.throttled_until if s.throttled_until > now else 0.0, s.waiting)

        return heapq.nlargest(count, (s for s in self.hosts.values() if s.waiting or s.throttled_until > now), key=key)

    def active_hosts(self) -> int:
        """Hosts with waiting URLs."""
        return sum(1 for s in self.hosts.values() if s.waiting)


def hub_quota(count: int, hub_percent: int) -> int:
    """How many due hubs a pop of ``count`` hands out at most: ``hub_percent`` of it, and at least one (as seed
    000's pool does), so ``pop(1)`` never leaves a due hub waiting while the pool says it is due."""
    if count <= 0 or hub_percent <= 0:
        return 0
    return max(1, count * min(hub_percent, 100) // 100)
