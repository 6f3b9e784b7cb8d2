"""A rendered page's sub-requests (scripts, XHR, fetch): where they may go, and how politely.

A sub-request goes to its page's own site only: the site's ``allowed_hosts`` (and their subdomains) and its
``render_hosts``; the render pool fetches it with spiderd's own fetcher, so robots.txt, the site's headers, proxy and
cookies apply as to any page.  :class:`SubRequestGate` paces them per host as ``[fetch]`` paces pages: at most
``per_host_concurrency`` in flight (or the host's ``[fetch.hosts]`` override), starts ``per_host_delay`` apart (or
the robots.txt Crawl-delay, the longer), the main document's fetch booked first, and nothing while a throttling
answer (429, 503) blocks the host.  A sub-request waiting for its turn holds no render slot of another page.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlsplit

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from spiderd.core import status as st
from spiderd.core.rules import HostTable, Site
from spiderd.core.throttle import throttled
from spiderd.core.urls import BadURL, canonicalize, host_of
from spiderd.engine.politeness import Politeness

if TYPE_CHECKING:
    from spiderd.fetch.fetcher import Fetcher, FetchResult

Limits = Callable[[str], tuple[float, int]]  # host -> (delay between starts, requests in flight at most)
Answer = tuple[int, list[tuple[str, str]], bytes]  # (status, headers, body) for the browser; status 0: refused, why
DEFAULT_THROTTLE = 5.0  # seconds a throttling answer without Retry-After blocks its host


def politeness_limits(politeness: Politeness) -> Limits:
    """A host's delay (its configured one or its robots.txt Crawl-delay, the longer) and concurrency."""
    def limits(host: str) -> tuple[float, int]:
        delay, concurrency = politeness.overrides.get(host, (politeness.delay, politeness.concurrency))
        return max(delay, politeness.delays(host)[1]), concurrency
    return limits


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
class _Host:
    next_allowed: float = 0.0
    inflight: int = 0
    waiting: deque[Deferred[None]] = field(default_factory=deque)
    timer: IDelayedCall | None = None


class SubRequestGate:
    """Per-host turns for sub-requests: a delay between starts, a cap in flight, throttle blocks."""

    def __init__(self, clock: IReactorTime, limits: Limits, max_hosts: int = 10000) -> None:
        self._clock = clock
        self._limits = limits
        self._max_hosts = max_hosts
        self._hosts: dict[str, _Host] = {}

    def book(self, host: str, start: float) -> None:
        """A request to ``host`` started at ``start`` (a page's main document): the next one waits its delay."""
        slot = self._slot(host)
        slot.next_allowed = max(slot.next_allowed, start + self._limits(host)[0])

    def block(self, host: str, until: float) -> None:
        """Start nothing to ``host`` before ``until`` (a throttling answer)."""
        slot = self._slot(host)
        slot.next_allowed = max(slot.next_allowed, until)

    def acquire(self, host: str) -> Deferred[None]:
        """Fires when a sub-request to ``host`` may start (cancel it to give up the turn); then ``release``."""
        slot = self._slot(host)
        d: Deferred[None] = Deferred(lambda d: _drop(slot.waiting, d))
        slot.waiting.append(d)
        self._pump(host, slot)
        return d

    def release(self, host: str) -> None:
        """A sub-request to ``host`` ended."""
        slot = self._hosts.get(host)
        if slot is not None:
            slot.inflight = max(0, slot.inflight - 1)
            self._pump(host, slot)

    def next_allowed(self, host: str) -> float:
        slot = self._hosts.get(host)
        return 0.0 if slot is None else slot.next_allowed

    def _slot(self, host: str) -> _Host:
        slot = self._hosts.get(host)
        if slot is None:
            if len(self._hosts) >= self._max_hosts:
                self._collect()
            slot = self._hosts[host] = _Host()
        return slot

    def _pump(self, host: str, slot: _Host) -> None:
        delay, concurrency = self._limits(host)
        while slot.waiting and slot.inflight < concurrency:
            now = self._clock.seconds()
            if slot.next_allowed > now:
                if slot.timer is None or not slot.timer.active():
                    slot.timer = self._clock.callLater(slot.next_allowed - now, self._pump, host, slot)
                return
            d = slot.waiting.popleft()
            slot.inflight += 1
            slot.next_allowed = now + delay
            d.callback(None)

    def _collect(self) -> None:
        now = self._clock.seconds()
        for host in [h for h, s in self._hosts.items() if not s.inflight and not s.waiting and s.next_allowed <= now]:
            del self._hosts[host]


def _drop(waiting: deque[Deferred[None]], d: Deferred[None]) -> None:
    try:
        waiting.remove(d)
    except ValueError:
        pass


class SubRequests:
    """Checks, paces and fetches the sub-requests of rendered pages (see the module's docstring)."""

    def __init__(self, clock: IReactorTime, fetcher: Fetcher, gate: SubRequestGate) -> None:
        self._clock = clock
        self._fetcher = fetcher
        self.gate = gate
        self._hosts = SiteHosts()
        self.counts = {"subrequests": 0, "refused": 0}  # fetched (or on their way), refused here

    def fetch(self, site: Site, url: str, user_agent: str | None, robots: bool,
              throttled: Callable[[float], None]) -> Deferred[Answer]:
        """The answer to a sub-request of a page of ``site`` (a refusal is status 0 with the reason); a throttling
        answer blocks its host and is told to ``throttled(wait)``.  Cancel it to give up its turn or its fetch."""
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
        host = host_of(canonical)
        turn = self.gate.acquire(host)
        fetched: Deferred[FetchResult] = turn.addCallback(self._fetch, canonical, user_agent, robots)
        return fetched.addCallback(self._answered, host, throttled)

    def _fetch(self, _: None, url: str, user_agent: str | None, robots: bool) -> Deferred[FetchResult]:
        return self._fetcher.fetch(url, user_agent=user_agent, robots=robots)

    def _answered(self, result: FetchResult, host: str, told: Callable[[float], None]) -> Answer:
        self.gate.release(host)
        if throttled(result.status):
            wait = result.retry_after if result.retry_after is not None else DEFAULT_THROTTLE
            self.gate.block(host, self._clock.seconds() + wait)
            told(wait)
        if result.headers is None:
            return 0, [], (result.reason or st.reason(result.status)).encode()
        return result.status, list(result.headers), bytes(result.body)


__all__ = ["SiteHosts", "SubRequestGate", "SubRequests", "politeness_limits"]
