"""Small parts of the job runner: a job's local items file, per-host politeness shared by all jobs, and a job's own."""

from __future__ import annotations

from typing import Any, Mapping

from twisted.internet import defer, task
from twisted.internet.defer import Deferred, DeferredLock, DeferredSemaphore
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from spiderd.core.fsutil import LaneFile
from spiderd.core.rules import AdaptiveDelay
from spiderd.feed.items import json_line
from spiderd.worker.jobs import Runner

FLUSH_AT = 256 * 1024


class ItemsFile(LaneFile):
    """A job's items as JSON lines, written on the I/O thread (in order), made durable by ``close``.

    ``open`` truncates: a job that starts again after a crash or a stop rewrites its file from scratch.
    """

    binary = False

    def __init__(self, path: str, io: Runner) -> None:
        super().__init__(path, io)
        self.count = 0
        self._buffer: list[str] = []
        self._size = 0

    def open(self) -> Deferred[None]:
        """Create (or empty) the file."""
        return self._io(self._open)

    def write(self, item: dict[str, Any]) -> None:
        """Queue one item's line; lines reach the file in batches."""
        line = json_line(item)  # as the crawler's item files: NaN and Infinity become null
        self._buffer.append(line)
        self._size += len(line)
        self.count += 1
        if self._size >= FLUSH_AT:
            self._flush()

    def close(self) -> Deferred[None]:
        """Write what is queued, fsync and close; fails if any write failed."""
        self._flush()
        return self._io(self._close)

    def discard(self) -> Deferred[None]:
        """Drop the file (a cancelled or interrupted job)."""
        self._buffer.clear()
        return self._io(self._discard)

    def _flush(self) -> None:
        if self._buffer:
            data, self._buffer, self._size = "".join(self._buffer), [], 0
            self._io(self._write, data)


class HostSlots:
    """Per-host politeness of the worker, over all jobs: at most ``limit`` requests at once per host, and
    request starts at least ``delay`` seconds apart (raised by a robots.txt Crawl-delay; ``overrides`` maps a
    host to its own (delay, limit), as ``[fetch.hosts]``).  With adaptive politeness (``adaptive``, per host
    ``adaptive_overrides``), a request released with its duration also holds the host's next start until
    ``delay_factor x`` that duration after the release, within the rule's bounds.  Idle hosts whose next start
    is due are forgotten.
    """

    def __init__(self, limit: int, delay: float = 0.0, clock: IReactorTime | None = None,
                 overrides: Mapping[str, tuple[float, int]] | None = None,
                 adaptive: AdaptiveDelay | None = None,
                 adaptive_overrides: Mapping[str, AdaptiveDelay] | None = None) -> None:
        self.limit = limit
        self.delay = delay
        self._clock = clock
        self._overrides = dict(overrides or {})
        self._adaptive = adaptive or AdaptiveDelay()
        self._adaptive_overrides = dict(adaptive_overrides or {})
        self._robots: dict[str, float] = {}
        self._slots: dict[str, DeferredSemaphore] = {}
        self._next: dict[str, float] = {}  # host -> earliest start of its next request

    def set_delay(self, host: str, delay: float) -> None:
        """Raise ``host``'s delay to ``delay`` (its robots.txt Crawl-delay)."""
        self._robots[host] = float(delay)

    def block(self, host: str, until: float) -> None:
        """Start no request to ``host`` before ``until`` (clock time: a throttling answer's Retry-After)."""
        self._next[host] = max(self._next.get(host, until), until)

    def blocked_until(self, host: str) -> float:
        """The earliest start of ``host``'s next request (0: none booked)."""
        return self._next.get(host, 0.0)

    def delay_of(self, host: str) -> float:
        """Seconds between two request starts to ``host``."""
        configured = self._overrides.get(host, (self.delay, self.limit))[0]
        return max(configured, self._robots.get(host, 0.0))

    def acquire(self, host: str) -> Deferred[Any]:
        """Fires when the host has a free slot and its turn has come (cancellable while waiting)."""
        slot = self._slots.get(host)
        if slot is None:
            slot = self._slots[host] = DeferredSemaphore(self._overrides.get(host, (0.0, self.limit))[1])
        d = slot.acquire()
        if self._clock is not None:
            d.addCallback(self._pace, host)
        return d

    def adaptive_of(self, host: str) -> AdaptiveDelay:
        """The adaptive rule of ``host``: its own, else the worker's."""
        return self._adaptive_overrides.get(host, self._adaptive)

    def _pace(self, _: Any, host: str) -> Any:
        """Book the host's next start; wait for this one's (a cancelled wait gives its slot back).  Read once
        the slot is taken, so a block set meanwhile (``block``) or an adaptive wait holds."""
        assert self._clock is not None  # (paced only with a clock)
        delay = self.delay_of(host)
        now = self._clock.seconds()
        if delay <= 0 and self._next.get(host, now) <= now:
            return None
        start = max(now, self._next.get(host, now))
        self._next[host] = start + delay
        if start <= now:
            return None
        wait = task.deferLater(self._clock, start - now, lambda: None)
        return wait.addErrback(self._cancelled, host)

    def _cancelled(self, failure: Failure, host: str) -> Failure:
        self.release(host)
        return failure

    def release(self, host: str, elapsed: float | None = None) -> None:
        """Give back a slot taken with ``acquire``; ``elapsed``: the request's duration (adaptive politeness)."""
        if elapsed is not None and self._clock is not None:
            self._hold(host, self.adaptive_of(host).wait(elapsed))
        slot = self._slots[host]
        slot.release()
        if slot.tokens == slot.limit and not slot.waiting:
            del self._slots[host]
            if self._next.get(host, 0.0) <= (self._clock.seconds() if self._clock is not None else 0.0):
                self._next.pop(host, None)

    def _hold(self, host: str, wait: float) -> None:
        """No request to ``host`` starts within ``wait`` seconds from now (an earlier booked start moves later)."""
        if wait > 0:
            assert self._clock is not None  # (held only with a clock)
            now = self._clock.seconds()
            self._next[host] = max(self._next.get(host, now), now + wait)

    def __len__(self) -> int:
        return len(self._slots)


