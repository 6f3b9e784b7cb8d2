"""A rendered page's sub-requests (scripts, XHR, fetch): where they may go, and how politely.

A sub-request goes to its page's own site only: the site's ``allowed_hosts`` (and their subdomains) and its
``render_hosts``; the render pool fetches it with spiderd's own fetcher, so robots.txt, the site's headers, proxy and
cookies apply as to any page.  It counts against its host's politeness: the role's own
:class:`~spiderd.engine.politeness.Politeness` (the crawler's pool, the worker's host queue), through
:class:`HostTurns`.  A sub-request starts only at the host's next-allowed time, and pushes it ``delay`` on (so the
role's next page of that host waits too); it runs in a unit of the host's concurrency: its page's own (the main
document's, which the page holds until its outcome; its sub-requests to its host take it one at a time) or a free
one (which the role's next page then waits for); a throttling answer (429, 503) blocks the host in the role's
politeness at once.  A sub-request waiting for its turn holds no render slot of another page.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable
from urllib.parse import urlsplit

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure

from spiderd.core import status as st
from spiderd.core.rules import HostTable, Site
from spiderd.core.throttle import throttled
from spiderd.core.urls import BadURL, canonicalize, host_of
from spiderd.engine.politeness import HostSlot, Politeness

if TYPE_CHECKING:
    from spiderd.fetch.fetcher import Fetcher, FetchResult

Answer = tuple[int, list[tuple[str, str]], bytes]  # (status, headers, body) for the browser; status 0: refused, why
DEFAULT_THROTTLE = 5.0  # seconds a throttling answer without Retry-After blocks its host
COLLECT_EVERY = 1000  # releases between two collections of idle slots (a politeness no role collects)


class SiteHosts:
    """The hosts each site's rendered pages may send sub-requests to."""

    def __init__(self) -> None:
        self._tables: dict[str, HostTable[bool]] = {}

    def refusal(self, site: Site, url: str) -> str:
        """Why a sub-request of a page of ``site`` to ``url`` is refused ("": it may go)."""
        if not url.startswith(("http://", "https://")):
            return f"sub-request to {url[:60]} refused"
        table = self._tables.get(site.name)
        if table is None:
            table = self._tables[site.name] = HostTable((h, True) for h in site.allowed_hosts + site.render_hosts)
        host = (urlsplit(url).hostname or "").lower()
        host = f"[{host}]" if ":" in host else host
        if table.get(host) is None:
            return f"sub-request to {host} refused (not a host of site {site.name})"
        return ""


@dataclass(slots=True, eq=False)
class Lent:
    """A rendered page's own unit of its host's concurrency (its main document's, held until the page's outcome),
    lent to its sub-requests to that host, one at a time."""

    host: str
    busy: bool = False


@dataclass(slots=True, eq=False)
class Turn:
    """A sub-request's turn: its host, the page's unit it runs in (None: a unit of its own), its start."""

    host: str
    lent: Lent | None
    started: float


@dataclass(slots=True, eq=False)
class _Waiter:
    lent: Lent | None
    d: Deferred[Turn] = field(default_factory=Deferred)


