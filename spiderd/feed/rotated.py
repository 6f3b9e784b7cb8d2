"""What the in-process items writer and the WARC writer share: entries queued on the reactor and written in
groups, one group after the other on a lane, into files named ``<prefix>-<time>-<token>-<serial><extension>``,
written as ``.part`` and renamed once complete.

A group goes out when ``batch_size`` entries wait, or ``flush_interval`` seconds after the first; each entry's
Deferred fires once its group is written (what "written" means, and how a file rotates by count, is the subclass's
``_commit``).  Whatever the count, the open file is completed ``rotate_seconds`` after its first entry and
``rotate_idle`` seconds after its last one (a slow or idle crawl), and by :meth:`RotatedFiles.rotate` (the crawl
has finished), so a consumer that reads only complete files is never kept waiting for the stop.  At start, the
files a previous run left are settled first (``_settle_previous``); ``ready`` fires once they are, and fails if
they could not be (a start failure) unless the subclass says the crawl may go on (``_settle_failed``).  Every
completed file is told to ``on_rotate``.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core.blocking import Lane
from spiderd.core.lifecycle import settled

log = Logger()

PART = ".part"
Pending = tuple[Any, "Deferred[None]"]  # an entry and the Deferred its write fires


class RotatedFiles(Service):
    """The skeleton: ``_enqueue(entry)`` from ``write``; subclasses give ``_commit(group)`` and
    ``_settle_previous()``."""

    what = "item"  # for messages: "the item writer is stopped"
    label = "Items"  # for messages: "Items file complete"

    def __init__(self, clock: IReactorTime, directory: str, lane: Lane, *, flush_interval: float, batch_size: int,
                 on_rotate: Callable[[str], Any] | None = None, rotate_seconds: float | None = None,
                 rotate_idle: float | None = None) -> None:
        self._clock = clock
        self.directory = directory
        self._lane = lane
        self._flush_interval = flush_interval
        self._batch_size = batch_size
        self._on_rotate = on_rotate
        self.ready: Deferred[None] = Deferred()
        self._queue: list[Pending] = []
        self._timer: IDelayedCall | None = None
        self._writing: Deferred[Any] = defer.succeed(None)
        self._token = os.urandom(4).hex()  # this process's file names are unique across nodes and restarts
        self._serial = 0
        self.written = 0
        self.files: list[str] = []
        self._rotate_seconds, self._rotate_idle = rotate_seconds, rotate_idle
        self._seen_serial = 0  # the serial of the open file the timers are for
        self._age: IDelayedCall | None = None
        self._idle: IDelayedCall | None = None

    def startService(self) -> None:
        """Start the lane, then settle what a previous run left (``ready`` fires once that is done)."""
        super().startService()
        self._lane.start()
        d = defer.maybeDeferred(self._settle_previous)
        d.addCallback(self._completed)
        d.addErrback(self._settle_failed)
        d.addCallbacks(self.ready.callback, self.ready.errback)

    def _settle_failed(self, failure: Failure) -> Failure | None:
        """The files of a previous run could not be settled: ``ready`` fails, a start failure (a subclass may
        log it and go on instead)."""
        return failure

    def _enqueue(self, entry: Any) -> Deferred[None]:
        """Queue ``entry``; its Deferred fires once its group is written."""
        if not self.running:
            return defer.fail(RuntimeError(f"the {self.what} writer is stopped"))
        d: Deferred[None] = Deferred()
        self._queue.append((entry, d))
        if len(self._queue) >= self._batch_size:
            self._flush()
        elif self._timer is None:
            self._timer = self._clock.callLater(self._flush_interval, self._flush)
        return d

    def _flush(self) -> Deferred[Any]:
        """Write what is queued now, after the groups before it; fires once it is written."""
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        group, self._queue = self._queue, []
        if group:
            self._writing.addCallback(lambda _: self._commit(group))
            self._writing.addErrback(lambda f: log.failure("Writing {label} failed", f, label=self.label))
            self._writing.addCallback(lambda _: self._time_open_file())
        return self._writing

    def settled(self) -> Deferred[None]:
        """Fires once every group and completion asked for so far is done."""
        done: Deferred[None] = Deferred()

        def fire(result: Any) -> Any:
            done.callback(None)
            return result

        self._writing.addBoth(fire)
        return done

    # -- rotation by time ------------------------------------------------------------------------

    def rotate(self) -> Deferred[Any]:
        """Write what is queued and complete the open file now; fires once it is complete."""
        if not self.running:  # stopping completes it
            return self._writing
        self._flush()
        self._writing.addCallback(lambda _: self._complete_current())
        self._writing.addErrback(lambda f: log.failure("Completing a {label} file failed", f, label=self.label))
        self._writing.addCallback(lambda _: self._time_open_file())
        return self._writing

    def _time_open_file(self) -> None:
        """After a group (the lane idle for this writer): (re)arm the age and idle timers of the open file."""
        if not self._is_open():
            self._cancel_timers()
            return
        if self._serial != self._seen_serial:  # a new file: its age counts from now
            self._seen_serial = self._serial
            self._age = self._restart(self._age, self._rotate_seconds, "age")
        self._idle = self._restart(self._idle, self._rotate_idle, "idle")

    def _restart(self, call: IDelayedCall | None, delay: float | None, why: str) -> IDelayedCall | None:
        if call is not None and call.active():
            call.cancel()
        return None if delay is None or not self.running else self._clock.callLater(delay, self._on_time, why)

    def _on_time(self, why: str) -> None:
        log.debug("{label} file complete by {why}", label=self.label, why=why)
        self._cancel_timers()
        self.rotate()

    def _cancel_timers(self) -> None:
        for call in (self._age, self._idle):
            if call is not None and call.active():
                call.cancel()
        self._age = self._idle = None

    def _is_open(self) -> bool:
        """True while a file is open (read on the reactor between groups)."""
        raise NotImplementedError

    def _complete_current(self) -> Deferred[Any]:
        """Complete the open file, if one is (after the groups before)."""
        raise NotImplementedError

    def _commit(self, group: list[Pending]) -> Deferred[Any]:
        """Write ``group`` and fire its Deferreds (each with None, or the failure)."""
        raise NotImplementedError

    def _settle_previous(self) -> Deferred[list[str]]:
        """Settle the ``.part`` files a previous run left; the files completed."""
        raise NotImplementedError

    def _next_name(self, prefix: str, extension: str, stamp: str) -> str:
        """The final name of the next file (in UTC, ``stamp`` a strftime format)."""
        self._serial += 1
        return f"{prefix}-{time.strftime(stamp, time.gmtime())}-{self._token}-{self._serial:05d}{extension}"

    def _completed(self, paths: list[str]) -> None:
        for path in paths:
            self.files.append(path)
            log.info("{label} file complete: {path}", label=self.label, path=path)
            if self._on_rotate is not None:
                self._on_rotate(path)

    def _in_thread(self, work: Callable[..., Any], *args: Any) -> Deferred[Any]:
        return self._lane.run(work, *args)

    @defer.inlineCallbacks
    def stopService(self) -> Any:
        """Write what is queued, complete the open file (``_complete_open``), then stop the lane."""
        yield settled([self.ready])
        try:
            yield self._flush()
            super().stopService()
            self._cancel_timers()
            yield self._complete_open()
        finally:
            self._lane.stop()

    def _complete_open(self) -> Deferred[Any]:
        """At stop, after the last group: complete the open file."""
        raise NotImplementedError