class JobHosts:
    """One job's own per-host limits (its Scrapy settings), inside the worker's :class:`HostSlots`: at most
    ``limit`` of its requests in flight per host (CONCURRENT_REQUESTS_PER_DOMAIN; 0 = none of its own), and its
    request starts to one host ``delay`` seconds apart (DOWNLOAD_DELAY), counted from each request's actual start,
    after the worker's own slot and delay: so the larger of the two delays applies.

    ``acquire``, then ``started`` once the worker's slot is taken (or ``abandon`` if that wait was cancelled),
    then ``release`` when the request is over."""

    def __init__(self, limit: int, delay: float, clock: IReactorTime) -> None:
        self.limit = limit
        self.delay = delay
        self._clock = clock
        self._slots: dict[str, DeferredSemaphore] = {}
        self._gates: dict[str, DeferredLock] = {}  # one start at a time per host, while its delay runs
        self._last: dict[str, float] = {}  # host -> this job's last request start

    @defer.inlineCallbacks
    def acquire(self, host: str) -> Any:
        """Fires when this job may start a request to ``host`` (cancellable; a cancelled wait holds nothing)."""
        slot = self._slot(host)
        if slot is not None:
            yield slot.acquire()
        try:
            if self.delay > 0:
                gate = self._gates.setdefault(host, DeferredLock())
                yield gate.acquire()
                try:
                    wait = self._last.get(host, -self.delay) + self.delay - self._clock.seconds()
                    if wait > 0:
                        yield task.deferLater(self._clock, wait)
                except BaseException:
                    self._open(host)
                    raise
        except BaseException:
            self._free(host)
            raise

    def started(self, host: str) -> None:
        """The request starts now: the next one to ``host`` waits ``delay`` from here."""
        if self.delay > 0:
            self._last[host] = self._clock.seconds()
            self._open(host)

    def abandon(self, host: str) -> None:
        """The request never started (cancelled while waiting for the worker's slot)."""
        if self.delay > 0:
            self._open(host)
        self._free(host)

    def release(self, host: str) -> None:
        """A started request is over."""
        self._free(host)

    def _slot(self, host: str) -> DeferredSemaphore | None:
        if not self.limit:
            return None
        slot = self._slots.get(host)
        if slot is None:
            slot = self._slots[host] = DeferredSemaphore(self.limit)
        return slot

    def _open(self, host: str) -> None:
        gate = self._gates[host]
        gate.release()
        if not gate.locked and not gate.waiting:
            del self._gates[host]

    def _free(self, host: str) -> None:
        slot = self._slots.get(host)
        if slot is not None:
            slot.release()
            if slot.tokens == slot.limit and not slot.waiting:
                del self._slots[host]
