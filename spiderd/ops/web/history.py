"""The last hour in memory, a sample every 10 s of pages fetched, pages/min and the queue size, and the last
24 hours at a coarser step (a sample every 5 min): what the status page's chart draws."""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from twisted.internet import defer, task
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

log = Logger()


class History:
    """Samples ``pages()`` and ``queue()`` every ``interval`` seconds of ``clock``; keeps the last ``size``.

    ``rate(window)`` is pages/min over the last ``window`` seconds (or since
    the start, when younger), from the samples and the counter now.
    """

    def __init__(self, clock: IReactorTime, pages: Callable[[], int], queue: Callable[[], defer.Deferred[int]],
                 interval: float = 10.0, size: int = 360, day_every: int = 30, day_size: int = 288) -> None:
        self._clock = clock
        self._pages = pages
        self._queue = queue
        self.interval = interval
        self.samples: deque[dict[str, Any]] = deque(maxlen=size)
        self.day: deque[dict[str, Any]] = deque(maxlen=day_size)  # every day_every-th sample: 24 h at 5 min
        self.day_every = day_every
        self._taken = 0
        self._start = (clock.seconds(), 0)
        self._sampling = False
        self._loop = task.LoopingCall(self.sample)
        self._loop.clock = clock

    def start(self) -> None:
        self._start = (self._clock.seconds(), self._pages())
        self._loop.start(self.interval, now=False).addErrback(lambda f: log.failure("history sampler", f))

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def sample(self) -> None:
        """Take one sample (skipped while the previous one still waits for the queue size)."""
        if self._sampling:
            return
        self._sampling = True
        d = defer.maybeDeferred(self._queue)
        d.addCallback(self._record)
        d.addErrback(lambda f: log.failure("Sampling the queue size", f))
        d.addBoth(self._sampled)

    def _sampled(self, _: Any) -> None:
        self._sampling = False

    def _record(self, queue: int) -> None:
        now, pages = self._clock.seconds(), self._pages()
        rate = self.rate(60.0, now, pages)
        self.samples.append({"t": now, "pages": pages, "pages_per_min": round(rate, 2), "queue": queue})
        self._taken += 1
        if self._taken % self.day_every == 0:
            step = self.interval * self.day_every
            self.day.append({"t": now, "pages": pages, "pages_per_min": round(self.rate(step, now, pages), 2),
                             "queue": queue})

    def rate(self, window: float, now: float | None = None, pages: int | None = None) -> float:
        """Pages per minute over the last ``window`` seconds (since the start if that is later)."""
        now = self._clock.seconds() if now is None else now
        pages = self._pages() if pages is None else pages
        since, base = self._start
        if since < now - window:  # older than the window: from the oldest sample inside it (or the latest one)
            inside = next((s for s in self.samples if s["t"] >= now - window), None)
            point = inside or (self.samples[-1] if self.samples else None)
            if point is not None:
                since, base = point["t"], point["pages"]
        elapsed = now - since
        return max(0.0, (pages - base) * 60.0 / elapsed) if elapsed > 0 else 0.0

    def series(self) -> dict[str, Any]:
        """``GET /api/history``."""
        return {"interval": self.interval, "now": self._clock.seconds(), "started": self._start[0],
                "samples": list(self.samples), "day_interval": self.interval * self.day_every, "day": list(self.day)}
