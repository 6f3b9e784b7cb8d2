"""Items as JSON-lines files in the data directory, rotated by count.

A file is written as ``<name>.jl.part`` and renamed to ``<name>.jl`` when it
holds ``rotate_count`` items or the service stops, so whatever picks up
``*.jl`` files (the FTP shipper, a Spark job) never sees half a file.  Lines
are UTF-8 JSON objects, one per line; writes happen in batches on one thread
of their own, never on the reactor thread.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Callable

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.threadpool import ThreadPool

log = Logger()


class ItemWriter(Service):
    """``write(item)`` fires once the item's line is in a file (a batch at most ``flush_interval`` later)."""

    def __init__(
        self,
        reactor: Any,
        directory: str,
        rotate_count: int = 10000,
        flush_interval: float = 0.5,
        batch_size: int = 500,
        on_rotate: Callable[[str], Any] | None = None,
    ) -> None:
        self._reactor = reactor
        self.directory = directory
        self._rotate_count = rotate_count
        self._flush_interval = flush_interval
        self._batch_size = batch_size
        self._on_rotate = on_rotate
        self._queue: list[tuple[dict[str, Any], Deferred[None]]] = []
        self._timer: Any = None
        self._threads = ThreadPool(1, 1, name="spiderd-items")
        self._writing: Deferred[None] = defer.succeed(None)
        self._file: Any = None
        self._path = ""
        self._in_file = 0
        self._serial = 0
        self.written = 0
        self.files: list[str] = []

    def startService(self) -> None:
        super().startService()
        os.makedirs(self.directory, exist_ok=True)
        for path in recover_partial_files(self.directory):
            self._rotated(path)
        self._threads.start()

    def write(self, item: dict[str, Any]) -> Deferred[None]:
        """Queue one item."""
        if not self.running:
            return defer.fail(RuntimeError("the item writer is stopped"))
        d: Deferred[None] = Deferred()
        self._queue.append((item, d))
        if len(self._queue) >= self._batch_size:
            self._flush()
        elif self._timer is None:
            self._timer = self._reactor.callLater(self._flush_interval, self._flush)
        return d

    def _flush(self) -> Deferred[None]:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        batch, self._queue = self._queue, []
        if batch:
            self._writing.addCallback(lambda _: self._write_batch(batch))
        return self._writing

    def _write_batch(self, batch: list[tuple[dict[str, Any], Deferred[None]]]) -> Deferred[None]:
        d = deferToThreadPool(self._reactor, self._threads, self._write_lines, [item for item, _ in batch])
        d.addCallbacks(lambda rotated: self._written(batch, rotated), lambda f: self._failed(batch, f))
        return d

    def _written(self, batch: list[tuple[dict[str, Any], Deferred[None]]], rotated: list[str]) -> None:
        self.written += len(batch)
        for path in rotated:
            self._rotated(path)
        for _, d in batch:
            d.callback(None)

    def _failed(self, batch: list[tuple[dict[str, Any], Deferred[None]]], failure: Any) -> None:
        log.failure("Writing {count} items failed", failure, count=len(batch))
        for _, d in batch:
            d.errback(failure)

    def _rotated(self, path: str) -> None:
        self.files.append(path)
        log.info("Items file complete: {path}", path=path)
        if self._on_rotate is not None:
            self._on_rotate(path)

    # -- the writer thread ------------------------------------------------------------

    def _write_lines(self, items: list[dict[str, Any]]) -> list[str]:
        rotated = []
        for item in items:
            if self._file is None:
                self._open()
            self._file.write(json_line(item))
            self._in_file += 1
            if self._in_file >= self._rotate_count:
                rotated.append(self._close())
        if self._file is not None:
            self._file.flush()
        return rotated

    def _open(self) -> None:
        self._serial += 1
        stamp = time.strftime("%Y-%m-%dT%H-%M-%S", time.gmtime())
        self._path = os.path.join(self.directory, f"items-{stamp}-{os.getpid()}-{self._serial:05d}.jl")
        self._file = open(self._path + ".part", "w", encoding="utf-8")
        self._in_file = 0

    def _close(self) -> str:
        self._file.close()
        self._file = None
        os.replace(self._path + ".part", self._path)
        return self._path

    def _close_if_open(self) -> list[str]:
        return [self._close()] if self._file is not None and self._in_file else []

    # -- stopping -----------------------------------------------------------------------

    @defer.inlineCallbacks
    def stopService(self) -> Any:
        yield self._flush()
        super().stopService()
        rotated = yield deferToThreadPool(self._reactor, self._threads, self._close_if_open)
        for path in rotated:
            self._rotated(path)
        self._threads.stop()


def json_line(item: dict[str, Any]) -> str:
    """One JSON line; NaN and Infinity (not JSON: Spark marks the record corrupt) become null."""
    try:
        return _dumps(item)
    except ValueError as e:
        if "Out of range float" not in str(e):
            raise
        return _dumps(_finite(item))


def _dumps(item: Any) -> str:
    return json.dumps(item, ensure_ascii=False, separators=(",", ":"), default=str, allow_nan=False) + "\n"


def _finite(value: Any) -> Any:
    """``value`` with non-finite floats replaced: null as values, their name as dict keys."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {(str(k) if isinstance(k, float) and not math.isfinite(k) else k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def recover_partial_files(directory: str) -> list[str]:
    """Complete the ``.part`` files a killed process left: cut a torn last line, then rename."""
    recovered = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".jl.part"):
            continue
        part = os.path.join(directory, name)
        with open(part, "rb+") as f:
            data = f.read()
            f.truncate(data.rfind(b"\n") + 1)
        final = part[: -len(".part")]
        if os.path.getsize(part):
            os.replace(part, final)
            recovered.append(final)
            log.info("Recovered items file {path} from a previous run", path=final)
        else:
            os.unlink(part)
    return recovered
