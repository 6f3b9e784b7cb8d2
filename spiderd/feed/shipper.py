"""The feed shipper: a service that spools finished JSON-lines feed files and ships them to the analytics host
(FTP, or a local directory) in the background, retrying until they go through.

A file is checked (:mod:`spiderd.feed.jsonl`; a target named ``*.warc.gz``: :mod:`spiderd.feed.warc`, every
record read back whole by warcio) and uploaded (:mod:`spiderd.feed.upload`) to the target its URI names
(:mod:`spiderd.core.feeduri`, which also renders the templates).  A refused file (bad JSON lines, or its final name
taken) is quarantined with a clear error.

The spool (``spool_dir``)::

    incoming/          callers may write here, so that ship()'s move is a rename
    queue/<id>.json    sidecar: target URI, original name, attempts, first seen, rename_sent
    queue/<id>.jl      the file (JSON lines, or WARC for a ``.warc.gz`` target)
    bad/<id>.*         refused files (bad JSON lines, or final name taken), with a ``.reason``

``ship()`` writes the sidecar first (temp file, fsync, rename), then moves the file in, and removes
the file before the sidecar once uploaded.  So at start: sidecar and file -> resume; a sidecar
alone -> the move never happened (ship never fired, the caller still has its file) or the upload
had finished -> removed; a file alone cannot come from this code -> quarantined, never deleted;
``*.tmp`` -> half-written, removed.  The sidecar holds the FTP password, so the spool is 0700.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from dataclasses import dataclass, replace
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core.blocking import Lane
from spiderd.core.feeduri import parse_target
from spiderd.core.fsutil import fsync_dir, fsync_file, unlink_quietly, write_atomically
from spiderd.core.lifecycle import InFlight, settled
from spiderd.core.reactors import IThreadedClock
from spiderd.core.retry import Backoff
from spiderd.core.secrets import mask_secret, redact
from spiderd.feed.errors import BadFeedError, FeedExistsError
from spiderd.feed.jsonl import validate_jsonl
from spiderd.feed.spoolview import RefusedFiles, file_rows
from spiderd.feed.warc import is_warc, validate_warc
from spiderd.feed.upload import Abort, upload

log = Logger()


# -- spool files (run in a thread) ---------------------------------------------------------------


def _write_json(path: str, record: dict[str, Any]) -> None:
    """Atomically: a temp file, fsynced, renamed over ``path``."""
    write_atomically(path, json.dumps(record).encode())


def _move(src: str, dst: str) -> None:
    """Rename, or copy then remove across filesystems."""
    try:
        os.replace(src, dst)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        shutil.copyfile(src, dst + ".tmp")
        fsync_file(dst + ".tmp")
        os.replace(dst + ".tmp", dst)
        os.unlink(src)


# -- the service ----------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Entry:
    """One spooled file."""

    id: str
    target: str
    name: str
    first_seen: float
    attempts: int = 0
    rename_sent: bool = False
    delay: float = 0.0
    warned: bool = False
    busy: bool = False
    timer: IDelayedCall | None = None
    abort: Abort | None = None
    error: str | None = None  # the last failed attempt's, without a password

    def record(self) -> dict[str, Any]:
        return {"target": self.target, "name": self.name, "attempts": self.attempts,
                "first_seen": self.first_seen, "rename_sent": self.rename_sent}


_SKIPPED = object()


class FeedShipper(Service):
    """Spools finished feed files and uploads them in the background, retrying until they go through.

    ``lane`` (default: one of its own, ``concurrency`` + 1 threads wide) runs the spooling and the
    uploads; ``clock`` (default ``reactor``) drives the retry timers and the stop deadline.
    """

    def __init__(self, reactor: IThreadedClock, spool_dir: str, *, clock: IReactorTime | None = None,
                 retry_first: float = 1.0, retry_max: float = 300.0, stop_timeout: float = 30.0, concurrency: int = 2,
                 ftp_timeout: float = 60.0, lane: Lane | None = None) -> None:
        self._reactor = reactor
        self._clock = reactor if clock is None else clock
        self.spool_dir = spool_dir
        self.incoming_dir = os.path.join(spool_dir, "incoming")
        self.queue_dir = os.path.join(spool_dir, "queue")
        self.bad_dir = os.path.join(spool_dir, "bad")
        self._retry = Backoff(retry_first, retry_max)
        self._stop_timeout = stop_timeout
        self._concurrency = concurrency
        self._ftp_timeout = ftp_timeout
        self._entries: dict[str, _Entry] = {}
        self._inflight = InFlight()
        self.ready: Deferred[None] = defer.succeed(None)  # the spool recovered (after startService)
        self._lane = lane or Lane(reactor, "feed", concurrency + 1)
        self._slots = defer.DeferredSemaphore(concurrency)
        self._names: dict[str, defer.DeferredLock] = {}  # target URI -> its uploads, one at a time
        self.shipped = 0
        self.failures = 0
        self.quarantined = 0
        self.last_error: str | None = None
        self.refused = RefusedFiles()
        self._start_refusals: list[tuple[str, str]] = []  # (stem, reason) quarantined by _recover, on the lane

    @property
    def waiting(self) -> int:
        """Files in the spool, not yet shipped."""
        return len(self._entries)

    def status(self) -> dict[str, Any]:
        """Counters for the status API, and ``files``: the refused and waiting files (see spoolview.py); no
        password shows."""
        return {"shipped": self.shipped, "waiting": self.waiting, "failures": self.failures,
                "quarantined": self.quarantined, "last_error": self.last_error,
                "files": file_rows(self._entries.values(), self.refused, self._clock.seconds())}

    def whereabouts(self) -> dict[str, str]:
        """File name (as given to ship) -> ``spooled`` (not uploaded yet) or ``refused`` (since this start)."""
        known = dict.fromkeys(self.refused.names(), "refused")
        known.update((entry.name, "spooled") for entry in self._entries.values())
        return known

    def settled(self) -> Deferred[None]:
        """Fires when the spool is recovered and no spooling or upload attempt is running (retry timers may be
        pending)."""
        if not self.ready.called:
            return settled([self.ready]).addCallback(lambda _: self._inflight.wait())
        return self._inflight.wait()

    # -- start ------------------------------------------------------------------------------------

    def startService(self) -> None:
        """Recover the spool on the lane (``ready`` fires once it is read), then resume its uploads."""
        super().startService()
        self._lane.start()
        self._slots = defer.DeferredSemaphore(self._concurrency)
        self.ready = self._lane.run(self._recover).addCallback(self._resume)

    def _resume(self, entries: list[_Entry]) -> None:
        self._entries = {e.id: e for e in entries}
        for stem, reason in self._start_refusals:
            self.refused.add(stem + ".jl", None, 0, None, reason, self._clock.seconds())
        self._start_refusals = []
        if self._entries:
            log.info("Resuming {count} spooled feed files", count=len(self._entries))
        for entry in list(self._entries.values()):
            self._attempt(entry)

    def _recover(self) -> list[_Entry]:
        """Thread: the spool's directories made, half-written files dropped, bad entries quarantined."""
        for path in (self.incoming_dir, self.queue_dir, self.bad_dir):
            os.makedirs(path, mode=0o700, exist_ok=True)
        names = set(os.listdir(self.queue_dir))
        entries = []
        for name in sorted(names):
            stem, ext = os.path.splitext(name)
            if ext == ".tmp":
                os.unlink(os.path.join(self.queue_dir, name))
            elif ext == ".json" and stem + ".jl" not in names:
                os.unlink(os.path.join(self.queue_dir, name))
            elif ext == ".json":
                entries.extend(self._load(stem))
            elif ext == ".jl" and stem + ".json" not in names:
                self._refuse_at_start(stem, "a spooled file without its sidecar (the target is unknown)")
        return sorted(entries, key=lambda e: (e.first_seen, e.id))

    def _load(self, stem: str) -> list[_Entry]:
        try:
            with open(os.path.join(self.queue_dir, stem + ".json"), encoding="utf-8") as f:
                raw = json.load(f)
            entry = _Entry(stem, raw["target"], raw["name"], float(raw["first_seen"]),
                           int(raw["attempts"]), bool(raw.get("rename_sent")))
            parse_target(entry.target)
        except (ValueError, KeyError, TypeError) as e:
            self._refuse_at_start(stem, f"unreadable sidecar: {redact(str(e))}")
            return []
        return [entry]

    def _refuse_at_start(self, stem: str, reason: str) -> None:
        self._quarantine(stem, reason)
        self.quarantined += 1
        self._start_refusals.append((stem, reason))  # into self.refused on the reactor thread (_resume)
        log.error("Spooled feed file {id} moved to {bad}: {reason}", id=stem, bad=self.bad_dir, reason=reason)

    # -- ship -------------------------------------------------------------------------------------

    def ship(self, local_path: str, target_uri: str) -> Deferred[None]:
        """Move a finished file into the spool for ``target_uri``; fires once it is there, not when uploaded.

        Fails with ValueError for a bad URI, BadFeedError (file moved to ``bad/``) for bad JSON lines.
        """
        if not self.running or not self._lane.running:
            return defer.fail(RuntimeError("the feed shipper is not running"))
        if not self.ready.called:  # the spool is still being recovered: after that, in order
            return settled([self.ready]).addCallback(lambda _: self.ship(local_path, target_uri))
        try:
            parse_target(target_uri)
        except ValueError as e:
            return defer.fail(e)
        entry = _Entry(self._new_id(), target_uri, os.path.basename(local_path), self._clock.seconds())
        inner = self._lane.run(self._spool, entry, local_path)
        inner.addCallbacks(self._accepted, self._not_accepted, callbackArgs=(entry,), errbackArgs=(entry,))
        self._inflight.track(inner)
        outer: Deferred[None] = Deferred()
        inner.chainDeferred(outer)
        return outer

    def _new_id(self) -> str:
        return f"{int(self._clock.seconds() * 1000):013d}-{os.urandom(4).hex()}"

    def _spool(self, entry: _Entry, local_path: str) -> None:
        """Thread: sidecar first, then the file; then the JSON-lines check."""
        sidecar = self._path(entry.id, ".json")
        _write_json(sidecar, entry.record())
        try:
            _move(local_path, self._path(entry.id, ".jl"))
        except OSError:
            unlink_quietly(sidecar)
            raise
        fsync_dir(self.queue_dir)
        self._check(entry)

    def _accepted(self, _: None, entry: _Entry) -> None:
        self._entries[entry.id] = entry
        log.debug("Feed {name} spooled for {target}", name=entry.name, target=redact(entry.target))
        self._attempt(entry)

    def _not_accepted(self, failure: Failure, entry: _Entry) -> Failure:
        if failure.check(BadFeedError):
            self._refused(entry, failure)
        return failure

    # -- uploads ---------------------------------------------------------------------------------

    def _attempt(self, entry: _Entry) -> None:
        entry.timer = None
        if not self.running or entry.busy:
            return
        entry.busy = True
        d = self._one_at_a_time(entry)
        d.addCallbacks(self._uploaded, self._upload_failed, callbackArgs=(entry,), errbackArgs=(entry,))
        d.addErrback(lambda f: log.failure("Feed shipper bug with {name}", f, name=entry.name))
        self._inflight.track(d)

    def _one_at_a_time(self, entry: _Entry) -> Deferred[Any]:
        """Uploads bound for one name go one after the other: FTP cannot rename without overwriting, so a
        second file for a name must find the first one there (and be refused), not race it."""
        lock = self._names.setdefault(entry.target, defer.DeferredLock())
        d = lock.run(self._slots.run, self._upload, entry)

        def forget(result: Any) -> Any:
            if not lock.locked and not lock.waiting:
                self._names.pop(entry.target, None)
            return result

        return d.addBoth(forget)

    def _upload(self, entry: _Entry) -> Deferred[Any]:
        if not self.running or not self._lane.running:
            return defer.succeed(_SKIPPED)
        entry.abort = Abort()
        return self._lane.run(self._deliver, entry, entry.abort)

    def _deliver(self, entry: _Entry, abort: Abort) -> int:
        """Thread: check, upload, then forget the spool entry (file first, sidecar last)."""
        records = self._check(entry)
        try:
            target = replace(parse_target(entry.target), tag=entry.id.rsplit("-", 1)[-1])
            upload(self._path(entry.id, ".jl"), target, timeout=self._ftp_timeout,
                   abort=abort, renamed_before=entry.rename_sent, before_rename=lambda: self._renaming(entry))
        except FeedExistsError as e:
            self._quarantine(entry.id, str(e))
            raise
        except Exception:
            _write_json(self._path(entry.id, ".json"), dict(entry.record(), attempts=entry.attempts + 1))
            raise
        os.unlink(self._path(entry.id, ".jl"))
        os.unlink(self._path(entry.id, ".json"))
        return records

    def _check(self, entry: _Entry) -> int:
        """Thread: the number of records, or quarantine and BadFeedError (the target's name says the format)."""
        check = validate_warc if is_warc(parse_target(entry.target).name) else validate_jsonl
        try:
            return check(self._path(entry.id, ".jl"))
        except BadFeedError as e:
            self._quarantine(entry.id, str(e))
            raise

    def _renaming(self, entry: _Entry) -> None:
        entry.rename_sent = True
        _write_json(self._path(entry.id, ".json"), entry.record())

    def _uploaded(self, records: Any, entry: _Entry) -> None:
        entry.busy, entry.abort = False, None
        if records is _SKIPPED:
            return
        del self._entries[entry.id]
        self.shipped += 1
        log.info("Feed {name} shipped to {target}: {records} records, {failed} failed attempts before",
                 name=entry.name, target=redact(entry.target), records=records, failed=entry.attempts)

    def _upload_failed(self, failure: Failure, entry: _Entry) -> None:
        entry.busy, entry.abort = False, None
        if failure.check(BadFeedError, FeedExistsError):
            del self._entries[entry.id]
            self._refused(entry, failure)
            return
        self.failures += 1
        entry.attempts += 1
        error = self._describe(failure, entry)
        self.last_error = f"{entry.name}: {error}"
        entry.error = error
        if not self.running:
            log.info("Feed {name} not shipped before stop ({error}); it stays spooled", name=entry.name, error=error)
            return
        entry.delay = self._retry.after(entry.delay)
        entry.timer = self._clock.callLater(entry.delay, self._attempt, entry)
        emit = log.debug if entry.warned else log.warn
        entry.warned = True
        emit("Feed {name} not shipped to {target} ({error}); spooled, retrying in {delay}s and backing off",
             name=entry.name, target=redact(entry.target), error=error, delay=entry.delay)

    def _refused(self, entry: _Entry, failure: Failure) -> None:
        self.quarantined += 1
        error = self._describe(failure, entry)
        self.last_error = f"{entry.name}: {error}"
        self.refused.add(entry.name, entry.target, entry.attempts, entry.first_seen, error, self._clock.seconds())
        log.error("Feed {name} refused, moved to {bad}, never uploaded: {error}",
                  name=entry.name, bad=self.bad_dir, error=error)

    @staticmethod
    def _describe(failure: Failure, entry: _Entry) -> str:
        """The error as text with no password in it."""
        message = failure.getErrorMessage()
        text = f"{failure.type.__name__}: {message}" if message else f"{failure.type.__name__} (connection closed?)"
        return redact(mask_secret(text, parse_target(entry.target).password))

    # -- spool paths ------------------------------------------------------------------------------

    def _path(self, stem: str, ext: str) -> str:
        return os.path.join(self.queue_dir, stem + ext)

    def _quarantine(self, stem: str, reason: str) -> None:
        """Move a spool entry into ``bad/`` with a ``.reason`` file."""
        with open(os.path.join(self.bad_dir, stem + ".reason"), "w", encoding="utf-8") as f:
            f.write(reason + "\n")
        for ext in (".jl", ".json"):
            if os.path.exists(self._path(stem, ext)):
                os.replace(self._path(stem, ext), os.path.join(self.bad_dir, stem + ext))

    # -- stop -------------------------------------------------------------------------------------

    @defer.inlineCallbacks
    def stopService(self) -> Any:
        """Wait for uploads in flight up to ``stop_timeout``, then abort them; unshipped files stay spooled."""
        super().stopService()
        for entry in self._entries.values():
            if entry.timer is not None and entry.timer.active():
                entry.timer.cancel()
            entry.timer = None
        finished = yield _within(self._clock, self._stop_timeout, self._inflight.wait())
        if not finished:
            log.warn("Feed uploads still running after {timeout}s: aborted, the files stay spooled",
                     timeout=self._stop_timeout)
            for entry in self._entries.values():
                if entry.abort is not None:
                    entry.abort.set()
            yield self._inflight.wait()
        self._lane.stop()


def _within(clock: IReactorTime, seconds: float, d: Deferred[Any]) -> Deferred[bool]:
    """Fires True when ``d`` fires, or False after ``seconds`` on ``clock`` (``d`` is left alone)."""
    result: Deferred[bool] = Deferred()

    def fire(value: bool) -> None:
        if not result.called:
            result.callback(value)

    timer = clock.callLater(seconds, fire, False)

    def done(_: Any) -> None:
        if timer.active():
            timer.cancel()
        fire(True)

    d.addBoth(done)
    return result
