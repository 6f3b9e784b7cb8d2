"""Items as JSON-lines files in the data directory, committed together with the pool, rotated by count and by
time (``rotate_seconds`` after a file's first line, ``rotate_idle`` after its last: :mod:`spiderd.feed.rotated`).

A file is written as ``<name>.jl.part`` and renamed to ``<name>.jl`` when it
holds ``rotate_count`` items, is old or idle, or the service stops, so whatever picks up
``*.jl`` files (the FTP shipper, a Spark job) never sees half a file.  Lines
are UTF-8 JSON objects, one per line, written on the writer's lane (one thread, in order); the queue,
the groups and the file names are :mod:`spiderd.feed.rotated`'s.

Exactly once, with the pool as the source of truth.  Items go out in groups:
a group's lines are appended and fsynced, then the statuses that depend on
them (the URLs whose pages gave the items) and the file's new length are
recorded in the pool in one atomic write, ``set_statuses(statuses,
checkpoint)``; only then do the items' Deferreds fire.  So the pool counts a
URL done only once its line is on disk, and its checkpoint says which prefix
of each file is committed.  A ``kill -9`` (or a power cut) at any moment
leaves a ``.part`` file whose lines past the checkpoint belong to URLs the pool
does not count done, which will be fetched again: the next start cuts the file
to its checkpoint and completes it.  A file's checkpoint is set to 0 before
its first line and dropped just before its rename, so a ``.part`` file the pool
has no checkpoint for is empty, or complete, or was left by a spiderd without
checkpoints: it keeps its whole lines.  Any error while a group is written or
recorded abandons the file as it is (the next start settles it the same way).
"""

from __future__ import annotations

import os
from typing import IO, Any, Callable, Iterable

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.contracts.pool import ICheckpoints
from spiderd.core.blocking import Lane
from spiderd.core.conditional import Validators
from spiderd.core.fsutil import fsync_dir, unlink_quietly
from spiderd.core.itemline import json_line
from spiderd.core.storage import storage_error
from spiderd.core.reactors import IThreadedClock
from spiderd.feed.rotated import PART, Pending, RotatedFiles

log = Logger()

# (url, code[, reason[, validators]]): as ICheckpoints.set_statuses takes
Status = tuple[str, int] | tuple[str, int, str | None] | tuple[str, int, str | None, Validators | None]