class HostTurns:
    """Turns for sub-requests in a role's politeness (see the module's docstring).

    ``slot_of`` is the role's way to a host's slot (the pool's, the host queue's: made on first use);
    ``settled(slot)`` is told after each release, so the role may forget an idle slot (None: the politeness is
    collected every ``COLLECT_EVERY`` releases)."""

    def __init__(self, clock: IReactorTime, politeness: Politeness,
                 slot_of: Callable[[str], HostSlot] | None = None,
                 settled: Callable[[HostSlot], None] | None = None) -> None:
        self._clock = clock
        self.politeness = politeness
        self._slot_of = slot_of or politeness.slot
        self._settled = settled
        self._waiting: dict[str, deque[_Waiter]] = {}
        self._timers: dict[str, IDelayedCall] = {}
        self._releases = 0
        politeness.released.append(self._freed)

    def book(self, host: str, start: float) -> None:
        """A request to ``host`` (a page's main document) started at ``start``: the next one waits its delay."""
        slot = self._slot_of(host)
        slot.next_allowed = max(slot.next_allowed, start + slot.delay)

    def acquire(self, host: str, lent: Lent | None = None) -> Deferred[Turn]:
        """Fires with a turn when a sub-request to ``host`` may start (cancel it to give up its place); then
        ``release`` the turn.  ``lent``: the unit of the sub-request's page."""
        waiter = _Waiter(lent, Deferred(lambda d: self._drop(host, waiter)))
        self._waiting.setdefault(host, deque()).append(waiter)
        self._pump(host)
        return waiter.d

    def release(self, turn: Turn) -> None:
        """``turn``'s sub-request ended: its unit is free (adaptive politeness: its duration counts)."""
        now = self._clock.seconds()
        slot = self._slot_of(turn.host)
        self.politeness.fetched(slot, now - turn.started, now)
        if turn.lent is None:
            self.politeness.release(slot)  # the role's next page may take the unit (the waiters are told first)
        else:
            turn.lent.busy = False
            self._pump(turn.host)
        self._settle(slot, now)

    def block(self, host: str, until: float) -> None:
        """Start nothing to ``host`` (pages and sub-requests) before ``until`` (a throttling answer)."""
        slot = self._slot_of(host)
        self.politeness.block(slot, until)
        self._settle(slot, self._clock.seconds())

    def waiting(self) -> int:
        """Sub-requests waiting for their turn."""
        return sum(len(line) for line in self._waiting.values())

    def _settle(self, slot: HostSlot, now: float) -> None:
        if self._settled is not None:
            self._settled(slot)
            return
        self._releases += 1
        if self._releases % COLLECT_EVERY == 0:
            self.politeness.collect(now)

    def _freed(self, _: HostSlot) -> None:
        """A unit was freed in the politeness (of this host, or of another of its address group)."""
        for host in list(self._waiting):
            self._pump(host)

    def _pump(self, host: str) -> None:
        """Start what may start now of ``host``'s waiters (their callbacks run once the state is set)."""
        line = self._waiting.get(host)
        go: list[tuple[_Waiter, Turn]] = []
        if line:
            slot, now = self._slot_of(host), self._clock.seconds()
            while line:
                if slot.next_allowed > now:
                    self._wake(host, slot.next_allowed - now)
                    break
                waiter = next((w for w in line if w.lent is not None and w.lent.host == host and not w.lent.busy),
                              None)
                if waiter is not None:
                    assert waiter.lent is not None
                    waiter.lent.busy = True
                    lent = waiter.lent
                elif slot.inflight < slot.concurrency:
                    waiter, lent = line[0], None
                    slot.inflight += 1
                else:
                    break  # until a unit is freed (a release)
                line.remove(waiter)
                slot.next_allowed = now + slot.delay
                go.append((waiter, Turn(host, lent, now)))
        if not line:
            self._waiting.pop(host, None)
        for waiter, turn in go:
            waiter.d.callback(turn)

    def _wake(self, host: str, delay: float) -> None:
        timer = self._timers.get(host)
        if timer is not None and timer.active():
            if timer.getTime() <= self._clock.seconds() + delay:
                return
            timer.cancel()
        self._timers[host] = self._clock.callLater(delay, self._woken, host)

    def _woken(self, host: str) -> None:
        self._timers.pop(host, None)
        self._pump(host)

    def _drop(self, host: str, waiter: _Waiter) -> None:
        line = self._waiting.get(host)
        if line is not None and waiter in line:
            line.remove(waiter)
            if not line:
                del self._waiting[host]


class SubRequests:
    """Checks, paces and fetches the sub-requests of rendered pages (see the module's docstring)."""

    def __init__(self, clock: IReactorTime, fetcher: Fetcher, turns: HostTurns) -> None:
        """``turns``: those of a caller that passes none of its own (a politeness of the ``[fetch]`` settings)."""
        self._clock = clock
        self._fetcher = fetcher
        self.turns = turns
        self._hosts = SiteHosts()
        self.counts = {"subrequests": 0, "refused": 0}  # fetched (or on their way), refused here

    def fetch(self, site: Site, url: str, user_agent: str | None, robots: bool, throttled: Callable[[float], None],
              turns: HostTurns | None = None, lent: Lent | None = None) -> Deferred[Answer]:
        """The answer to a sub-request of a page of ``site`` (a refusal is status 0 with the reason), in a turn of
        ``turns`` (the role's; ``lent``: the page's unit); a throttling answer blocks its host and is told to
        ``throttled(wait)``.  Cancel it to give up its turn or its fetch."""
        why = self._hosts.refusal(site, url)
        canonical = ""
        if not why:
            try:
                canonical = canonicalize(url)
            except BadURL as e:
                why = f"bad sub-request URL: {e}"
        if why:
            self.counts["refused"] += 1
            return defer.succeed((0, [], why.encode()))
        self.counts["subrequests"] += 1
        paced = turns or self.turns
        turn: Deferred[Turn] = paced.acquire(host_of(canonical), lent)
        fetched: Deferred[Answer] = turn.addCallback(self._fetch, paced, canonical, user_agent, robots, throttled)
        return fetched

    def _fetch(self, turn: Turn, turns: HostTurns, url: str, user_agent: str | None, robots: bool,
               told: Callable[[float], None]) -> Deferred[Answer]:
        d = self._fetcher.fetch(url, user_agent=user_agent, robots=robots)
        return d.addBoth(self._answered, turns, turn, told)

    def _answered(self, result: FetchResult | Failure, turns: HostTurns, turn: Turn,
                  told: Callable[[float], None]) -> Answer | Failure:
        turns.release(turn)  # whatever happened (a cancel too): the unit is free
        if isinstance(result, Failure):
            return result
        if throttled(result.status):
            wait = result.retry_after if result.retry_after is not None else DEFAULT_THROTTLE
            turns.block(turn.host, self._clock.seconds() + wait)
            told(wait)
        if result.headers is None:
            return 0, [], (result.reason or st.reason(result.status)).encode()
        return result.status, list(result.headers), bytes(result.body)


__all__ = ["HostTurns", "Lent", "SiteHosts", "SubRequests", "Turn"]
