"""Small parts of the job runner: a job's local items file and a job's own per-host limits (the worker's, over
all jobs, are :class:`~spiderd.worker.hostslots.HostSlots`)."""

from __future__ import annotations

from typing import Any

from twisted.internet import defer, task
from twisted.internet.defer import Deferred, DeferredLock, DeferredSemaphore
from twisted.internet.interfaces import IReactorTime

from spiderd.core.fsutil import LaneFile
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


class JobHosts:
    """One job's own per-host limits (its Scrapy settings), inside the worker's :class:`~spiderd.worker.hostslots.HostSlots`: at most
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
