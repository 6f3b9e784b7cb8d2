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

Per-IP politeness (``[fetch] politeness = "ip"``): the hosts of one group (their address, told by the fetch
through ``set_group``) share one next-allowed time and one in-flight count, a :class:`HostGroup`.  The heap
then holds the group, not its hosts, and the group's hosts take turns in it (a ring).  A host is on its own
until it is told a group, and moves when its address changes.  The address told of a host is kept while the host
has a slot; of the others, those told last, up to ``groups_kept`` addresses in all (a host forgotten by ``collect``
that comes back rejoins its group; one told longer ago is on its own until its next lookup tells it again).
A robots.txt Crawl-delay is kept the same way (``delays_kept``): a broad crawl meets millions of hosts once.

A change of the configuration at run time (``configure``) gives the hosts known their new delay and concurrency
at once, keeping their next-allowed times and requests in flight (one pass over the hosts, once per change).

Memory goes with the hosts known (a broad crawl has millions waiting for their first turn), so a host's slot holds
ten fields and shares its pace, and the hosts with nothing booked yet (next-allowed time 0) wait in a plain deque
ahead of the heap, in the order they would have come out of it, without a heap entry each.

Nothing here costs in proportion to the hosts known, per URL or per host: a slot whose last URL left (nothing
waiting, nothing in flight) is noted as it happens, and ``collect`` looks at those only; the hosts with waiting
URLs are counted as their count leaves or reaches 0, and filed by that count (so the hosts with the most are
read from the largest counts down: the distinct counts are at most sqrt(2 x waiting URLs), whatever the hosts);
the hosts blocked by a throttling answer are noted as they are; a group counts its hosts; the address table pins
the hosts with a slot, so that its trim pops the head of its order.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from spiderd.core.addresses import AddressTable
from spiderd.core.deadlines import Deadlines
from spiderd.core.rules import AdaptiveDelay, PoliteRules


class Tally:
    """What the slots of one Politeness tell it as it happens: how many have waiting URLs and the slots by that
    count, which may have become idle (in the order they did), which were blocked, which groups may have lost
    their last host."""

    __slots__ = ("active", "by_count", "idle", "blocked", "empty_groups", "in_turn", "benched", "unsettled")

    def __init__(self) -> None:
        self.active = 0
        self.in_turn = 0  # slots taking turns (see Politeness.limit_turns)
        self.benched: deque[HostSlot] = deque()  # slots waiting for a turn, in the order they came (some stale)
        self.unsettled: dict[str, int] = {}  # host -> its fetches over whose URLs' statuses are not in (they hold
        # its turn: the links a page brings back follow in the same turn)
        self.by_count: dict[int, dict[str, HostSlot]] = {}  # waiting (not 0) -> the slots with that many
        self.idle: dict[str, None] = {}
        self.blocked: Deadlines[str] = Deadlines()  # host -> the end of its throttling block, expired as they end
        self.empty_groups: dict[str, None] = {}

    def count(self, slot: HostSlot, was: int, value: int) -> None:
        """``slot``'s waiting URLs went from ``was`` to ``value``."""
        if was:
            bucket = self.by_count[was]
            del bucket[slot.host]
            if not bucket:
                del self.by_count[was]
        if value:
            self.by_count.setdefault(value, {})[slot.host] = slot
        if bool(was) != bool(value):
            self.active += 1 if value else -1
            if not value and not slot.own_inflight:
                self.idle[slot.host] = None
                self.end_turn(slot)
            elif value:
                self.idle.pop(slot.host, None)  # busy: noted again when it next becomes idle (so a new host's note
                # goes as its first URL comes, and a million hosts met with a URL each hold none)

    def end_turn(self, slot: HostSlot) -> None:
        """``slot`` has nothing waiting and nothing in flight: its turn, if it had one, ends, unless a fetch of it
        awaits its URL's status (see Politeness.release)."""
        if slot.turn == IN_TURN and slot.host not in self.unsettled:
            slot.turn = OUT
            self.in_turn -= 1

    def most(self) -> Iterator[HostSlot]:
        """The slots with waiting URLs, the most first (those with as many: in the order they came to it)."""
        for waiting in sorted(self.by_count, reverse=True):
            yield from self.by_count[waiting].values()


