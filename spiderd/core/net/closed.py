"""Connections an API closed at a deadline, logged as one line a while instead of one line each.

A flood of slow or idle clients (4,000 at once) would otherwise write a line per connection.  The first close
starts a summary period of ``interval`` seconds; at its end one line gives the counts by deadline, and the next
close starts the next period.  :meth:`DeadlineCloses.flush` writes what is counted at once (the port closes).
"""

from __future__ import annotations

from collections import Counter

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

log = Logger()
SUMMARY_INTERVAL = 60.0  # seconds: at most one line per period about the connections closed at a deadline
WHY = {
    "headers": "sent no complete request headers within {header:g} s",
    "idle": "stayed idle for {idle:g} s",
}


class DeadlineCloses:
    """Counts the connections of one API closed at its header deadline or idle timeout, and logs the counts."""

    def __init__(self, clock: IReactorTime, label: str, header_timeout: float, idle_timeout: float,
                 interval: float = SUMMARY_INTERVAL) -> None:
        self._clock = clock
        self._label = label
        self._timeouts = {"header": header_timeout, "idle": idle_timeout}
        self.interval = interval
        self.counts: Counter[str] = Counter()
        self._period: IDelayedCall | None = None
        self._since = 0.0  # when the period began

    def closed(self, why: str) -> None:
        """One connection closed at a deadline: ``why`` is "headers" or "idle"."""
        self.counts[why] += 1
        if self._period is None:
            self._since = self._clock.seconds()
            self._period = self._clock.callLater(self.interval, self._summary, self.interval)

    def flush(self) -> None:
        """Log what is counted now, and end the period."""
        if self._period is not None and self._period.active():
            self._period.cancel()
        self._summary(self._clock.seconds() - self._since)

    def _summary(self, elapsed: float) -> None:
        """Log the counts of the period that ends (``elapsed`` seconds long)."""
        self._period = None
        counts, self.counts = self.counts, Counter()
        if not counts:
            return
        parts = ", ".join(f"{n} {WHY[why].format(**self._timeouts)}" for why, n in sorted(counts.items()))
        count = sum(counts.values())
        log.info("{label}: closed {count} connection{s} at a deadline in {elapsed:.0f} s: {parts}", label=self._label,
                 count=count, s="" if count == 1 else "s", elapsed=elapsed, parts=parts,
                 closed=dict(counts))
