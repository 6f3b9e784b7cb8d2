"""WARC files of fetched answers, written off the reactor and rotated like the items files.

The queue, the groups and the file names are :mod:`spiderd.feed.rotated`'s.  A file is written as
``<name>.warc.gz.part`` (a ``warcinfo`` record first, then a request and a response record
per answer, each its own gzip member) and renamed to ``<name>.warc.gz`` once it holds ``rotate_count`` answers
or ``rotate_bytes`` bytes, or the writer stops; ``on_rotate(path)`` is then told (the worker ships it with the
feed shipper).  Answers go out in groups on a lane of one thread (in order): their records are appended and
fsynced, then their Deferreds fire, so a caller that waits before recording a URL done never loses an answer
(a crash in between archives it again when the URL is fetched again: WARC readers take duplicates).  A ``.part``
left by a killed run is cut after its last whole record and completed at the next start.
"""

from __future__ import annotations

import os
from typing import IO, Any, Callable

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core.blocking import Lane
from spiderd.core.fsutil import LaneFile, fsync_dir, unlink_quietly
from spiderd.core.reactors import IThreadedClock
from spiderd.feed import warc
from spiderd.feed.rotated import PART, Pending, RotatedFiles

log = Logger()


class WarcWriter(RotatedFiles):
    """``write(result)`` fires once the request and response records of a FetchResult are on disk.

    ``ready`` fires once the ``.part`` files of a previous run are settled, and fails (a start failure, as the
    feed shipper's) if they cannot be."""

    name = "warc"  # type: ignore[assignment]  # Service declares it None
    what = label = "WARC"

    def __init__(self, reactor: IThreadedClock, directory: str, lane: Lane | None = None, *, rotate_count: int = 10000,
                 rotate_bytes: int = 1 << 30, flush_interval: float = 0.5, batch_size: int = 200,
                 prefix: str = "spiderd", on_rotate: Callable[[str], Any] | None = None,
                 rotate_seconds: float | None = None, rotate_idle: float | None = None) -> None:
        warc.require()
        super().__init__(reactor, directory, lane or Lane(reactor, "warc"),
                         flush_interval=flush_interval, batch_size=batch_size, on_rotate=on_rotate,
                         rotate_seconds=rotate_seconds, rotate_idle=rotate_idle)
        self._rotate_count = rotate_count
        self._rotate_bytes = rotate_bytes
        self._prefix = prefix
        # the lane's thread only:
        self._file: Any = None
        self._path = ""
        self._in_file = 0

    def write(self, result: Any) -> Deferred[None]:
        """Queue the records of one FetchResult (one with an HTTP answer)."""
        return self._enqueue(result)

    def flush(self) -> Deferred[Any]:
        """Write what is queued now; fires once it is on disk."""
        return self._flush()

    def _is_open(self) -> bool:
        return self._file is not None

    def _complete_current(self) -> Deferred[Any]:
        return self._lane.run(self._close_current).addCallback(self._completed)

    def _complete_open(self) -> Deferred[Any]:
        self._writing.addCallback(lambda _: self._lane.run(self._close_current))
        self._writing.addCallback(self._completed)
        self._writing.addErrback(lambda f: log.failure("Completing a WARC file failed", f))
        return self._writing

    def _commit(self, group: list[Pending]) -> Deferred[Any]:
        d: Deferred[Any] = self._lane.run(self._append_group, [result for result, _ in group])
        return d.addCallbacks(lambda done: self._committed(done, group), lambda f: self._failed(f, group))

    def _committed(self, completed: list[str], group: list[Pending]) -> None:
        self.written += len(group)
        self._completed(completed)
        for _, d in group:
            d.callback(None)

    def _failed(self, failure: Failure, group: list[Pending]) -> None:
        log.failure("Writing {count} WARC answers failed; the file is left for the next start to cut", failure,
                    count=len(group))
        for _, d in group:
            d.errback(failure)

    def _settle_previous(self) -> Deferred[list[str]]:
        return self._lane.run(self._settle_parts)

    # -- the lane's thread --------------------------------------------------------------------------

    def _append_group(self, results: list[Any]) -> list[str]:
        """Append each answer's records (rotating as the limits say), fsync; the files completed."""
        completed = []
        try:
            for result in results:
                if self._file is None:
                    self._create()
                self._file.write(warc.answer_records(result))
                self._in_file += 1
                if self._in_file >= self._rotate_count or self._file.tell() >= self._rotate_bytes:
                    completed.extend(self._close_current())
            if self._file is not None:
                self._file.flush()
                os.fsync(self._file.fileno())
        except BaseException:
            self._abandon()
            raise
        return completed

    def _create(self) -> None:
        name = self._next_name(self._prefix, warc.EXTENSION, "%Y%m%d%H%M%S")
        os.makedirs(self.directory, exist_ok=True)
        self._path = os.path.join(self.directory, name)
        self._file = open(self._path + PART, "xb")
        self._in_file = 0
        self._file.write(warc.warcinfo_record(name))

    def _close_current(self) -> list[str]:
        """Complete the open file: fsync, close, rename; [its final name], or [] if none is open."""
        if self._file is None:
            return []
        f, self._file = self._file, None
        try:
            f.flush()
            os.fsync(f.fileno())
        finally:
            f.close()
        os.replace(self._path + PART, self._path)
        fsync_dir(self.directory)
        return [self._path]

    def _abandon(self) -> None:
        if self._file is not None:
            f, self._file = self._file, None
            try:
                f.close()
            except OSError:
                pass

    def _settle_parts(self) -> list[str]:
        """Cut each ``.warc.gz.part`` of a previous run after its last whole record and complete it."""
        if not os.path.isdir(self.directory):
            return []
        completed = []
        for name in sorted(os.listdir(self.directory)):
            part = os.path.join(self.directory, name)
            if not name.endswith(warc.EXTENSION + PART):
                continue
            if warc.cut_torn(part) <= 1:  # its warcinfo record at most: nothing was archived in it
                unlink_quietly(part)
                continue
            os.replace(part, part[: -len(PART)])
            fsync_dir(self.directory)
            log.info("Recovered WARC file {path} from a previous run", path=part[: -len(PART)])
            completed.append(part[: -len(PART)])
        return completed