OUT, BENCHED, IN_TURN = 0, 1, 2  # a slot's place when the hosts taking turns are limited (Politeness.limit_turns)
ADMIT_AT_ONCE = 16  # benched hosts a ready() lets in at most, looking for one that may go now


@dataclass(slots=True, eq=False)
class HostGroup:
    """The hosts of one address (per-IP politeness): one next-allowed time and one in-flight count, and the ring
    of its hosts that wait for a turn (each at most once)."""

    key: str
    next_allowed: float = 0.0
    inflight: int = 0
    cap: int = 1  # the highest concurrency of its hosts: below it, one of them may have a free slot
    queued: bool = False
    ring: deque[HostSlot] = field(default_factory=deque)
    members: int = 0  # the slots in it


@dataclass(slots=True, eq=False)
class HostSlot:
    """What the pool knows of one host; ``inflight`` and ``next_allowed`` are its group's when it has one.

    A broad crawl holds one for each host with URLs waiting, so it holds no more than it needs (ten fields):
    its delay and concurrency are one ``pace`` shared by the hosts paced alike, the end of its throttling block
    is its Politeness's table of blocks."""

    host: str
    pace: tuple[float, int]  # (delay, concurrency)
    tally: Tally = field(default_factory=Tally, repr=False)  # its Politeness's
    own_waiting: int = 0  # see waiting
    own_inflight: int = 0  # this host's requests in flight (its group counts those of all its hosts)
    own_next: float = 0.0
    place: int = 0  # bit 0: queued (in the heap, or in its group's ring); above it: its turn (see ``turn``)
    cursor: Any = None  # the backend's read state in this host's queues
    seen: int | None = None  # new URLs the host took in all, when the backend counts them (None: not read yet)
    group: HostGroup | None = None

    @property
    def queued(self) -> bool:
        """In the heap, or in its group's ring."""
        return bool(self.place & 1)

    @queued.setter
    def queued(self, value: bool) -> None:
        self.place = (self.place & ~1) | (1 if value else 0)

    @property
    def turn(self) -> int:
        """OUT, BENCHED or IN_TURN (only while the hosts taking turns are limited: Politeness.limit_turns); one
        field with ``queued``, so that a slot keeps to ten."""
        return self.place >> 1

    @turn.setter
    def turn(self, value: int) -> None:
        self.place = (self.place & 1) | (value << 1)

    @property
    def delay(self) -> float:
        """Seconds from one request's start to the next."""
        return self.pace[0]

    @delay.setter
    def delay(self, value: float) -> None:
        if value != self.pace[0]:  # (the shared tuple is kept while nothing changes)
            self.pace = (value, self.pace[1])

    @property
    def concurrency(self) -> int:
        """Requests in flight at most."""
        return self.pace[1]

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        if value != self.pace[1]:
            self.pace = (self.pace[0], value)

    @property
    def throttled_until(self) -> float:
        """The end of the block by a throttling answer (see Politeness.block) while it holds, else 0 or its end."""
        return self.tally.blocked.get(self.host) or 0.0

    @property
    def waiting(self) -> int:
        """URLs of this host waiting in the pool."""
        return self.own_waiting

    @waiting.setter
    def waiting(self, value: int) -> None:
        was = self.own_waiting
        self.own_waiting = value
        if was != value:
            self.tally.count(self, was, value)

    @property
    def inflight(self) -> int:
        return self.own_inflight if self.group is None else self.group.inflight

    @inflight.setter
    def inflight(self, value: int) -> None:
        change = value - self.inflight
        self.own_inflight = max(0, self.own_inflight + change)
        if self.group is not None:
            self.group.inflight = max(0, self.group.inflight + change)
        if not self.own_inflight and not self.own_waiting:
            self.tally.idle[self.host] = None
            self.tally.end_turn(self)

    @property
    def next_allowed(self) -> float:
        return self.own_next if self.group is None else self.group.next_allowed

    @next_allowed.setter
    def next_allowed(self, value: float) -> None:
        self.own_next = value
        if self.group is not None:
            self.group.next_allowed = value


