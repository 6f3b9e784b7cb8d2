"""Each job's log: the worker's lines about that job, one small file per job (Scrapyd's ``/logs/``).

A job's log says when it was accepted (and which settings it ignores), when
it started, which of its URLs failed and why, and how it ended, with its
counts.  Lines look like Scrapy's (``2026-01-01 10:00:00 [spiderd.worker]
INFO: ...``), one line each (line breaks a client put in a value are shown
as ``\\n``), every password masked (:func:`~spiderd.core.secrets.redact_text`).

Bounded: a file holds at most :data:`MAX_BYTES` (64 KiB); lines about single
URLs stop at :data:`URL_LINES_BYTES` (48 KiB), one line says so and the last
line counts what was left out, so how the job ended always fits.  Files are
``<data_dir>/worker/logs/<job id>.log`` (job ids are plain names), written on
the worker's I/O thread in order (the lines of one reactor turn in one go),
kept across restarts, and deleted with their job.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any, Iterable

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger, LogLevel, formatEvent
from twisted.python.failure import Failure

from spiderd.core.secrets import redact_text
from spiderd.core.fsutil import unlink_quietly
from spiderd.core.storage import storage_error
from spiderd.worker.jobs import Runner, safe_name

log = Logger()

MAX_BYTES = 64 * 1024  # one job's log, at most
URL_LINES_BYTES = 48 * 1024  # lines about single URLs stop here: the rest is kept for how the job ends
MAX_LINE = 2000  # characters of one line's message
LEVELS = {LogLevel.debug: "DEBUG", LogLevel.info: "INFO", LogLevel.warn: "WARNING", LogLevel.error: "ERROR",
          LogLevel.critical: "CRITICAL"}


class JobLogs:
    """The job log files of one worker; ``line`` and ``note`` are called on the reactor thread."""

    def __init__(self, directory: str, io: Runner, clock: IReactorTime) -> None:
        self.directory = directory
        self._io = io
        self._clock = clock
        self._sizes: dict[str, int] = {}  # job id -> bytes written or queued
        self._dropped: dict[str, int] = {}  # job id -> lines about single URLs left out (this run)
        self._queue: list[tuple[str, bytes]] = []
        self._flush_call: IDelayedCall | None = None

    def open(self, known: Iterable[str]) -> None:
        """At start (blocking, as the job store's load): take the logs of ``known`` jobs, delete the others."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        keep = set(known)
        self._sizes.clear()
        for name in os.listdir(self.directory):
            job_id, ext = os.path.splitext(name)
            path = os.path.join(self.directory, name)
            if ext == ".log" and job_id in keep:
                self._sizes[job_id] = os.path.getsize(path)
            else:
                unlink_quietly(path)  # a job pruned while its log's deletion was still queued

    def note(self, logger: Logger, level: LogLevel, job_id: str, fmt: str, **fields: Any) -> None:
        """Log ``fmt`` on ``logger`` and write the same line to the job's log."""
        logger.emit(level, fmt, **fields)
        self.line(job_id, formatEvent({"log_format": fmt, **fields}), level)

    def progress(self, job_id: str, text: str) -> None:
        """Queue a line of the job's progress (its stats every minute); those stop with the lines about single URLs,
        uncounted, so that a long job's log keeps room for its end."""
        if self._sizes.get(job_id, 0) < URL_LINES_BYTES:
            self.line(job_id, text)

    def line(self, job_id: str, text: str, level: LogLevel = LogLevel.info, url: bool = False,
             tail: str = "") -> None:
        """Queue one line for the job's log; ``url``: a line about a single URL (those stop first); ``tail``: lines
        of the worker's own that follow it as they are (Scrapy's stats block), passwords masked."""
        size = self._sizes.get(job_id, 0)
        if url and size >= URL_LINES_BYTES:
            self._dropped[job_id] = self._dropped.get(job_id, 0) + 1
            if self._dropped[job_id] == 1:
                self.line(job_id, f"this log holds no more lines about single URLs (its cap: "
                                  f"{URL_LINES_BYTES // 1024} KiB of them, {MAX_BYTES // 1024} KiB in all); "
                                  "the job's last line counts them")
            return
        data = (self._format(text, level) + (redact_text(tail).rstrip("\n") + "\n" if tail else "")).encode("utf-8")
        if size + len(data) > MAX_BYTES:
            return
        self._sizes[job_id] = size + len(data)
        self._queue.append((job_id, data))
        if self._flush_call is None:
            self._flush_call = self._clock.callLater(0, self.flush)

    def take_dropped(self, job_id: str) -> int:
        """How many lines about single URLs were left out since the last call (this run of the job)."""
        return self._dropped.pop(job_id, 0)

    def has(self, job_id: str) -> bool:
        """True if the job has a log (written, or on its way)."""
        return self._sizes.get(job_id, 0) > 0

    def size(self, job_id: str) -> int:
        return self._sizes.get(job_id, 0)

    def read(self, job_id: str) -> Any:
        """Fires with the job's log (bytes; empty if it has none)."""
        self.flush()
        return self._io(_read, self.path(job_id))

    def reset(self, job_id: str) -> None:
        """Start the log again (a new job under the id of an ended one)."""
        self.delete(job_id)

    def delete(self, job_id: str) -> None:
        """Drop the job's log (its job is pruned)."""
        self.flush()
        self._sizes.pop(job_id, None)
        self._dropped.pop(job_id, None)
        d = self._io(unlink_quietly, self.path(job_id))
        d.addErrback(lambda f: log.failure("Worker: deleting the log of job {id} failed", f, id=job_id))

    def flush(self) -> None:
        """Hand the queued lines to the I/O thread."""
        if self._flush_call is not None and self._flush_call.active():
            self._flush_call.cancel()
        self._flush_call = None
        if not self._queue:
            return
        batch, self._queue = self._queue, []
        d = self._io(_append, self.directory, batch)
        d.addErrback(_not_written, len(batch))

    def path(self, job_id: str) -> str:
        if not safe_name(job_id):
            raise ValueError(f"unsafe job id {job_id!r}")
        return os.path.join(self.directory, job_id + ".log")

    def _format(self, text: str, level: LogLevel) -> str:
        text = redact_text(text).replace("\r", "\\r").replace("\n", "\\n")
        if len(text) > MAX_LINE:
            text = text[:MAX_LINE] + "..."
        when = datetime.fromtimestamp(self._clock.seconds()).strftime("%Y-%m-%d %H:%M:%S")
        return f"{when} [spiderd.worker] {LEVELS.get(level, 'INFO')}: {text}\n"


def _not_written(failure: Failure, lines: int) -> None:
    """Lines the job logs lost: a full disk loses them quietly (the storage gate tells of it), else a traceback."""
    if storage_error(failure) is None:
        log.failure("Worker: writing job logs failed", failure)
    else:
        log.debug("Worker: {lines} job log lines lost: {error}", lines=lines, error=storage_error(failure))


def _append(directory: str, batch: list[tuple[str, bytes]]) -> None:
    """Append each job's lines to its file (on the I/O thread)."""
    by_job: dict[str, list[bytes]] = {}
    for job_id, data in batch:
        by_job.setdefault(job_id, []).append(data)
    for job_id, lines in by_job.items():
        fd = os.open(os.path.join(directory, job_id + ".log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            view = memoryview(b"".join(lines))
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(MAX_BYTES + 4096)
    except FileNotFoundError:
        return b""
