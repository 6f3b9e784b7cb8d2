"""Small parts of the job runner: a job's local items file, and per-host request slots shared by all jobs."""

from __future__ import annotations

import json
import os
from typing import Any

from twisted.internet.defer import Deferred, DeferredSemaphore

from .jobs import Runner, fsync_dir

FLUSH_AT = 256 * 1024


class ItemsFile:
    """A job's items as JSON lines, written on the I/O thread (in order), made durable by ``close``.

    ``open`` truncates: a job that starts again after a crash or a stop rewrites its file from scratch.
    """

    def __init__(self, path: str, io: Runner) -> None:
        self.path = path
        self.count = 0
        self._io = io
        self._buffer: list[str] = []
        self._size = 0
        self._file: Any = None
        self._error: BaseException | None = None

    def open(self) -> Deferred[None]:
        """Create (or empty) the file."""
        return self._io(self._open)

    def write(self, item: dict[str, Any]) -> None:
        """Queue one item's line; lines reach the file in batches."""
        line = json.dumps(item, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
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

    # -- on the I/O thread ------------------------------------------------------------------------------------

    def _open(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._file = open(self.path, "w", encoding="utf-8")

    def _write(self, data: str) -> None:
        try:
            self._file.write(data)
        except Exception as e:  # remembered, raised by close
            self._error = self._error or e

    def _close(self) -> None:
        if self._file is None:
            return
        try:
            if self._error is not None:
                raise self._error
            self._file.flush()
            os.fsync(self._file.fileno())
        finally:
            self._file.close()
            self._file = None
        fsync_dir(os.path.dirname(self.path))

    def _discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class HostSlots:
    """At most ``limit`` requests at once per host, over all jobs; idle hosts are forgotten."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._slots: dict[str, DeferredSemaphore] = {}

    def acquire(self, host: str) -> Deferred[Any]:
        """Fires when the host has a free slot (cancellable while waiting)."""
        slot = self._slots.get(host)
        if slot is None:
            slot = self._slots[host] = DeferredSemaphore(self.limit)
        return slot.acquire()

    def release(self, host: str) -> None:
        """Give back a slot taken with ``acquire``."""
        slot = self._slots[host]
        slot.release()
        if slot.tokens == slot.limit and not slot.waiting:
            del self._slots[host]

    def __len__(self) -> int:
        return len(self._slots)