class ItemWriter(RotatedFiles):
    """``write(item, statuses)`` fires once the item's line is on disk and ``statuses`` are recorded with it.

    ``pool`` (its ICheckpoints) records the statuses and the checkpoints; without
    one, lines are only made durable and nothing is recorded.  ``ready`` fires
    once the files of a previous run are settled (the crawl starts after it).
    ``lane`` (default: one of its own) does the file work.
    """

    name = "items"  # type: ignore[assignment]  # Service declares it None
    what, label = "item", "Items"

    def __init__(
        self,
        reactor: IThreadedClock,
        directory: str,
        rotate_count: int = 10000,
        flush_interval: float = 0.5,
        batch_size: int = 500,
        on_rotate: Callable[[str], Any] | None = None,
        pool: ICheckpoints | None = None,
        lane: Lane | None = None,
        rotate_seconds: float | None = None,
        rotate_idle: float | None = None,
    ) -> None:
        super().__init__(reactor, directory, lane or Lane(reactor, "items"), flush_interval=flush_interval,
                         batch_size=batch_size, on_rotate=on_rotate, rotate_seconds=rotate_seconds,
                         rotate_idle=rotate_idle)
        self._rotate_count = rotate_count
        self._pool = pool
        self._file: IO[bytes] | None = None  # the open .part file (used on the lane's thread only)
        self._path = ""  # its final name
        self._in_file = 0  # committed lines in it

    def startService(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        super().startService()

    def _settle_failed(self, failure: Failure) -> None:
        log.failure("Settling the items files of a previous run failed; they stay as they are", failure)
        # the crawl may start: those files' URLs are not done, or their lines are kept

    def write(self, item: dict[str, Any], statuses: Iterable[Status] = (), line: str | None = None) -> Deferred[None]:
        """Queue one item and the statuses to record with its line (``line``: :func:`json_line` of ``item``, as the
        parse child that parsed its page encoded it; None: encoded on the lane)."""
        return self._enqueue((item if line is None else line, list(statuses)))

    # -- one group ----------------------------------------------------------------------

    @defer.inlineCallbacks
    def _commit(self, group: list[Pending]) -> Any:
        """Write ``group`` (into as many files as rotation asks) and record it; each item's Deferred fires."""
        while group:
            if self._file is None and not (yield self._open(group)):
                return
            room = self._rotate_count - self._in_file
            yield self._commit_part(group[:room])
            group = group[room:]
            if self._file is not None and self._in_file >= self._rotate_count:
                yield self._rotate()

    @defer.inlineCallbacks
    def _open(self, group: list[Pending]) -> Any:
        """A new file, with its checkpoint at 0; False (the group failed) if that cannot be done."""
        try:
            yield self._in_thread(self._create)
            if self._pool is not None:
                yield self._pool.set_statuses((), checkpoint=(self._checkpoint, 0))
        except Exception:
            failure = Failure()
            yield self._abandon()
            yield self._in_thread(unlink_quietly, self._path + PART)  # still empty: nothing to settle
            _fail(group, failure, "Opening an items file failed")
            return False
        return True

    @defer.inlineCallbacks
    def _commit_part(self, group: list[Pending]) -> Any:
        try:
            length = yield self._in_thread(self._append, [item for (item, _), _ in group])
            if self._pool is not None:
                statuses = [status for (_, some), _ in group for status in some]
                yield self._pool.set_statuses(statuses, checkpoint=(self._checkpoint, length))
        except Exception:
            failure = Failure()
            yield self._abandon()
            _fail(group, failure, "Writing {count} items failed; the file is left for the next start to settle")
            return
        self._in_file += len(group)
        self.written += len(group)
        for _, d in group:
            d.callback(None)

    @defer.inlineCallbacks
    def _rotate(self) -> Any:
        """Complete the open file: close it, drop its checkpoint, rename it."""
        yield self._in_thread(self._close)
        if self._pool is not None:
            yield self._drop_checkpoint(self._checkpoint)
        final = yield self._in_thread(finish_part, self._path + PART)
        self._completed([final] if final is not None else [])

    def _is_open(self) -> bool:
        return self._file is not None

    @defer.inlineCallbacks
    def _complete_current(self) -> Any:
        if self._file is not None:
            yield self._rotate()

    @defer.inlineCallbacks
    def _abandon(self) -> Any:
        """Leave the open file as it is (its checkpoint says what counts) and go on with a new one."""
        try:
            yield self._in_thread(self._close)
        except Exception:
            log.failure("Closing items file {path} failed", path=self._path + PART)
        self._file = None

    @property
    def _checkpoint(self) -> str:
        return checkpoint_name(self._path)

    def _drop_checkpoint(self, name: str) -> Deferred[None]:
        assert self._pool is not None  # (called only with one)
        d = self._pool.drop_checkpoint(name)
        return d.addErrback(lambda f: log.failure("Dropping checkpoint {name} failed (harmless)", f, name=name))

    # -- the writer thread ------------------------------------------------------------

    def _create(self) -> None:
        self._path = os.path.join(self.directory, self._next_name("items", ".jl", "%Y-%m-%dT%H-%M-%S"))
        self._file = open(self._path + PART, "xb")
        self._in_file = 0
        fsync_dir(self.directory)  # the file exists before any checkpoint names it

    def _append(self, items: list[dict[str, Any] | str]) -> int:
        """Append the items' lines (a str is one already), make them durable; the file's length."""
        assert self._file is not None  # made by _create
        self._file.write("".join(item if isinstance(item, str) else json_line(item) for item in items).encode("utf-8"))
        self._file.flush()
        os.fsync(self._file.fileno())
        return int(self._file.tell())

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # -- starting and stopping ----------------------------------------------------------

    @defer.inlineCallbacks
    def _settle_previous(self) -> Any:
        """Cut each ``.part`` file of a previous run to its checkpoint, then complete it; the files completed."""
        completed = []
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            if not name.endswith(".jl" + PART) or path == self._path + PART:
                continue
            checkpoint = checkpoint_name(path[: -len(PART)])
            committed = (yield self._pool.checkpoint(checkpoint)) if self._pool is not None else None
            yield self._in_thread(cut_part, path, committed)
            if committed is not None:
                yield self._drop_checkpoint(checkpoint)
            final = yield self._in_thread(finish_part, path)
            if final is not None:
                log.info("Recovered items file {path} from a previous run", path=final)
                completed.append(final)
        return completed

    @defer.inlineCallbacks
    def _complete_open(self) -> Any:
        if self._file is not None:
            yield self._rotate()
        completed = yield self._settle_previous()  # files abandoned on errors, if the pool answers now
        self._completed(completed)


def _fail(group: list[Pending], failure: Failure, message: str) -> None:
    if storage_error(failure) is None:  # a full disk fails every group: the storage gate tells of it once
        log.failure(message, failure, count=len(group))
    for _, d in group:
        d.errback(failure)


def checkpoint_name(path: str) -> str:
    """The pool checkpoint of the items file ``path`` (its final name)."""
    return "items:" + os.path.basename(path)


def cut_part(part: str, committed: int | None) -> None:
    """Cut ``part`` to ``committed`` bytes (None: just after its last whole line), durably."""
    with open(part, "rb+") as f:
        data = f.read()
        end = data.rfind(b"\n") + 1 if committed is None else committed
        if end > len(data):
            log.warn("Items file {path} is shorter ({size} bytes) than its checkpoint ({end})", path=part,
                     size=len(data), end=end)
        elif end < len(data):
            log.info("Items file {path}: {dropped} bytes past the last commit dropped (their URLs are fetched again)",
                     path=part, dropped=len(data) - end)
            f.truncate(end)
        os.fsync(f.fileno())


def finish_part(part: str) -> str | None:
    """Rename a settled ``part`` to its final name (removed instead if empty); the final name, or None."""
    final = part[: -len(PART)]
    if os.path.getsize(part):
        os.replace(part, final)
        fsync_dir(os.path.dirname(part) or ".")
        return final
    unlink_quietly(part)
    return None
