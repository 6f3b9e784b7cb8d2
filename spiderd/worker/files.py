"""Small parts of the job runner: a job's local items file and a job's own per-host limits (the worker's, over
all jobs, are the engine's :class:`~spiderd.engine.politeness.Politeness`)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable

from twisted.internet.defer import Deferred

from spiderd.core.fsutil import LaneFile
from spiderd.engine.hostqueue import FREED, NOW
from spiderd.core.itemline import json_line
from spiderd.worker.jobs import Runner
from spiderd.worker.parts import item_fingerprint

FLUSH_AT = 256 * 1024


class ItemsFile(LaneFile):
    """A job's items as JSON lines, written on the I/O thread (in order), made durable by ``close``.

    ``open`` truncates: a job that starts again after a crash or a stop rewrites its file from scratch.
    """

    binary = False

    def __init__(self, path: str, io: Runner) -> None:
        super().__init__(path, io)
        self.count = 0
        self.fingerprints: set[int] = set()  # of the pages whose items are in the current part (see parts.py)
        self.on_write: Callable[[], object] = lambda: None
        self._buffer: list[str] = []
        self._size = 0

    def open(self) -> Deferred[None]:
        """Create (or empty) the file."""
        return self._io(self._open)

    def write(self, item: dict[str, Any], line: str | None = None) -> None:
        """Queue one item's line (``line``: :func:`~spiderd.core.itemline.json_line` of ``item``, as the parse child
        that parsed its page encoded it; None: encoded here); lines reach the file in batches."""
        if line is None:
            line = json_line(item)  # as the crawler's item files: NaN and Infinity become null
        self._buffer.append(line)
        self._size += len(line)
        self.count += 1
        fp = item_fingerprint(item)
        if fp is not None:
            self.fingerprints.add(fp)
        if self._size >= FLUSH_AT:
            self._flush()
        self.on_write()

    def cut(self, cut: Callable[[set[int]], str]) -> Deferred[str]:
        """Everything written so far becomes a part: on the lane, the file is fsynced and closed, ``cut(its
        pages)`` renames it (and enters it in the job's ledger), and the file starts again empty; fires with the
        part's path.  A failure leaves the file closed: the writes after it fail, and so does ``close``."""
        self._flush()
        fingerprints, self.fingerprints = self.fingerprints, set()
        return self._io(self._cut, cut, fingerprints)

    def _cut(self, cut: Callable[[set[int]], str], fingerprints: set[int]) -> str:
        self._close()
        path = cut(fingerprints)
        self._open()
        return path

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
    """One job's own per-host limits (its Scrapy settings), inside the worker's politeness, sans I/O: at most
    ``limit`` of its requests in flight per host (CONCURRENT_REQUESTS_PER_DOMAIN; 0 = none of its own), and its
    request starts to one host ``delay`` seconds apart (DOWNLOAD_DELAY), counted from each request's actual start,
    after the worker's own turn for the host: so the larger of the two delays applies.

    ``gate`` says when the job may start a request to a host, ``started`` books one, ``released`` ends it."""

    def __init__(self, limit: int, delay: float) -> None:
        self.limit = limit
        self.delay = delay
        self._inflight: Counter[str] = Counter()
        self._last: dict[str, float] = {}  # host -> this job's last request start (with a delay)

    def gate(self, host: str, now: float) -> float:
        """When this job may start a request to ``host``: NOW, the time its delay ends, or FREED (at its limit)."""
        if self.limit and self._inflight[host] >= self.limit:
            return FREED
        last = self._last.get(host)
        if last is not None and last + self.delay > now:
            return last + self.delay
        return NOW

    def started(self, host: str, now: float) -> None:
        """A request to ``host`` starts now: the next one waits ``delay`` from here."""
        self._inflight[host] += 1
        if self.delay > 0:
            self._last[host] = now

    def released(self, host: str) -> None:
        """A started request to ``host`` is over."""
        self._inflight[host] -= 1
        if self._inflight[host] <= 0:
            del self._inflight[host]

    def __len__(self) -> int:
        """Hosts with a request of this job in flight."""
        return len(self._inflight)