@dataclass
class Politeness:
    """The host table and the heap of hosts ready to be fetched from."""

    delay: float = 0.0
    concurrency: int = 1
    overrides: dict[str, tuple[float, int]] = field(default_factory=dict)
    adaptive: AdaptiveDelay = field(default_factory=AdaptiveDelay)  # off unless its factor is above 0
    adaptive_overrides: dict[str, AdaptiveDelay] = field(default_factory=dict)  # host -> its own rule
    hosts: dict[str, HostSlot] = field(default_factory=dict)
    _heap: list[tuple[float, int, HostSlot | HostGroup]] = field(default_factory=list)
    # those queued at next-allowed time 0 (nothing booked yet: a new host), in the order queued: ahead of the whole
    # heap, in that order, as their entries (time 0, a growing tiebreak) would be in it, without a tuple and a
    # number each (a broad crawl has a million hosts waiting for their first turn)
    _first: deque[HostSlot | HostGroup] = field(default_factory=deque)
    _tiebreak: itertools.count[int] = field(default_factory=itertools.count)
    groups_kept: int = 100_000  # addresses kept of hosts without a slot (ten times the fetcher's DNS cache)
    _group_of: AddressTable[str] = field(default_factory=AddressTable)  # host -> its group (per-IP), last told last
    delays_kept: int = 100_000  # robots.txt Crawl-delays kept of hosts without a slot (five times Robots' table:
    # a host whose delay went left that table long before, and is told again when its robots.txt is read again)
    _robots_delay: AddressTable[float] = field(default_factory=AddressTable)  # host -> its Crawl-delay
    _groups: dict[str, HostGroup] = field(default_factory=dict)
    _tally: Tally = field(default_factory=Tally)
    _pace: tuple[float, int] = (0.0, 1)  # (delay, concurrency), shared by the slots paced by default
    released: list[Callable[[HostSlot], None]] = field(default_factory=list)  # told after each release (a unit freed)
    turn_limit: int = 0  # hosts with waiting URLs that take turns at once (0: all; see limit_turns)

    @classmethod
    def of(cls, rules: PoliteRules) -> Politeness:
        """A politeness that paces hosts by ``rules``."""
        return cls(rules.delay, rules.concurrency, dict(rules.overrides), rules.adaptive,
                   dict(rules.adaptive_overrides))

    def configure(self, rules: PoliteRules) -> list[str]:
        """Pace hosts by ``rules`` from their next request on (the configuration changed at run time).

        The hosts known take their new delay and concurrency at once (a robots.txt Crawl-delay stays a lower
        bound); their requests in flight and next-allowed times are kept, and a host that has a free slot now
        is queued.  One pass over the hosts known (a reload is rare).  The hosts whose own table went, sorted."""
        before = {*self.overrides, *self.adaptive_overrides}
        self.delay, self.concurrency, self.adaptive = rules.delay, rules.concurrency, rules.adaptive
        self.overrides, self.adaptive_overrides = dict(rules.overrides), dict(rules.adaptive_overrides)
        for group in self._groups.values():
            group.cap = 1
        for slot in self.hosts.values():
            slot.pace = self._paced(slot.host)
            if slot.group is not None:
                slot.group.cap = max(slot.group.cap, slot.concurrency)
        for slot in self.hosts.values():
            self.requeue(slot)
        return sorted(before - {*self.overrides, *self.adaptive_overrides})

    def limit_turns(self, limit: int) -> None:
        """Let at most ``limit`` hosts with waiting URLs take turns at once (0: every host, as they come).

        Heritrix's active queues, BUbiNG's workbench: a host with waiting URLs waits on a bench, in the order it
        came, until a pop finds no host in turn ready (all in their delay or at their concurrency): then the next
        benched host enters (``ready``).  So the hosts in turn are as many as keep the fetch slots busy, at most
        ``limit``, and a host keeps its turn until it has nothing waiting, nothing in flight and no status to come
        (``settle``).  A broad crawl that meets 500,000 hosts fetches a few hundred of them in depth, each
        robots.txt read once for many pages and its connection kept alive, instead of every host's robots.txt
        and first page before any host's second."""
        self.turn_limit = max(0, limit)
        if not self.turn_limit:
            while self._admit_one() is not None:
                pass

    def _enter(self, slot: HostSlot) -> bool:
        """Whether ``slot`` (not in turn) may be queued: a host of a per-IP group at once, if there is room (the
        group's hosts share one turn: they take it in their ring); any other waits on the bench (once) until a pop
        lets it in."""
        if slot.waiting <= 0:
            return True  # nothing to queue (requeue does nothing with it)
        tally = self._tally
        if slot.group is not None and tally.in_turn < self.turn_limit:
            slot.turn = IN_TURN  # (an entry it left on the bench is skipped there)
            tally.in_turn += 1
            return True
        if slot.turn != BENCHED:
            slot.turn = BENCHED
            tally.benched.append(slot)
        return False

    def _admit_one(self) -> HostSlot | None:
        """Let the host benched longest take turns (queued at its next-allowed time), if there is room; a benched
        entry whose host was forgotten or has nothing waiting any more is dropped on the way."""
        tally, limit = self._tally, self.turn_limit
        while tally.benched and (tally.in_turn < limit or not limit):
            slot = tally.benched.popleft()
            if slot.turn != BENCHED:
                continue
            slot.turn = OUT
            if self.hosts.get(slot.host) is slot and slot.waiting > 0:
                slot.turn = IN_TURN
                tally.in_turn += 1
                self.requeue(slot)
                return slot
        return None

    def _may_admit(self) -> bool:
        """A benched host could enter now."""
        tally = self._tally
        return bool(self.turn_limit and tally.benched and tally.in_turn < self.turn_limit)

    def hosts_in_turn(self) -> int:
        """Hosts with waiting URLs taking turns now (all of them when turns are not limited)."""
        return self._tally.in_turn if self.turn_limit else self._tally.active

    def _paced(self, host: str) -> tuple[float, int]:
        """``host``'s delay (its configured one, or its Crawl-delay if longer) and concurrency (the same tuple for
        the hosts paced alike)."""
        if self._pace != (self.delay, self.concurrency):
            self._pace = (self.delay, self.concurrency)
        pace = self.overrides.get(host, self._pace)
        crawl_delay = self._robots_delay.get(host, 0.0)
        return pace if crawl_delay <= pace[0] else (crawl_delay, pace[1])

    def slot(self, host: str) -> HostSlot:
        """The slot of ``host``, created on first use (in its group, if it was told one)."""
        slot = self.hosts.get(host)
        if slot is None:
            slot = self.hosts[host] = HostSlot(host, self._paced(host), self._tally)
            self._tally.idle[host] = None  # until it has a URL
            key = self._group_of.get(host)
            self._group_of.pin(host)
            self._robots_delay.pin(host)
            if key is not None:
                self._join(slot, key)
        return slot

    def ready(self, now: float) -> HostSlot | None:
        """Take the host whose turn it is, if its next-allowed time has come; with turns limited and none ready,
        let benched hosts in (up to ADMIT_AT_ONCE a call) until one is."""
        for _ in range(ADMIT_AT_ONCE):
            slot = self._ready(now)
            if slot is not None or not self._may_admit() or self._admit_one() is None:
                return slot
        return self._ready(now)

    def _ready(self, now: float) -> HostSlot | None:
        """The host in turn whose next-allowed time has come, if any."""
        while True:
            item = self._pop(now)
            if item is None:
                return None
            if isinstance(item, HostGroup):
                item.queued = False
                member = self._member(item, now)
                if member is not None:
                    return member
                continue
            if item.group is not None:  # queued before it joined a group: its group's ring has it now
                continue
            item.queued = False
            if self.turn_limit and item.turn != IN_TURN:  # queued before its last turn ended: placed again
                self.requeue(item)
                continue
            if item.next_allowed > now:
                self.requeue(item)
            elif item.waiting > 0 and item.inflight < item.concurrency:
                return item

    def _pop(self, now: float) -> HostSlot | HostGroup | None:
        """The first entry of the heap (those at time 0 first) if its time has come, taken out; else None."""
        if self._first and now >= 0.0 and not (self._heap and self._heap[0][0] < 0.0):
            return self._first.popleft()
        if self._heap and self._heap[0][0] <= now:
            return heapq.heappop(self._heap)[2]
        return None

    def _push(self, at: float, item: HostSlot | HostGroup) -> None:
        """Queue ``item`` in the heap at ``at`` (at 0: at the end of those at 0, which come first)."""
        if at == 0.0:
            self._first.append(item)
        else:
            heapq.heappush(self._heap, (at, next(self._tiebreak), item))

    def _member(self, group: HostGroup, now: float) -> HostSlot | None:
        """The next host of ``group``'s ring that may go now (it leaves the ring), or None."""
        if group.next_allowed > now:
            self._queue(group)
            return None
        ring = group.ring
        for _ in range(len(ring)):
            slot = ring.popleft()
            if slot.group is not group:  # moved to another group since (it is queued there)
                continue
            slot.queued = False
            if self.turn_limit and slot.turn != IN_TURN:  # in the ring since before its last turn ended
                self.requeue(slot)
                continue
            if slot.waiting > 0 and group.inflight < slot.concurrency:
                return slot
            if slot.waiting > 0:  # no free slot for this host now: it keeps its place for a release
                slot.queued = True
                ring.append(slot)
        return None

    def quota(self, slot: HostSlot, now: float, wanted: int) -> int:
        """How many URLs to take from ``slot`` in this turn.

        One, unless the host has no delay and no other host is ready: then as
        many as its free slots allow (a single-host crawl at full speed).
        """
        free = min(slot.concurrency - slot.inflight, slot.waiting, wanted)
        following = self.next_time()
        if slot.delay > 0 or (following is not None and following <= now):
            return min(free, 1)
        return free

    def taken(self, slot: HostSlot, count: int, now: float) -> None:
        """``count`` URLs of ``slot`` were leased at ``now``."""
        slot.inflight += count  # first: a host taking its last URL is not idle for a moment (its turn goes on)
        slot.waiting -= count
        slot.next_allowed = now + slot.delay
        self.requeue(slot)

    def release(self, slot: HostSlot, unsettled: bool = False) -> None:
        """A leased URL of ``slot`` finished (or its lease expired); ``unsettled``: its request is over but its
        status is still to come (its links with it), and the host keeps its turn until ``settle``."""
        if unsettled and self.turn_limit:
            tally = self._tally
            tally.unsettled[slot.host] = tally.unsettled.get(slot.host, 0) + 1
        if slot.own_inflight > 0:
            slot.inflight -= 1
        self.requeue(slot)
        for listener in self.released:
            listener(slot)

    def settle(self, slot: HostSlot) -> None:
        """The status of a URL of ``slot`` released ``unsettled`` came: the host's turn ends if it has no more
        work."""
        unsettled = self._tally.unsettled
        count = unsettled.pop(slot.host, 0) - 1
        if count > 0:
            unsettled[slot.host] = count
        elif not slot.own_waiting and not slot.own_inflight:
            self._tally.end_turn(slot)

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
        """Put ``slot`` in the heap (or its group's ring, and the group in the heap) if it has work and a free
        slot."""
        if self.turn_limit and slot.turn != IN_TURN and not self._enter(slot):
            return
        group = slot.group
        if group is None:
            if not slot.queued and slot.waiting > 0 and slot.inflight < slot.concurrency:
                slot.queued = True
                self._push(slot.next_allowed, slot)
            return
        if not slot.queued and slot.waiting > 0:
            slot.queued = True
            group.ring.append(slot)
        self._queue(group)

    def skip(self, slot: HostSlot) -> None:
        """``slot`` was ready but its URLs may not go now (their owner holds them back): it stays out of turn until
        it is requeued, and its group, if any, is queued again for its other hosts."""
        if slot.group is not None:
            self._queue(slot.group)

    def _queue(self, group: HostGroup) -> None:
        """Put ``group`` in the heap at its next-allowed time if a host of its ring may have a free slot."""
        if not group.queued and group.ring and group.inflight < group.cap:
            group.queued = True
            self._push(group.next_allowed, group)

    def set_group(self, host: str, key: str) -> None:
        """Put ``host`` in the politeness group ``key`` (its address); ``key == host``: on its own again."""
        slot = self.hosts.get(host)
        self._group_of.tell(host, None if key == host else key, pinned=slot is not None)
        if slot is not None:
            self._join(slot, None if key == host else key)
        self._group_of.trim(self.groups_kept)

    def next_allowed(self, host: str) -> float:
        """The earliest start of ``host``'s next request: its slot's, else its group's (0: none booked)."""
        slot = self.hosts.get(host)
        if slot is not None:
            return slot.next_allowed
        group = self._groups.get(self._group_of.get(host, ""))
        return 0.0 if group is None else group.next_allowed

    def group_of(self, host: str) -> str:
        """The key of the group ``host`` is told to be in (per IP), else the host itself."""
        return self._group_of.get(host, host)

    def _join(self, slot: HostSlot, key: str | None) -> None:
        """Move ``slot`` (its in-flight requests, its next-allowed time) into group ``key`` (None: no group)."""
        old = slot.group
        group = None if key is None else self._groups.get(key)
        if key is not None and group is None:
            group = self._groups[key] = HostGroup(key)
        if group is old:
            return
        if old is not None:
            old.inflight = max(0, old.inflight - slot.own_inflight)
            self._leave(old)
            self._queue(old)  # the requests in flight it took along may have held back the others of its ring
        slot.group = group
        if group is not None:
            group.members += 1
            group.inflight += slot.own_inflight
            group.next_allowed = max(group.next_allowed, slot.own_next)
            group.cap = max(group.cap, slot.concurrency)
        else:
            slot.own_next = max(slot.own_next, old.next_allowed if old is not None else 0.0)
        slot.queued = False  # an entry left in the heap or the old ring is skipped there
        self.requeue(slot)

    def next_time(self) -> float | None:
        """The earliest next-allowed time of a ready host (a benched host that may enter: now), or None."""
        if self._may_admit():
            return 0.0
        if self._first:
            return min(0.0, self._heap[0][0]) if self._heap else 0.0
        return self._heap[0][0] if self._heap else None

    def delays(self, host: str) -> tuple[float, float]:
        """``host``'s configured delay (the default or its override) and its robots.txt Crawl-delay (0: none)."""
        return self.overrides.get(host, (self.delay, self.concurrency))[0], self._robots_delay.get(host, 0.0)

    def set_robots_delay(self, host: str, delay: float) -> None:
        """Raise ``host``'s delay to its robots.txt Crawl-delay (kept while it has a slot, then among the last
        ``delays_kept`` told or let go)."""
        self._robots_delay.tell(host, delay, pinned=host in self.hosts)
        self._robots_delay.trim(self.delays_kept)
        slot = self.hosts.get(host)
        if slot is not None:
            slot.delay = max(slot.delay, delay)

    def block(self, slot: HostSlot, until: float) -> None:
        """Hand out nothing of ``slot`` before ``until`` (a throttling answer's Retry-After); an earlier
        entry in the heap is put back at the new time when its turn comes (see ``ready``)."""
        slot.next_allowed = max(slot.next_allowed, until)
        until = max(slot.throttled_until, until)
        self._tally.blocked.set(slot.host, until)  # (the slot's throttled_until; the ended go at collect and attention)

    def _leave(self, group: HostGroup) -> None:
        """A slot left ``group`` (it moved, or was forgotten)."""
        group.members -= 1
        if group.members <= 0:
            self._tally.empty_groups[group.key] = None

    def forget(self, host: str) -> None:
        """Drop ``host``'s slot (it has nothing waiting or in flight); its group goes with its last host, and the
        addresses told longest ago of hosts without a slot beyond ``groups_kept``."""
        slot = self.hosts.pop(host, None)
        if slot is not None:
            self._tally.idle.pop(host, None)
            if slot.turn == IN_TURN:
                self._tally.in_turn -= 1
            slot.turn = OUT
            self._group_of.unpin(host)
            self._robots_delay.unpin(host)
            group = slot.group
            if group is not None:
                self._leave(group)
                if group.members <= 0:
                    self._groups.pop(group.key, None)
                    self._tally.empty_groups.pop(group.key, None)
        self._group_of.trim(self.groups_kept)
        self._robots_delay.trim(self.delays_kept)

    def collect(self, now: float) -> None:
        """Forget hosts with nothing waiting, nothing in flight and no pending delay, groups no host is in, and
        the addresses of hosts without a slot told longest ago, down to ``groups_kept`` addresses.

        Only the slots that became idle since are looked at (a host still in its delay is looked at again
        next time), so the work is that of the hosts that came and went, not of all the hosts known."""
        tally, later = self._tally, dict[str, None]()
        for host in tally.idle:
            slot = self.hosts.get(host)
            if slot is None or slot.own_waiting or slot.own_inflight:
                continue  # gone already, or busy again: noted again when it next becomes idle
            if host in tally.unsettled:  # a status still to come holds its turn
                later[host] = None
                continue
            if slot.next_allowed > now:
                later[host] = None
                continue
            del self.hosts[host]
            self._group_of.unpin(host)
            self._robots_delay.unpin(host)
            if slot.group is not None:
                self._leave(slot.group)
        tally.idle = later
        tally.blocked.expire(now)
        self._group_of.trim(self.groups_kept)
        self._robots_delay.trim(self.delays_kept)
        for key in tally.empty_groups:
            group = self._groups.get(key)
            if group is not None and group.members <= 0:
                del self._groups[key]
        tally.empty_groups = {}

    def top(self, count: int) -> list[list[Any]]:
        """The ``count`` hosts with the most waiting URLs, as ``[host, waiting]``, largest first."""
        return [[s.host, s.waiting] for s in itertools.islice(self._tally.most(), max(0, count))]

    def attention(self, count: int, now: float) -> list[HostSlot]:
        """At most ``count`` hosts an operator looks at first: those blocked by a throttling answer now (the
        latest block end first), then those with the most waiting URLs."""
        blocked = self._blocked(now)
        first = heapq.nlargest(count, blocked.values(), key=lambda s: (s.throttled_until, s.waiting))
        rest = (s for s in self._tally.most() if s.host not in blocked)
        return first + list(itertools.islice(rest, max(0, count - len(first))))

    def _blocked(self, now: float) -> dict[str, HostSlot]:
        """The slots blocked by a throttling answer at ``now``."""
        blocked = self._tally.blocked
        blocked.expire(now)
        slots = ((host, self.hosts.get(host)) for host in blocked)
        return {host: slot for host, slot in slots if slot is not None and slot.throttled_until > now}

    def active_hosts(self) -> int:
        """Hosts with waiting URLs."""
        return self._tally.active

