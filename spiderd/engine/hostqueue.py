"""URLs waiting per host for their turn, in memory, for a source that is not a pool (the worker's jobs).

Each host has a line of entries grouped by owner (a job's run): owners take turns in a host's line, and hosts
take turns through :class:`~spiderd.engine.politeness.Politeness`, the same heap of hosts by next-allowed time
(host and address slots, delays, Crawl-delay, adaptive delay, throttle blocks) that the embedded pools pop
through.  An entry waits in its host's line, holding nothing: a URL whose host is paced, blocked by a throttle
or full takes no fetch slot of the node's, so other hosts' URLs go meanwhile.

An owner may hold back its own entries (its :meth:`Owner.gate`: a job's cap on its requests in flight, its own
per-host limit and delay).  A host whose line has nothing its owners let go now is parked: until the earliest
time an owner named, or until an owner it waits on frees a request (:meth:`HostQueue.freed`).

Every step costs O(log hosts) (the heaps) plus the owners of one host's line; a host's slot is forgotten once
it is idle and its next-allowed time is past (a heap by that time, popped from its head).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Hashable, Protocol

from twisted.internet.interfaces import IReactorTime

from spiderd.core.urls import host_of
from spiderd.engine.politeness import HostSlot, Politeness
from spiderd.engine.subrequests import HostTurns

NOW = 0.0  # an owner's gate: it may start a request now
FREED = math.inf  # an owner's gate: not before one of its own requests ends


class Owner(Hashable, Protocol):
    """Whose entries a line holds (a job's run)."""

    def gate(self, host: str, now: float) -> float:
        """When this owner may start a request to ``host``: ``now`` or earlier (go), a later time, or
        :data:`FREED` (when one of its requests ends)."""


@dataclass(slots=True, eq=False)
class Entry:
    """One URL to fetch for its owner, at its attempt (retries count up)."""

    owner: Owner
    url: str
    host: str
    attempt: int = 0


@dataclass(slots=True, eq=False)
class Line:
    """A host's waiting entries, per owner in turn."""

    owners: dict[Owner, deque[Entry]] = field(default_factory=dict)

    def take(self, now: float) -> tuple[Entry | None, float, list[Owner]]:
        """The next entry an owner lets go (its owner moved to the end of the turn); else None, the earliest
        time one may go (FREED if none named one), and the owners to wait for."""
        earliest, blocked = FREED, []
        for owner in list(self.owners):
            entries = self.owners.pop(owner)
            self.owners[owner] = entries  # to the end of the turn
            gate = owner.gate(entries[0].host, now)
            if gate <= now:
                entry = entries.popleft()
                if not entries:
                    del self.owners[owner]
                return entry, now, []
            earliest = min(earliest, gate)
            if gate == FREED:
                blocked.append(owner)
        return None, earliest, blocked


class HostQueue:
    """Entries waiting per host; ``take`` hands out the next one that politeness and its owner allow now."""

    def __init__(self, politeness: Politeness) -> None:
        self.politeness = politeness
        self.waiting = 0  # entries in every line
        self._hosts_of: dict[Owner, set[str]] = {}  # owner -> hosts whose line holds its entries
        self._parked: dict[Owner, dict[str, None]] = {}  # owner -> hosts parked until it frees a request, in order
        self._timed: list[tuple[float, int, str]] = []  # (time, tiebreak, host) parked until that time
        self._timed_at: dict[str, float] = {}  # host -> its earliest time in _timed (no second entry for it)
        self._idle: list[tuple[float, int, str]] = []  # (next-allowed time, tiebreak, host) of slots that may be idle
        self._tiebreak = itertools.count()

    def add(self, entry: Entry) -> None:
        """Queue ``entry`` in its host's line."""
        slot = self.slot(entry.host)
        line: Line = slot.cursor
        line.owners.setdefault(entry.owner, deque()).append(entry)
        self._hosts_of.setdefault(entry.owner, set()).add(entry.host)
        slot.waiting += 1
        self.waiting += 1
        self.politeness.requeue(slot)

    def take(self, now: float) -> Entry | None:
        """The next entry whose host's turn has come and whose owner lets it go (its host slot taken), or None."""
        self._unpark(now)
        while True:
            slot = self.politeness.ready(now)
            if slot is None:
                return None
            line: Line = slot.cursor
            entry, when, owners = line.take(now)
            if entry is not None:
                self.waiting -= 1
                self.politeness.taken(slot, 1, now)
                return entry
            self._park(slot.host, when, owners)
            self.politeness.skip(slot)

    def done(self, host: str, now: float, elapsed: float | None = None) -> None:
        """A request taken from ``host`` ended (``elapsed``: its duration, for adaptive politeness)."""
        slot = self.politeness.hosts[host]
        if elapsed is not None:
            self.politeness.fetched(slot, elapsed, now)
        self.politeness.release(slot)
        self.settle(slot)

    def freed(self, owner: Owner) -> None:
        """``owner`` may start one more request (one of its requests ended): the host it parked first gets its
        turn again (one a request, so an owner capped over many hosts costs O(1) a request, not O(its hosts); a
        host parked by an owner's per-host limit gets its turn back when a request to it ends, see ``done``)."""
        parked = self._parked.get(owner)
        if not parked:
            return
        host = next(iter(parked))
        del parked[host]
        if not parked:
            del self._parked[owner]
        slot = self.politeness.hosts.get(host)
        if slot is not None:
            self.politeness.requeue(slot)

    def drop(self, owner: Owner) -> int:
        """Remove every entry of ``owner`` (a halted job); the number removed."""
        dropped = 0
        for host in self._hosts_of.pop(owner, ()):
            slot = self.politeness.hosts.get(host)
            if slot is None:
                continue
            entries = slot.cursor.owners.pop(owner, ())
            slot.waiting -= len(entries)
            dropped += len(entries)
            self.settle(slot)
        self._parked.pop(owner, None)
        self.waiting -= dropped
        return dropped

    def block(self, host: str, until: float) -> None:
        """Hand out nothing of ``host`` (and its address, per IP) before ``until`` (a throttling answer)."""
        slot = self.slot(host)
        self.politeness.block(slot, until)
        self.settle(slot)

    def blocked_until(self, host: str) -> float:
        """The earliest start of ``host``'s next request (0: none booked)."""
        return self.politeness.next_allowed(host)

    def turns(self, clock: IReactorTime) -> HostTurns:
        """Turns in this queue's politeness for requests it does not hand out (a rendered page's sub-requests)."""
        return HostTurns(clock, self.politeness, self.slot, self.settle)

    def next_time(self) -> float | None:
        """The earliest time a take may hand something out (None: nothing waits on time)."""
        times = [t for t in (self.politeness.next_time(), self._timed[0][0] if self._timed else None) if t is not None]
        return min(times, default=None)

    # -- slots ----------------------------------------------------------------------------------------------

    def slot(self, host: str) -> HostSlot:
        """``host``'s slot, with its line (made on first use)."""
        slot = self.politeness.slot(host)
        if slot.cursor is None:
            slot.cursor = Line()
        return slot

    def _park(self, host: str, when: float, owners: list[Owner]) -> None:
        """Nothing of ``host``'s line may go now: back in turn at ``when``, or when one of ``owners`` frees."""
        if when != FREED and when < self._timed_at.get(host, FREED):
            self._timed_at[host] = when
            heapq.heappush(self._timed, (when, next(self._tiebreak), host))
        for owner in owners:
            self._parked.setdefault(owner, {})[host] = None

    def _unpark(self, now: float) -> None:
        while self._timed and self._timed[0][0] <= now:
            when, _, host = heapq.heappop(self._timed)
            if self._timed_at.get(host) == when:
                del self._timed_at[host]
            slot = self.politeness.hosts.get(host)
            if slot is not None:
                self.politeness.requeue(slot)
        while self._idle and self._idle[0][0] <= now:
            self._forget(heapq.heappop(self._idle)[2], now)

    def settle(self, slot: HostSlot) -> None:
        """``slot`` may be idle now: it is forgotten once its next-allowed time is past, if still idle then."""
        if not slot.waiting and not slot.own_inflight:
            heapq.heappush(self._idle, (slot.next_allowed, next(self._tiebreak), slot.host))

    def _forget(self, host: str, now: float) -> None:
        """Drop ``host``'s slot if it is still idle and its next-allowed time is past."""
        slot = self.politeness.hosts.get(host)
        if slot is not None and not slot.waiting and not slot.own_inflight and slot.next_allowed <= now:
            self.politeness.forget(host)


def entry(owner: Owner, url: str, attempt: int = 0) -> Entry:
    """An entry for ``url`` (its host read from it)."""
    return Entry(owner, url, host_of(url), attempt)
