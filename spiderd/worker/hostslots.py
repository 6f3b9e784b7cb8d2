"""The worker's per-host politeness over all its jobs, and per-IP politeness (``[fetch] politeness = "ip"``).

A slot holds one count of requests in flight, the requests waiting for it and (in ``_next``) the earliest start
of its next request.  A host has its own slot, keyed by the host; with per-IP politeness, a host told its address
(``set_group``: the fetcher tells each lookup's first address) shares the slot ``@address`` with the other hosts
of that address.  As in the frontier's pool (:mod:`spiderd.engine.politeness`), concurrency and delay stay per
host (``[fetch.hosts]`` overrides included): a host's request starts when its slot's in-flight count is below the
host's own limit, and books the slot's next start ``delay_of(host)`` later, so a host with its own override paces
the whole address after its own requests but cannot lift the other hosts' limits.  A throttling answer
(``block``) or an adaptive wait holds the whole slot.

A host is on its own until its first lookup; a host whose address changes moves to its new slot with its
requests in flight and its waiting requests, which frees their place in the old one.  Addresses are kept of the
hosts told last, up to ``groups_kept`` (a host with a request held or waiting keeps its own): a host forgotten is
on its own until its next lookup tells it again.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Mapping

from twisted.internet import defer, task
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from spiderd.core.addresses import AddressTable
from spiderd.core.rules import AdaptiveDelay

GROUPS_KEPT = 100_000  # host -> address entries, as the pool's Politeness.groups_kept


@dataclass(slots=True, eq=False)
class _Slot:
    """One politeness slot: a host's own, or the one its address's hosts share."""

    inflight: int = 0
    waiting: deque[tuple[str, Deferred[None]]] = field(default_factory=deque)  # (host, its acquire), in order


class HostSlots:
    """Per-host politeness of the worker, over all jobs: at most ``limit`` requests at once per host, and
    request starts at least ``delay`` seconds apart (raised by a robots.txt Crawl-delay; ``overrides`` maps a
    host to its own (delay, limit), as ``[fetch.hosts]``).  With adaptive politeness (``adaptive``, per host
    ``adaptive_overrides``), a request released with its duration also holds the host's next start until
    ``delay_factor x`` that duration after the release, within the rule's bounds.  With per-IP politeness the
    hosts told one address (``set_group``) share one slot (see the module's docstring).  Idle slots whose next
    start is due are forgotten.
    """

    def __init__(self, limit: int, delay: float = 0.0, clock: IReactorTime | None = None,
                 overrides: Mapping[str, tuple[float, int]] | None = None,
                 adaptive: AdaptiveDelay | None = None,
                 adaptive_overrides: Mapping[str, AdaptiveDelay] | None = None,
                 groups_kept: int = GROUPS_KEPT) -> None:
        self.limit = limit
        self.delay = delay
        self.groups_kept = groups_kept
        self._clock = clock
        self._overrides = dict(overrides or {})
        self._adaptive = adaptive or AdaptiveDelay()
        self._adaptive_overrides = dict(adaptive_overrides or {})
        self._robots: dict[str, float] = {}
        self._slots: dict[str, _Slot] = {}  # by key: the host, or "@address" of its group
        self._next: dict[str, float] = {}  # key -> earliest start of its next request
        self._held: Counter[str] = Counter()  # host -> its requests holding a place in its slot
        self._group_of = AddressTable()  # host -> "@address", the last told last

    # -- settings of a host -----------------------------------------------------------------------------------

    def set_delay(self, host: str, delay: float) -> None:
        """Raise ``host``'s delay to ``delay`` (its robots.txt Crawl-delay)."""
        self._robots[host] = float(delay)

    def delay_of(self, host: str) -> float:
        """Seconds between a request start to ``host`` and the next start in its slot."""
        configured = self._overrides.get(host, (self.delay, self.limit))[0]
        return max(configured, self._robots.get(host, 0.0))

    def limit_of(self, host: str) -> int:
        """Requests in flight in ``host``'s slot below which a request to ``host`` may start."""
        return self._overrides.get(host, (0.0, self.limit))[1]

    def adaptive_of(self, host: str) -> AdaptiveDelay:
        """The adaptive rule of ``host``: its own, else the worker's."""
        return self._adaptive_overrides.get(host, self._adaptive)

    def key_of(self, host: str) -> str:
        """The slot ``host`` is in: ``@address`` once told its address (per-IP), else the host itself."""
        return self._group_of.get(host, host)

    # -- blocks -----------------------------------------------------------------------------------------------

    def block(self, host: str, until: float) -> None:
        """Start no request in ``host``'s slot before ``until`` (clock time: a throttling answer's Retry-After)."""
        key = self.key_of(host)
        self._next[key] = max(self._next.get(key, until), until)

    def blocked_until(self, host: str) -> float:
        """The earliest start of the next request in ``host``'s slot (0: none booked)."""
        return self._next.get(self.key_of(host), 0.0)

    # -- taking and giving back -------------------------------------------------------------------------------

    def acquire(self, host: str) -> Deferred[Any]:
        """Fires when the host has a free place in its slot and its turn has come (cancellable while waiting)."""
        slot = self._slot(self.key_of(host))
        d: Deferred[Any]
        if slot.inflight < self.limit_of(host):
            self._take(slot, host)
            d = defer.succeed(None)
        else:
            d = Deferred(lambda waiting: self._withdraw(host, waiting))
            slot.waiting.append((host, d))
        if self._clock is not None:
            d.addCallback(self._pace, host)
        return d

    def release(self, host: str, elapsed: float | None = None) -> None:
        """Give back a place taken with ``acquire``; ``elapsed``: the request's duration (adaptive politeness)."""
        if elapsed is not None and self._clock is not None:
            self._hold(host, self.adaptive_of(host).wait(elapsed))
        key = self.key_of(host)
        self._slots[key].inflight -= 1
        self._held[host] -= 1
        if not self._held[host]:
            del self._held[host]
        self._wake(key)

    def _slot(self, key: str) -> _Slot:
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = _Slot()
        return slot

    def _take(self, slot: _Slot, host: str) -> None:
        slot.inflight += 1
        self._held[host] += 1

    def _withdraw(self, host: str, waiting: Deferred[None]) -> None:
        """A waiting acquire was cancelled: it leaves its host's slot (its host's now, if the host moved)."""
        key = self.key_of(host)
        slot = self._slots[key]
        slot.waiting = deque(w for w in slot.waiting if w[1] is not waiting)
        self._wake(key)

    def _wake(self, key: str) -> None:
        """Start the waiting requests of slot ``key`` (in order) whose host's limit its in-flight count is below;
        forget the slot if nothing holds it or waits (and its next start is due)."""
        slot, ready, kept = self._slots[key], [], deque[tuple[str, Deferred[None]]]()
        while slot.waiting:
            host, d = slot.waiting.popleft()
            if slot.inflight < self.limit_of(host):
                self._take(slot, host)
                ready.append(d)
            else:
                kept.append((host, d))
        slot.waiting = kept
        if not slot.inflight and not kept:
            del self._slots[key]
            if self._next.get(key, 0.0) <= (self._clock.seconds() if self._clock is not None else 0.0):
                self._next.pop(key, None)
        for d in ready:
            d.callback(None)

    # -- pacing -----------------------------------------------------------------------------------------------

    def _pace(self, _: Any, host: str) -> Any:
        """Book the slot's next start; wait for this one's (a cancelled wait gives its place back).  Read once
        the place is taken, so a block set meanwhile (``block``) or an adaptive wait holds."""
        assert self._clock is not None  # (paced only with a clock)
        key, delay, now = self.key_of(host), self.delay_of(host), self._clock.seconds()
        if delay <= 0 and self._next.get(key, now) <= now:
            return None
        start = max(now, self._next.get(key, now))
        self._next[key] = start + delay
        if start <= now:
            return None
        wait = task.deferLater(self._clock, start - now, lambda: None)
        return wait.addErrback(self._cancelled, host)

    def _cancelled(self, failure: Failure, host: str) -> Failure:
        self.release(host)
        return failure

    def _hold(self, host: str, wait: float) -> None:
        """No request in ``host``'s slot starts within ``wait`` seconds from now (a booked start moves later)."""
        if wait > 0:
            assert self._clock is not None  # (held only with a clock)
            key, now = self.key_of(host), self._clock.seconds()
            self._next[key] = max(self._next.get(key, now), now + wait)

    # -- per-IP groups ----------------------------------------------------------------------------------------

    def set_group(self, host: str, address: str) -> None:
        """``host``'s address is ``address`` (the fetcher's lookup): it shares the slot of that address's hosts
        from now on, taking its requests in flight and waiting along (``address == host``: on its own)."""
        old = self.key_of(host)
        self._group_of.tell(host, None if address == host else "@" + address)
        new = self.key_of(host)
        if new != old:
            self._move(host, old, new)
        self._group_of.trim(self.groups_kept, self._busy)

    def _move(self, host: str, old: str, new: str) -> None:
        """Carry ``host``'s held places, waiting requests and the old slot's next start from ``old`` to ``new``."""
        if old in self._next:
            self._next[new] = max(self._next.get(new, 0.0), self._next[old])
        source = self._slots.get(old)
        if source is None:
            return
        moving = [w for w in source.waiting if w[0] == host]
        held = self._held.get(host, 0)
        if not moving and not held:
            return
        target = self._slot(new)
        source.inflight -= held
        target.inflight += held
        source.waiting = deque(w for w in source.waiting if w[0] != host)
        target.waiting.extend(moving)
        self._wake(old)
        self._wake(new)

    def _busy(self, host: str) -> bool:
        """True if ``host`` holds a place in its slot or waits for one."""
        slot = self._slots.get(self.key_of(host))
        return host in self._held or (slot is not None and any(w[0] == host for w in slot.waiting))

    def __len__(self) -> int:
        return len(self._slots)
