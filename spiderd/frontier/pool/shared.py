"""What both backends (KVPool, RedisPool) do alike: parsing URLs with rejections counted, and the parts of
the ``stats`` and ``why`` answers that do not depend on where the pool keeps its URLs."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping, Sequence
from typing import Any

from twisted.logger import Logger

from spiderd.contracts.pool import HOSTS_MOST
from spiderd.core.urls import MAX_URL_LENGTH, URL, BadURL, parse

log = Logger()

STATE_COUNTS = ("waiting", "pending", "done", "failed", "batched")
RECENT_FAILURES = 200  # final failures a node remembers for /api/failures
RECENT_ERRORS = 1000  # failed fetches a node counts per host for /api/hosts


class RecentFailures:
    """The last final failures this node recorded (in memory: the pool keeps each URL's own in ``why``)."""

    def __init__(self, size: int = RECENT_FAILURES) -> None:
        self._entries: deque[dict[str, Any]] = deque(maxlen=size)

    def add(self, url: str, reason: str, at: float) -> None:
        self._entries.append({"url": url, "reason": reason, "at": at})

    def latest(self, limit: int = 20) -> list[dict[str, Any]]:
        """At most ``limit`` entries, newest first."""
        return [dict(e) for e in list(self._entries)[::-1][:max(0, limit)]]


class HostErrors:
    """Failed fetches per host (retried, final or throttled) among the last ``size`` this node recorded."""

    def __init__(self, size: int = RECENT_ERRORS) -> None:
        self._order: deque[str] = deque()
        self._size = size
        self._counts: Counter[str] = Counter()

    def add(self, host: str) -> None:
        if len(self._order) >= self._size:
            oldest = self._order.popleft()
            self._counts[oldest] -= 1
            if not self._counts[oldest]:
                del self._counts[oldest]
        self._order.append(host)
        self._counts[host] += 1

    def of(self, host: str) -> int:
        return self._counts.get(host, 0)


def host_row(host: str, waiting: int, inflight: int, concurrency: int, configured: float, crawl_delay: float,
             next_allowed: float, throttled_until: float, adaptive: bool, errors: int, now: float) -> dict[str, Any]:
    """One row of ``hosts()``: the host's queue, requests in flight, next turn (seconds from now), delay between
    request starts and what sets its pace (``delay_why``), block end and this node's recent failed fetches.

    ``delay_why``: ``throttled`` while a 429/503 blocks it, ``adaptive`` while the adaptive delay holds its next
    turn further off than its delay would, else ``crawl-delay`` (robots.txt, above the configured one),
    ``configured`` (a delay above 0), None (no delay).
    """
    delay = max(configured, crawl_delay)
    next_in = max(0.0, next_allowed - now)
    blocked = throttled_until > now
    if blocked and throttled_until >= next_allowed:
        why: str | None = "throttled"
    elif adaptive and next_in > delay:
        why = "adaptive"
    elif crawl_delay > configured:
        why = "crawl-delay"
    else:
        why = "configured" if delay > 0 else None
    return {"host": host, "waiting": waiting, "inflight": inflight, "concurrency": concurrency,
            "next_in": round(next_in, 3), "delay": delay, "delay_why": why,
            "throttled_until": throttled_until if blocked else None, "errors": errors}


def top_hosts(rows: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The ``limit`` rows an operator looks at first: throttled hosts (the latest block end first), then the
    hosts with the most waiting URLs."""
    rows.sort(key=lambda r: (-(r["throttled_until"] or 0.0), -r["waiting"], r["host"]))
    return rows[:limit]


def host_limit(limit: int) -> int:
    """``limit`` within 1..HOSTS_MOST."""
    return max(1, min(int(limit), HOSTS_MOST))


class URLParser:
    """A pool's parsing of the URLs it is given: a bad URL is logged and counted by reason in ``rejected`` (the
    pool's ``stats()["rejected"]``), never raised."""

    def __init__(self, max_url_length: int, rejected: Counter[str]) -> None:
        self.max_url_length = max_url_length
        self.rejected = rejected

    def parse(self, url: str) -> URL | None:
        try:
            return parse(url, self.max_url_length)
        except BadURL as e:
            self.rejected[e.reason] += 1
            log.info("Rejected URL ({reason}): {url!r}", reason=e.reason, url=e.url[:200])
            return None


def status_parts(status: Sequence[Any]) -> tuple[str, int, str | None, Any]:
    """An entry of ``set_statuses`` (``(url, code)``, ``(url, code, reason)`` or ``(url, code, reason,
    validators)``) as all four."""
    url, code, *rest = status
    return url, code, rest[0] if rest else None, rest[1] if len(rest) > 1 else None


def parsed(url: str | None, max_length: int = MAX_URL_LENGTH) -> URL | None:
    """``url`` parsed, or None if it is None or bad (not counted: a URL the pool was not asked to keep)."""
    if url is None:
        return None
    try:
        return parse(url, max_length)
    except BadURL:
        return None


def stats_answer(counts: Mapping[str, int], hosts: int, largest: Sequence[Any], hubs: int,
                 rejected: Counter[str], known_skipped: int | None = None,
                 in_turn: int | None = None) -> dict[str, Any]:
    """``stats()``: the URLs in each state, hosts with waiting URLs, the largest host queues (``[host, count]``,
    largest first), hubs, the rejections by reason and, on a shared pool, ``known_skipped``: links and seen-filter
    URLs this node did not send because it remembered the pool knows them (``[pool] redis_known_urls``), and
    ``hosts_in_turn``: the hosts (on Redis: registered domains) with waiting URLs taking turns (``[pool]
    max_active_hosts``)."""
    extra = {} if known_skipped is None else {"known_skipped": known_skipped}
    if in_turn is not None:
        extra["hosts_in_turn"] = in_turn
    return {
        **extra,
        **{name: counts.get(name, 0) for name in STATE_COUNTS},
        "hosts": hosts,
        "max_host": largest[0] if largest else ["", 0],
        "largest": largest,
        "hubs": hubs,
        "rejected": dict(rejected),
    }


def why_parse(url: str, max_length: int) -> URL | dict[str, Any]:
    """The URL ``why`` describes, or (a URL the pool would reject) the whole answer."""
    try:
        return parse(url, max_length)
    except BadURL as e:
        return {"url": e.url, "state": "rejected", "reason": e.reason}  # no password: BadURL redacts


def why_head(u: URL, hub: bool) -> dict[str, Any]:
    """The start of ``why``'s answer: the canonical URL, its fingerprint, host and whether it is a hub."""
    return {"url": u.url, "urlhash": u.fingerprint, "host": u.host, "hub": hub}


def why_host(waiting: int, inflight: int, delay: float, next_allowed: float) -> dict[str, Any]:
    """``why``'s part about the URL's host: its waiting URLs, requests in flight, delay and next allowed time."""
    return {"host_waiting": waiting, "host_inflight": inflight, "host_delay": delay, "host_next_allowed": next_allowed}
