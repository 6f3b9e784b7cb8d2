"""What both backends (KVPool, RedisPool) do alike: parsing URLs with rejections counted, and the parts of
the ``stats`` and ``why`` answers that do not depend on where the pool keeps its URLs."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping, Sequence
from typing import Any

from twisted.logger import Logger

from spiderd.core.urls import MAX_URL_LENGTH, URL, BadURL, parse

log = Logger()

STATE_COUNTS = ("waiting", "pending", "done", "failed", "batched")
RECENT_FAILURES = 200  # final failures a node remembers for /api/failures


class RecentFailures:
    """The last final failures this node recorded (in memory: the pool keeps each URL's own in ``why``)."""

    def __init__(self, size: int = RECENT_FAILURES) -> None:
        self._entries: deque[dict[str, Any]] = deque(maxlen=size)

    def add(self, url: str, reason: str, at: float) -> None:
        self._entries.append({"url": url, "reason": reason, "at": at})

    def latest(self, limit: int = 20) -> list[dict[str, Any]]:
        """At most ``limit`` entries, newest first."""
        return [dict(e) for e in list(self._entries)[::-1][:max(0, limit)]]


class URLParsing:
    """A pool's ``_parse``: a bad URL is logged and counted by reason (``stats()["rejected"]``), never raised."""

    _max_url_length: int
    rejected: Counter[str]

    def _parse(self, url: str) -> URL | None:
        try:
            return parse(url, self._max_url_length)
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
                 rejected: Counter[str]) -> dict[str, Any]:
    """``stats()``: the URLs in each state, hosts with waiting URLs, the largest host queues (``[host, count]``,
    largest first), hubs, and the rejections by reason."""
    return {
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
