"""Throttling answers (429, 503): how long a host asked to be left alone, and the back-off without Retry-After.

``Retry-After`` is seconds or an HTTP date (RFC 9110 10.2.3); the wait is
capped by ``max_retry_after``.  Without it, the wait grows per consecutive
throttle of the host (1 s, 2 s, 4 s, ... by :class:`~spiderd.core.retry.Backoff`,
the same cap), and a non-throttled answer from the host resets it.  Sans I/O:
the callers give the time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spiderd.core import status as st
from spiderd.core.httpdate import header_text, http_date
from spiderd.core.retry import Backoff

THROTTLE_CODES = frozenset({429, 503})
MAX_RETRY_AFTER = 3600.0
MAX_THROTTLES = 10
FIRST_BACKOFF = 1.0
MAX_HOSTS = 100_000  # hosts whose streak is remembered at most (a crawl of more forgets the oldest)


def parse_retry_after(value: str | bytes | None, now: float) -> float | None:
    """The seconds a ``Retry-After`` value asks to wait from ``now`` (Unix time), at least 0; None if absent or bad."""
    text = header_text(value)
    if text is None:
        return None
    if text.isdigit():
        return float(int(text))
    when = http_date(text)
    return None if when is None else max(0.0, when - now)


def throttled(code: int) -> bool:
    """True for the answers that say the host is busy: 429 and 503."""
    return code in THROTTLE_CODES


def reason(code: int, wait: float) -> str:
    """The failure reason the pool keeps: ``throttled: http 429, retry after 30 s``."""
    return st.clean(f"throttled: http {code}, retry after {wait:g} s")


@dataclass
class HostThrottles:
    """Consecutive throttles per host, and the wait each one gives (Retry-After, or the growing back-off)."""

    cap: float = MAX_RETRY_AFTER
    streaks: dict[str, int] = field(default_factory=dict)

    def wait(self, host: str, retry_after: float | None) -> float:
        """Count a throttle of ``host``; the seconds it is blocked: ``retry_after`` capped, else the back-off."""
        count = self.streaks.pop(host, 0) + 1
        if len(self.streaks) >= MAX_HOSTS:
            self.streaks.pop(next(iter(self.streaks)))
        self.streaks[host] = count
        if retry_after is not None:
            return min(self.cap, max(0.0, retry_after))
        return Backoff(FIRST_BACKOFF, self.cap).delay(count)

    def answered(self, host: str) -> None:
        """``host`` gave an answer that was not a throttle: its back-off starts again from the first."""
        if self.streaks:
            self.streaks.pop(host, None)
