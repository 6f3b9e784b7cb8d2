"""The reactor's lag: how late a timer runs, the figure that says whether something blocks the reactor.

A call is scheduled every ``interval`` seconds; its lag is how much later than
due it ran.  Anything that holds the reactor (a blocking call, a long parse, a
big write) shows as lag, and every fetch, timeout and API answer waits as long.
The API's status gives the median, p99 and maximum over the last ``window``
seconds (``"reactor"``), and ``/metrics`` a histogram of every sample
(``spiderd_reactor_lag_seconds``).
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime

SAMPLE_INTERVAL = 0.05  # seconds between two samples
WINDOW = 10.0  # seconds the status summarises


class ReactorLag:
    """Samples the lag of ``clock``'s timers; ``observe`` (optional) gets every sample in seconds."""

    def __init__(self, clock: IReactorTime, interval: float = SAMPLE_INTERVAL, window: float = WINDOW,
                 observe: Callable[[float], None] | None = None) -> None:
        self._clock = clock
        self.interval = interval
        self.window = window
        self._observe = observe
        self._samples: deque[tuple[float, float]] = deque(maxlen=int(window / interval) + 1)
        self._call: IDelayedCall | None = None
        self._due = 0.0

    def start(self) -> None:
        if self._call is None:
            self._schedule(self._clock.seconds())

    def stop(self) -> None:
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()

    def _schedule(self, now: float) -> None:
        self._due = now + self.interval
        self._call = self._clock.callLater(self.interval, self._tick)

    def _tick(self) -> None:
        now = self._clock.seconds()
        lag = max(0.0, now - self._due)
        self._samples.append((now, lag))
        if self._observe is not None:
            self._observe(lag)
        self._schedule(now)

    def summary(self) -> dict[str, float | int]:
        """Median, p99 and maximum lag in milliseconds over the last ``window`` seconds, and the sample count."""
        since = self._clock.seconds() - self.window
        lags = sorted(lag for at, lag in self._samples if at >= since)
        if not lags:
            return {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0, "samples": 0}

        def ms(q: float) -> float:
            return round(lags[min(len(lags) - 1, int(q * len(lags)))] * 1000, 1)

        return {"p50_ms": ms(0.5), "p99_ms": ms(0.99), "max_ms": round(lags[-1] * 1000, 1), "samples": len(lags)}