class JobWarc(LaneFile):
    """A worker job's answers as one WARC file (``<job id>.warc.gz``), written on the job's I/O thread in order;
    ``open`` truncates (a job run again rewrites it), ``close`` makes it durable.  Its feed name:
    :func:`warc_uri`."""

    def __init__(self, path: str, io: Callable[..., Deferred[Any]]) -> None:
        warc.require()
        super().__init__(path, io)
        self.name = os.path.basename(path)  # the file's name in its warcinfo record: set to its name as shipped

    def open(self) -> Deferred[None]:
        return self._io(self._open)

    def write(self, result: Any) -> None:
        """Queue the records of one FetchResult with an HTTP answer."""
        self._io(self._write, result)

    def close(self) -> Deferred[None]:
        """fsync and close; fails if any write failed."""
        return self._io(self._close)

    def discard(self) -> Deferred[None]:
        return self._io(self._discard)

    def _opened(self, file: IO[Any]) -> None:
        file.write(warc.warcinfo_record(self.name))

    def _encode(self, result: Any) -> bytes:
        return warc.answer_records(result)


def warc_uri(feed_uri: str) -> str:
    """The WARC file's URI beside a job's feed: its ``.jl`` (``.jsonl``, ``.json``) name ending as ``.warc.gz``."""
    for suffix in (".jl", ".jsonl", ".json"):
        if feed_uri.endswith(suffix):
            return feed_uri[: -len(suffix)] + warc.EXTENSION
    return feed_uri + warc.EXTENSION
