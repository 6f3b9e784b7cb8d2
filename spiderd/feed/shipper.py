"""The feed shipper: a service that spools finished feed files and ships them to the analytics host (FTP, FTPS,
SFTP, or a local directory) in the background, retrying until they go through, and marks complete partitions.

A file is checked (:mod:`spiderd.feed.jsonl`; a target named ``*.warc.gz``: :mod:`spiderd.feed.warc`, every
record read back whole by warcio; ``*.parquet``: :mod:`spiderd.feed.parquet`, every row group read back) and
uploaded (:mod:`spiderd.feed.upload`) to the target its URI names (:mod:`spiderd.core.feeduri`, which also renders
the templates).  A refused file (bad JSON lines, or its final name taken) is quarantined with a clear error.  A
host whose certificate or host key does not check (:class:`~spiderd.feed.errors.FeedTrustError`) keeps the file
spooled, says so at error level and retries at the longest back-off.  Partitions and their ``_SUCCESS`` marker are
:mod:`spiderd.feed.partitions`'.

The spool on disk, and how a crash at any point is recovered, is :mod:`spiderd.feed.spool`'s.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer, task
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.config.sections import FeedSection
from spiderd.core.blocking import Lane
from spiderd.core.feeduri import parse_target
from spiderd.core.lifecycle import InFlight, settled
from spiderd.core.reactors import IThreadedClock
from spiderd.core.retry import Backoff
from spiderd.core.secrets import mask_secret, redact
from spiderd.feed.errors import BadFeedError, FeedExistsError, FeedTrustError
from spiderd.feed.parquet import is_parquet, validate_parquet
from spiderd.feed.partitions import Partitions, partition_of, write_marker
from spiderd.feed.jsonl import validate_jsonl
from spiderd.feed.spool import FeedSpool, SpoolEntry
from spiderd.feed.spoolview import RefusedFiles, file_rows
from spiderd.feed.warc import is_warc, validate_warc
from spiderd.feed.transport import Abort, TransportOptions
from spiderd.feed.trust import check_trust
from spiderd.feed.upload import upload

log = Logger()

_SKIPPED = object()
PARTITION_CHECK = 60.0  # seconds between two looks for partitions to close


class FeedShipper(Service):
    """Spools finished feed files and uploads them in the background, retrying until they go through.

    ``lane`` (default: one of its own, ``concurrency`` + 1 threads wide) runs the spooling and the
    uploads; ``clock`` (default ``reactor``) drives the retry timers and the stop deadline.  ``transport`` says
    whom to trust (FTPS certificates, SFTP host keys); ``probe`` names the FTPS and SFTP targets to check at start:
    one whose certificate or host key does not check fails the start (``ready``).
    """

    def __init__(self, reactor: IThreadedClock, spool_dir: str, *, clock: IReactorTime | None = None,
                 retry_first: float = 1.0, retry_max: float = 300.0, stop_timeout: float = 30.0, concurrency: int = 2,
                 ftp_timeout: float = 60.0, transport: TransportOptions | None = None, probe: tuple[str, ...] = (),
                 partition_grace: float = 300.0, lane: Lane | None = None) -> None:
        self._reactor = reactor
        self._clock = reactor if clock is None else clock
        self.spool = FeedSpool(spool_dir)
        self.spool_dir, self.incoming_dir = spool_dir, self.spool.incoming_dir
        self.queue_dir, self.bad_dir = self.spool.queue_dir, self.spool.bad_dir
        self._retry = Backoff(retry_first, retry_max)
        self._stop_timeout = stop_timeout
        self._concurrency = concurrency
        self._transport = transport or TransportOptions(timeout=ftp_timeout)
        self._probe = probe
        self._entries: dict[str, SpoolEntry] = {}
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
        self.partitions = Partitions(spool_dir, partition_grace)
        self._marking = False
        self._marker_abort = Abort()
        self._marker_check = task.LoopingCall(self._check_partitions_logged)
        self._marker_check.clock = self._clock

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
        self._marker_check.start(PARTITION_CHECK, now=False)

    def _recover(self) -> tuple[list[SpoolEntry], list[tuple[str, str]]]:
        """Thread: the FTPS and SFTP hosts to check checked; the spool's entries and refusals; the partitions'
        ledger read."""
        check_trust(self._probe, self._transport, self._reactor)
        recovered = self.spool.recover()
        self.partitions.ledger.load()
        return recovered

    def _resume(self, recovered: tuple[list[SpoolEntry], list[tuple[str, str]]]) -> None:
        entries, refusals = recovered
        self._entries = {e.id: e for e in entries}
        self.quarantined += len(refusals)
        for stem, reason in refusals:
            self.refused.add(stem + ".jl", None, 0, None, reason, self._clock.seconds())
        if self._entries:
            log.info("Resuming {count} spooled feed files", count=len(self._entries))
        for entry in list(self._entries.values()):
            self._attempt(entry)
        self.check_partitions()

    # -- ship -------------------------------------------------------------------------------------

    def ship(self, local_path: str, target_uri: str, window: tuple[float, float] | None = None,
             release: str | None = None) -> Deferred[None]:
        """Move a finished file into the spool for ``target_uri``; fires once it is there, not when uploaded.

        ``window``: the time window of the partition the file lands in (see partitions.py); ``release``: the
        holder whose hold on that partition ends once the file is spooled.  Fails with ValueError for a bad URI,
        BadFeedError (file moved to ``bad/``) for bad JSON lines.
        """
        if not self.running or not self._lane.running:
            return defer.fail(RuntimeError("the feed shipper is not running"))
        if not self.ready.called:  # the spool is still being recovered: after that, in order
            return settled([self.ready]).addCallback(lambda _: self.ship(local_path, target_uri, window, release))
        try:
            parse_target(target_uri)
        except ValueError as e:
            return defer.fail(e)
        entry = SpoolEntry(self._new_id(), target_uri, os.path.basename(local_path), self._clock.seconds(),
                           window=window)
        inner = self._lane.run(self._spool, entry, local_path)
        inner.addCallbacks(self._accepted, self._not_accepted, callbackArgs=(entry, release),
                           errbackArgs=(entry,))
        self._inflight.track(inner)
        outer: Deferred[None] = Deferred()
        inner.chainDeferred(outer)
        return outer

    def _new_id(self) -> str:
        return f"{int(self._clock.seconds() * 1000):013d}-{os.urandom(4).hex()}"

    def _spool(self, entry: SpoolEntry, local_path: str) -> None:
        """Thread: into the spool (sidecar first, then the file); then the check (its count kept: the upload does
        not read the file again for it)."""
        self.spool.put(entry, local_path)
        entry.records = self._check(entry)

    def _accepted(self, _: None, entry: SpoolEntry, release: str | None = None) -> None:
        self._entries[entry.id] = entry
        if release is not None:
            self.partitions.release(release)
        log.debug("Feed {name} spooled for {target}", name=entry.name, target=redact(entry.target))
        self._attempt(entry)

    def _not_accepted(self, failure: Failure, entry: SpoolEntry) -> Failure:
        if failure.check(BadFeedError):
            self._refused(entry, failure)
        return failure

    # -- uploads ---------------------------------------------------------------------------------

    def _attempt(self, entry: SpoolEntry) -> None:
        entry.timer = None
        if not self.running or entry.busy:
            return
        entry.busy = True
        d = self._one_at_a_time(entry)
        d.addCallbacks(self._uploaded, self._upload_failed, callbackArgs=(entry,), errbackArgs=(entry,))
        d.addErrback(lambda f: log.failure("Feed shipper bug with {name}", f, name=entry.name))
        self._inflight.track(d)

    def _one_at_a_time(self, entry: SpoolEntry) -> Deferred[Any]:
        """Uploads bound for one name go one after the other: FTP cannot rename without overwriting, so a
        second file for a name must find the first one there (and be refused), not race it."""
        lock = self._names.setdefault(entry.target, defer.DeferredLock())
        d = lock.run(self._slots.run, self._upload, entry)

        def forget(result: Any) -> Any:
            if not lock.locked and not lock.waiting:
                self._names.pop(entry.target, None)
            return result

        return d.addBoth(forget)

    def _upload(self, entry: SpoolEntry) -> Deferred[Any]:
        if not self.running or not self._lane.running:
            return defer.succeed(_SKIPPED)
        entry.abort = Abort()
        return self._lane.run(self._deliver, entry, entry.abort)

    def _deliver(self, entry: SpoolEntry, abort: Abort) -> int:
        """Thread: check (a file found in the spool at start; one spooled here was checked then), upload, then
        forget the spool entry (file first, sidecar last)."""
        records = self._check(entry) if entry.records is None else entry.records
        try:
            target = replace(parse_target(entry.target), tag=entry.id.rsplit("-", 1)[-1])
            upload(self.spool.path(entry.id, ".jl"), target, options=self._transport, abort=abort,
                   renamed_before=entry.rename_sent, before_rename=lambda: self._renaming(entry), reactor=self._reactor)
        except FeedExistsError as e:
            self.spool.quarantine(entry.id, str(e))
            raise
        except Exception:
            self.spool.save(entry, attempts=entry.attempts + 1)
            raise
        if entry.window is not None:
            self.partitions.ledger.add(entry.target, entry.window, self.spool.path(entry.id, ".jl"), records)
        self.spool.remove(entry)
        return records

    def _check(self, entry: SpoolEntry) -> int:
        """Thread: the number of records, or quarantine and BadFeedError (the target's name says the format)."""
        name = parse_target(entry.target).name
        check = validate_warc if is_warc(name) else validate_parquet if is_parquet(name) else validate_jsonl
        try:
            return check(self.spool.path(entry.id, ".jl"))
        except BadFeedError as e:
            self.spool.quarantine(entry.id, str(e))
            raise

    def _renaming(self, entry: SpoolEntry) -> None:
        entry.rename_sent = True
        self.spool.save(entry)

    def _uploaded(self, records: Any, entry: SpoolEntry) -> None:
        entry.busy, entry.abort = False, None
        if records is _SKIPPED:
            return
        del self._entries[entry.id]
        self.shipped += 1
        log.info("Feed {name} shipped to {target}: {records} records, {failed} failed attempts before",
                 name=entry.name, target=redact(entry.target), records=records, failed=entry.attempts)
        if entry.window is not None:
            self.check_partitions()

    def _upload_failed(self, failure: Failure, entry: SpoolEntry) -> None:
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
        trust = failure.check(FeedTrustError) is not None
        entry.delay = self._retry.cap if trust else self._retry.after(entry.delay)
        entry.timer = self._clock.callLater(entry.delay, self._attempt, entry)
        emit = log.error if trust else log.debug if entry.warned else log.warn
        entry.warned = True
        emit("Feed {name} not shipped to {target} ({error}); spooled, retrying in {delay}s and backing off",
             name=entry.name, target=redact(entry.target), error=error, delay=entry.delay)

    def _refused(self, entry: SpoolEntry, failure: Failure) -> None:
        self.quarantined += 1
        error = self._describe(failure, entry)
        self.last_error = f"{entry.name}: {error}"
        self.refused.add(entry.name, entry.target, entry.attempts, entry.first_seen, error, self._clock.seconds())
        log.error("Feed {name} refused, moved to {bad}, never uploaded: {error}",
                  name=entry.name, bad=self.bad_dir, error=error)

    @staticmethod
    def _describe(failure: Failure, entry: SpoolEntry) -> str:
        """The error as text with no password in it."""
        message = failure.getErrorMessage()
        text = f"{failure.type.__name__}: {message}" if message else f"{failure.type.__name__} (connection closed?)"
        return redact(mask_secret(text, parse_target(entry.target).password))

    # -- stop -------------------------------------------------------------------------------------

    @defer.inlineCallbacks
    def stopService(self) -> Any:
        """Wait for uploads in flight up to ``stop_timeout``, then abort them; unshipped files stay spooled."""
        super().stopService()
        if self._marker_check.running:
            self._marker_check.stop()
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
            self._marker_abort.set()
            yield self._inflight.wait()
        self._lane.stop()


    # -- partitions -------------------------------------------------------------------------------

    def arm_partitions(self) -> None:
        """Every holder (job) of this node holds its partition now: partitions may close from here on."""
        self.partitions.arm()
        self.check_partitions()

    def hold(self, holder: str, uri: str) -> None:
        """``holder`` (a job) will ship into ``uri``'s partition: no marker until it is released (by ``ship``'s
        ``release``, or :meth:`release`)."""
        self.partitions.hold(holder, uri)

    def release(self, holder: str) -> None:
        """``holder`` will ship nothing (a cancelled job)."""
        self.partitions.release(holder)
        self.check_partitions()

    def check_partitions(self) -> None:
        """Write the marker of every partition that is closed now (on the lane, one check at a time)."""
        if not self.running or self._marking or not self.ready.called or not self.partitions.armed:
            return
        spooled = {partition_of(e.target) for e in self._entries.values() if e.window is not None}
        due = self.partitions.due(self._clock.seconds(), spooled.__contains__)
        if not due:
            return
        self._marking = True
        self._marker_abort = Abort()
        d = self._lane.run(self._mark, due, self._marker_abort)
        d.addErrback(self._mark_failed)
        d.addBoth(self._marked)
        self._inflight.track(d)

    def _check_partitions_logged(self) -> None:
        """The timer's call: an error is logged, never raised (it would stop the timer for good)."""
        try:
            self.check_partitions()
        except Exception:
            log.failure("Looking for partitions to close failed")

    def _mark(self, due: list[str], abort: Abort) -> None:
        """Thread: the markers of ``due``, one partition after the other."""
        ledger = self.partitions.ledger
        for key in due:
            part = ledger.snapshot(key)
            count = len(part.files)
            write_marker(key, part, self._transport, abort, self._clock.seconds(), self._reactor)
            ledger.marked(key, count)
            log.info("Partition {where} complete: {files} files; _MANIFEST.json and _SUCCESS written",
                     where=redact(key), files=count)
        ledger.forget_before(self._clock.seconds())

    def _mark_failed(self, failure: Failure) -> None:
        self.last_error = f"partition marker: {self._describe_error(failure)}"
        log.warn("Writing a partition marker failed ({error}); trying again later", error=self.last_error)

    def _marked(self, _: Any) -> None:
        self._marking = False

    @staticmethod
    def _describe_error(failure: Failure) -> str:
        return redact(f"{failure.type.__name__}: {failure.getErrorMessage()}")


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


def feed_shipper(feed: FeedSection, reactor: IThreadedClock, spool_dir: str, lane: Lane,
                 probe: tuple[str, ...]) -> FeedShipper:
    """The node's shipper from ``[feed]``; at start it checks the FTPS and SFTP hosts of the ``probe`` templates."""
    transport = TransportOptions(feed.ca_file, feed.insecure, feed.known_hosts, feed.ssh_key, feed.timeout)
    return FeedShipper(reactor, spool_dir, retry_max=feed.retry_max, stop_timeout=feed.stop_timeout,
                       transport=transport, probe=tuple(t for t in probe if t), partition_grace=feed.partition_grace,
                       lane=lane)
