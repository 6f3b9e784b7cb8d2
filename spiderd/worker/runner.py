"""The job runner: a priority queue of persisted jobs, ``max_jobs`` fetching at a time.

The running jobs share the worker's URL slots (see :mod:`.pipeline`); a job
that has fetched everything stops counting toward ``max_jobs`` while it
ships its feed, so the next one starts at once.  Nor does a job count whose
URLs left all wait on time (the backed-off retries of its last 5xx, a
throttle's block, a host's delay), or are all in flight (its tail: a slow
page), while the worker has free URL slots: the next job starts and takes
them, as Scrapyd's one process per job cannot.
Jobs with URLs left are bounded all the same (``WAITING_JOBS x max_jobs``), so
their URLs in memory are.  Every job ships a feed file,
an empty one when it made no items (a reader can tell "batch done, nothing in
it" from "batch lost"), as Scrapy's feed exports do.

A run (see :mod:`.execution`, :mod:`.run` and :mod:`.pipeline`) writes the job's items to
``<incoming>/<job id>.jl``, rewritten from scratch at each start.  The file is handed to the feed shipper
only when every URL is done, after the job is persisted as ``shipping``; the
target name is rendered at the job's first start and kept.  So a job cut short
by a crash or a stop runs again and ships one whole file, never a second file
and never half a one; one cut short while shipping is shipped (or, if the
shipper already took its file, finished) without fetching again.

Cancelling a pending job cancels it at once; a running job stops fetching,
ships nothing and ends cancelled.  At stop, running jobs may finish until the
deadline; then they are interrupted and persisted as pending for the next start.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, Mapping

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from spiderd.core.fsutil import unlink_quietly
from spiderd.core.lifecycle import InFlight
from spiderd.core.memory import release_memory
from spiderd.core.rules import PoliteRules, Site
from spiderd.core.secrets import redact
from spiderd.core.storage import storage_error
from spiderd.worker.accepted import Accepted, digest
from spiderd.feed import warc
from spiderd.worker.config import WorkerConfig
from spiderd.worker.execution import Execution
from spiderd.worker.itemized import Itemized
from spiderd.worker.joblog import JobLogs
from spiderd.worker.jobs import CANCELLED, ENDED, FINISHED, PENDING, RUNNING, Job, JobStore, Runner
from spiderd.worker.jobsettings import HONOURED
from spiderd.worker.pipeline import Pipeline
from spiderd.worker.run import Run

if TYPE_CHECKING:
    from spiderd.feed.shipper import FeedShipper

log = Logger()


BIG_JOB = 10_000  # start URLs: after such a job, memory is handed back to the system
WAITING_JOBS = 4  # jobs with URLs left, at most, per max_jobs: those beyond max_jobs only wait (on time)


class WorkerStopping(Exception):
    """The worker is shutting down and accepts no new job."""


class JobExists(Exception):
    """A job with this id is pending or running."""


class JobRunner:
    """Runs persisted jobs; ``jobs`` holds every known job (ended ones up to ``finished_to_keep``)."""

    def __init__(
        self,
        reactor: IReactorTime,
        config: WorkerConfig,
        store: JobStore,
        io: Runner,
        pipeline: Pipeline,
        shipper: FeedShipper,
        render_uri: Callable[[str, dict[str, str]], str],
        incoming_dir: str,
        sites: Callable[[], Mapping[str, Site]] | None = None,
    ) -> None:
        """``pipeline``: the worker's queue and URL slots over the node's page engine; the runner gives it the
        ledger of what was itemized and asks it to say when slots are free that no running job takes."""
        self._reactor = reactor
        self._config = config
        self._store = store
        self._io = io
        self._itemized = Itemized(config.itemized_dir, reactor, config.redirect_window)
        self._pipeline = pipeline
        pipeline.itemized, pipeline.on_slack = self._itemized, self._slack
        self.accepted = Accepted(config.accepted_dir)
        self.logs = JobLogs(config.logs_dir, io, reactor)
        self._execution = Execution(reactor, config, store, io, self._pipeline, self._itemized, self.logs, shipper,
                                    render_uri, incoming_dir, sites, stopping=lambda: self.stopping)
        self._gate = pipeline.steps.gate
        if self._gate is not None:
            self._gate.add_listener(self.kick)
        self.jobs: dict[str, Job] = {}
        self.runs: dict[str, Run] = {}
        self._queue: list[Job] = []
        self._executions = InFlight()
        self._waiters: dict[str, list[Deferred[Job]]] = {}
        self._seq = 0
        self._kick_call: IDelayedCall | None = None
        self.stopping = False

    # -- lifecycle --------------------------------------------------------------------------------------------

    def open(self) -> None:
        """Open the files of what was itemized and accepted (before ``start``)."""
        self._itemized.open()
        self.accepted.open()

    def close(self) -> None:
        """Close them (after ``stop`` and the last job file written)."""
        self._itemized.close()
        self.accepted.close()

    def start(self, jobs: list[Job]) -> None:
        """Take the jobs found on disk: running ones (cut short last time) are pending again."""
        self.stopping = False
        self.jobs.clear()
        self._queue.clear()
        self.logs.open(job.id for job in jobs)
        for job in jobs:
            self.jobs[job.id] = job
            self._seq = max(self._seq, job.seq)
            if job.state == RUNNING:
                self._recover(job)
            if job.state == PENDING:
                self._enqueue(job)
            elif job.state == CANCELLED:
                unlink_quietly(self.items_path(job))
                unlink_quietly(self.items_path(job)[: -len(".jl")] + warc.EXTENSION)
                unlink_quietly(self._execution.parquet_path(job))
                parts = self._execution.parts_of(job)
                parts.discard_parts()
                parts.remove()
        if self._queue:
            log.info("Worker: {count} accepted jobs to run from the last run", count=len(self._queue))
        for job in jobs:
            self._execution.hold(job)
        self._execution.arm_partitions()  # every job that will ship into a partition holds it now
        self._prune()
        self.kick()

    def _recover(self, job: Job) -> None:
        """A job cut short: run it again, or only ship it again, or (shipped already) finish it."""
        feed = self._execution.parquet_path(job) if self._config.feed_format == "parquet" else ""
        if job.shipping:
            self._itemized.hold(job.id, job.itemized)  # its items are shipped or about to be: no one else's
        if job.shipping and not os.path.exists(self.items_path(job)) and not (feed and os.path.exists(feed)):
            try:
                self._itemized.commit(job.id)  # handed over before the worker went down: recorded now
            except Exception:
                log.failure("Worker: recording the items of job {id} failed; a redirect may make one again", id=job.id)
            job.shipping, job.itemized = False, []
            self._execution.parts_of(job).remove()  # (its parts were shipped before its last file)
            self._end(job, FINISHED)
            self._store.save(job).addErrback(lambda f: log.failure("Worker: saving job {id} failed", f, id=job.id))
            return
        job.state, job.start_time = PENDING, None

    def stop(self, timeout: float) -> Deferred[None]:
        """Start no more jobs; let running ones finish for ``timeout`` seconds, then interrupt them."""
        self.stopping = True
        if self._kick_call is not None and self._kick_call.active():
            self._kick_call.cancel()
        if self.runs:
            log.info("Worker: stopping, {count} jobs running (at most {timeout}s more)",
                     count=len(self.runs), timeout=timeout)
        deadline = self._reactor.callLater(timeout, self._interrupt_all)
        d = self._executions.wait()
        d.addBoth(lambda _: deadline.cancel() if deadline.active() else None)
        return d

    def _interrupt_all(self) -> None:
        if self._gate is not None:
            self._gate.wake()  # writes waiting for the storage give up now
        for run in list(self.runs.values()):
            if not run.shipping:
                self._note(LogLevel.info, run.job, "Worker: job {id} interrupted by the stop; it stays pending")
                run.halt("interrupted")

    # -- the API's part ---------------------------------------------------------------------------------------

    def submit(self, job: Job, urls: list[str]) -> Deferred[Job]:
        """Persist a new job and its start URLs, then queue it; fires once they are durable.

        A job id accepted before for the same request (a batch sent again) fires with that job, and nothing
        runs twice."""
        if self.stopping:
            return defer.fail(WorkerStopping("the worker is shutting down"))
        job.digest, job.url_count = digest(job, urls), len(urls)
        again = self._accepted_before(job)
        if again is not None:
            if again.id in self.jobs:
                self._note(LogLevel.info, again, "Worker: job {id} was accepted before; not run again")
            else:  # pruned since: no log of its own any more
                log.info("Worker: job {id} was accepted before; not run again", id=job.id)
            return defer.succeed(again)
        old = self.jobs.get(job.id)
        if (old is not None and old.state not in ENDED) or job.id in self.runs:
            return defer.fail(JobExists(job.id))
        self._seq += 1
        job.seq, job.created, job.state = self._seq, self._reactor.seconds(), PENDING
        self.jobs[job.id] = job
        try:
            self.accepted.ready()
        except Exception:
            d: Deferred[Any] = defer.fail()
        else:
            d = self._store.save(job, urls)
            d.addCallback(lambda _: self._io(self.accepted.put, job))
        d.addCallbacks(self._accepted, self._not_accepted, callbackArgs=(job, old), errbackArgs=(job, old))
        return d

    def _accepted_before(self, job: Job) -> Job | None:
        """The job accepted under ``job.id`` for the same request, if any (the job itself when pruned since)."""
        known = self.jobs.get(job.id)
        if known is not None:
            return known if known.digest == job.digest else None
        if self.accepted.get(job.id) == job.digest:
            job.state = FINISHED
            return job
        return None

    def _accepted(self, _: None, job: Job, old: Job | None) -> Job:
        if self._gate is not None:
            self._gate.succeeded("worker")
        if old is not None:
            self.logs.reset(job.id)  # the log of the ended job that had this id
        feed = redact(self._execution.options(job).feed_uri or "(the default)")
        self._note(LogLevel.info, job, "Worker: accepted job {id} (spider {spider}, {count} URLs, priority "
                   "{priority}, feed {feed})", spider=job.spider, count=job.url_count, priority=job.priority, feed=feed)
        if job.ignored_settings:
            self._note(LogLevel.warn, job, "Worker: job {id}: settings ignored: {names} (a spiderd job honours "
                       "{honoured})", names=", ".join(job.ignored_settings), honoured=", ".join(HONOURED))
        if job.state == PENDING:
            self._enqueue(job)
            self.kick()
        return job

    def _not_accepted(self, failure: Failure, job: Job, old: Job | None) -> Failure:
        """Forget a job that could not be made durable; one the storage refused blocks the storage gate."""
        if self._gate is not None:
            self._gate.failed("worker", failure)
        if self.jobs.get(job.id) is job:
            if old is None:
                del self.jobs[job.id]
            else:
                self.jobs[job.id] = old
        return failure

    def cancel(self, job_id: str) -> Deferred[str | None]:
        """Cancel a job; fires with its previous state (``pending``, ``running``) or None."""
        job = self.jobs.get(job_id)
        if job is None or job.state in ENDED:
            return defer.succeed(None)
        if self.stopping:
            return defer.fail(WorkerStopping("the worker is shutting down"))
        run = self.runs.get(job_id)
        if run is None:
            self._queue.remove(job)
            self._end(job, CANCELLED)
            self._note(LogLevel.info, job, "Worker: job {id} cancelled while pending")
            return self._store.save(job).addCallback(self._cancelled_pending, job)
        if run.shipping:  # too late: the feed is on its way
            return defer.succeed(RUNNING)
        run.halt("cancelled")
        self._end(job, CANCELLED)
        self._note(LogLevel.info, job, "Worker: job {id} cancelled while running; nothing is shipped")
        return self._store.save(job).addCallback(lambda _: RUNNING)

    def _cancelled_pending(self, _: None, job: Job) -> str:
        self._notify(job)
        self._prune()
        return PENDING

    def when_done(self, job_id: str) -> Deferred[Job]:
        """Fires with the job once it is finished or cancelled."""
        job = self.jobs[job_id]
        if job.state in ENDED and job_id not in self.runs:
            return defer.succeed(job)
        d: Deferred[Job] = Deferred()
        self._waiters.setdefault(job_id, []).append(d)
        return d

    @property
    def totals(self) -> Counter[str]:
        """Counters over every job since the start: pages, items, failed, requests..."""
        return self._pipeline.totals

    def set_host_delay(self, host: str, delay: float) -> None:
        """Raise ``host``'s delay between request starts for every job."""
        self._pipeline.queue.politeness.set_robots_delay(host, delay)

    def set_host_group(self, host: str, address: str) -> None:
        """Per-IP politeness: ``host`` shares the slot of ``address`` for every job."""
        self._pipeline.queue.politeness.set_group(host, address)

    def set_politeness(self, rules: PoliteRules) -> None:
        """Pace hosts by ``rules`` from their next request on, for every job."""
        self._pipeline.set_politeness(rules)

    def now(self) -> float:
        return float(self._reactor.seconds())

    def pending(self) -> list[Job]:
        """Pending jobs in the order they will run."""
        return list(self._queue)

    @property
    def incoming_dir(self) -> str:
        """Where the jobs' items files are written (the shipper's ``incoming`` directory)."""
        return self._execution.incoming_dir

    def items_path(self, job: Job) -> str:
        """The local file of a job's items (in the shipper's ``incoming`` directory)."""
        return self._execution.items_path(job)

    # -- scheduling jobs --------------------------------------------------------------------------------------

    def _enqueue(self, job: Job) -> None:
        self._queue.append(job)
        self._queue.sort(key=lambda j: (-j.priority, j.seq))

    def kick(self) -> None:
        """Start queued jobs soon, up to ``max_jobs`` at once."""
        if self._kick_call is None and not self.stopping:
            self._kick_call = self._reactor.callLater(0, self._start_jobs)

    def _slack(self) -> None:
        """The worker has free URL slots that no running job's URL may take now: another job may start."""
        if self._queue:
            self.kick()

    def _start_jobs(self) -> None:
        self._kick_call = None
        while self._queue and self._may_start() and not self.stopping and not self._storage_blocked():
            job = self._queue.pop(0)
            run = self.runs[job.id] = self._execution.new_run(job)
            d = self._execution.execute(run, self.kick)
            d.addErrback(self._execution_failed, run)
            d.addBoth(self._execution_over, run)
            self._executions.track(d)

    def settled(self) -> Deferred[None]:
        """Fires when the jobs running now (their feeds shipped or spooled) are over."""
        return self._executions.wait()

    def fetching(self) -> int:
        """Runs working on their URLs, which count toward ``max_jobs``: not those shipping their feed, nor, while
        the worker has free URL slots, those whose URLs all wait (on a retry delay, a throttle, a host's delay)
        or have all been handed out (each in flight or waiting on its retry: nothing of theirs could take a
        free slot)."""
        slack = self._pipeline.in_flight < self._config.concurrency
        return sum(1 for run in self.runs.values()
                   if not run.settled.called and not (slack and (run.waiting or run.handed_out)))

    def _storage_blocked(self) -> bool:
        """True while a sink refuses writes (the gate kicks the runner when it tries again)."""
        return self._gate is not None and self._gate.blocked()

    def _may_start(self) -> bool:
        """Whether another job may start: fewer than ``max_jobs`` are working, and fewer than
        ``WAITING_JOBS x max_jobs`` have URLs left in all (a bound on the URLs held in memory)."""
        loaded = sum(1 for run in self.runs.values() if not run.settled.called)
        return self.fetching() < self._config.max_jobs and loaded < WAITING_JOBS * self._config.max_jobs

    def _execution_failed(self, failure: Failure, run: Run) -> Any:
        job = run.job
        if job.state == RUNNING and not job.shipping and self._gate is not None and self._gate.failed("worker", failure):
            self._note(LogLevel.warn, job, "Worker: job {id}: its files could not be written ({error}); it runs "
                       "again once the storage takes writes", error=storage_error(failure))
            return self._execution.requeue(run)
        if job.state == RUNNING and job.shipping and storage_error(failure) is not None:
            self._note(LogLevel.warn, job, "Worker: job {id}: its feed was not handed to the shipper before the "
                       "stop ({error}); it ships at the next start", error=storage_error(failure))
            return None  # running and shipping: the next start ships it (or runs it again, if not saved so)
        log.failure("Worker: job {id} failed", failure, id=run.job.id)
        self.logs.line(run.job.id, f"Worker: job {run.job.id} failed: {failure.getErrorMessage()}", LogLevel.error)
        self._itemized.release(run.job.id)
        run.job.error = failure.getErrorMessage()[:500]
        if run.job.state == RUNNING:
            self._end(run.job, FINISHED)
            return self._store.save(run.job).addErrback(lambda f: log.failure("Worker: saving job failed", f))
        return None

    def _execution_over(self, _: Any, run: Run) -> None:
        del self.runs[run.job.id]
        if run.job.state in ENDED:
            self._notify(run.job)
            self._prune()
        elif run.job.state == PENDING and not self.stopping and run.job not in self._queue:
            self._enqueue(run.job)  # its files could not be written: it runs again
        self.kick()

    def _note(self, level: LogLevel, job: Job, fmt: str, **fields: Any) -> None:
        """A line of the worker's log that is about ``job``: in the job's own log too."""
        self._execution.note(level, job, fmt, **fields)

    # -- bookkeeping ------------------------------------------------------------------------------------------

    def _end(self, job: Job, state: str) -> None:
        self._execution.end(job, state)

    def _notify(self, job: Job) -> None:
        """The job ended (and is saved so): its URLs go, waiters hear, a big job's memory goes back."""
        self._store.forget_urls(job.id).addErrback(lambda f: log.failure("Worker: dropping job URLs failed", f))
        for d in self._waiters.pop(job.id, []):
            d.callback(job)
        if job.url_count >= BIG_JOB:
            release_memory()

    def _prune(self) -> None:
        """Forget the oldest ended jobs beyond ``finished_to_keep``."""
        ended = sorted((j for j in self.jobs.values() if j.state in ENDED), key=lambda j: j.end_time or 0.0)
        for job in ended[: max(0, len(ended) - self._config.finished_to_keep)]:
            del self.jobs[job.id]
            self._store.delete(job.id).addErrback(lambda f: log.failure("Worker: deleting a job file failed", f))
            self.logs.delete(job.id)

