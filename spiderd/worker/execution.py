"""One job's execution: its run set up, its URLs through the pipeline, its feed (and WARC file) shipped.

The :class:`~.runner.JobRunner` decides which job runs when; this module does what one run is.  The
items file is written under ``<incoming>/<job id>.jl`` from scratch at each start, handed to the feed
shipper only once every URL is done and the job is persisted as ``shipping``; a job that was shipping
when the worker went down is shipped again without fetching.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any, Callable, Mapping

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger, LogLevel

from spiderd.core.feeduri import partition_window
from spiderd.core.fsutil import unlink_quietly
from spiderd.core.recrawls import Recrawl
from spiderd.core.urls import BadURL, canonicalize
from spiderd.core.secrets import redact
from spiderd.core.rules import Site
from spiderd.core.storage import retried
from spiderd.feed import parquet, warc
from spiderd.feed.schema import columns
from spiderd.feed.warcfiles import JobWarc, warc_uri
from spiderd.worker.config import WorkerConfig
from spiderd.worker.files import ItemsFile, JobHosts
from spiderd.worker.itemized import Itemized
from spiderd.worker.joblog import JobLogs
from spiderd.worker.jobs import ENDED, FINISHED, PENDING, RUNNING, Job, JobStore, Runner
from spiderd.worker.jobsettings import JobOptions, SettingError, job_options
from spiderd.worker.logstats import LogStats, dump, scrapy_stats
from spiderd.worker.parts import LEDGER, JobParts, PartClock, part_uri
from spiderd.worker.pipeline import Pipeline
from spiderd.worker.run import Run

if TYPE_CHECKING:
    from spiderd.feed.shipper import FeedShipper

log = Logger()


class Execution:
    """Runs one job at a time per call of :meth:`execute`; shared by every job of the worker."""

    def __init__(self, reactor: IReactorTime, config: WorkerConfig, store: JobStore, io: Runner, pipeline: Pipeline,
                 itemized: Itemized, logs: JobLogs, shipper: FeedShipper,
                 render_uri: Callable[[str, dict[str, str]], str], incoming_dir: str,
                 sites: Callable[[], Mapping[str, Site]] | None = None,
                 stopping: Callable[[], bool] = lambda: False) -> None:
        """``sites``: the worker's spiders by name as they are now (their fields are a Parquet feed's columns);
        ``stopping()``: the worker is stopping (a feed waiting for its storage is left to the next start)."""
        self._reactor = reactor
        self._config = config
        self._store = store
        self._io = io
        self._pipeline = pipeline
        self._itemized = itemized
        self._logs = logs
        self._shipper = shipper
        self._render_uri = render_uri
        self.incoming_dir = incoming_dir
        self._sites = sites or dict
        self._stopping = stopping
        self._gate = pipeline.steps.gate

    def _gated(self, sink: str, write: Callable[[], Deferred[Any]]) -> Deferred[Any]:
        """``write()``, made again while its storage refuses it (a full disk), until the worker stops."""
        return retried(self._gate, sink, write, self._stopping)

    def items_path(self, job: Job) -> str:
        """The local file of a job's items (in the shipper's ``incoming`` directory)."""
        return os.path.join(self.incoming_dir, job.id + ".jl")

    def parts_of(self, job: Job) -> JobParts:
        """The job's parts: its ledger beside its job file, its part files beside its items file."""
        return JobParts(self.items_path(job), os.path.join(self._config.jobs_dir, job.id + LEDGER))

    def parquet_path(self, job: Job) -> str:
        """The job's feed as Parquet (``[items] format = "parquet"``), made from its items file when it ships."""
        return self.items_path(job)[: -len(".jl")] + parquet.EXTENSION

    def new_run(self, job: Job) -> Run:
        """The run of ``job``: its items file (and WARC file), its caps, its fetch options, its log."""
        items = ItemsFile(self.items_path(job), self._io)
        options = self.options(job)
        run = Run(job, items, self._pipeline.totals, _cap(self._config.job_concurrency, options.concurrent_requests))
        run.note = functools.partial(self._logs.line, job.id, url=True)
        if self._config.feed_format in ("warc", "both"):  # the job's answers as WARC too, shipped beside its feed
            run.warc = JobWarc(self.items_path(job)[: -len(".jl")] + warc.EXTENSION, self._io)
        run.fetch_options = options.fetch_options()
        run.rules = self._job_rules(job)
        run.parts = self.parts_of(job)
        if self._config.rotate_seconds or self._config.rotate_idle:
            run.part_clock = PartClock(self._reactor, self._config.rotate_seconds, self._config.rotate_idle,
                                       lambda: self._seal(run))
            items.on_write = run.part_clock.wrote
        run.recrawl = _canonical_keys(options.recrawl)
        if options.per_domain or options.download_delay:
            run.hosts = JobHosts(options.per_domain, options.download_delay)
        return run

    def _job_rules(self, job: Job) -> Any:
        """The site rules ``job`` was sent with (checked when it was accepted), or None: the worker's own."""
        rules = self._pipeline.job_rules
        try:
            return rules.of(job.spider, job.settings) if rules is not None else None
        except ValueError as e:  # accepted by an older spiderd: its rules no longer read
            log.error("Worker: job {id}: its site rules cannot be used ({error}); the worker's own apply",
                      id=job.id, error=str(e))
            return None

    @defer.inlineCallbacks
    def execute(self, run: Run, fetched: Callable[[], None]) -> Any:
        """Run ``run`` to its end; ``fetched()`` is called once its URLs are done (its slot is free)."""
        job = run.job
        now = self._reactor.seconds()
        job.state, job.start_time, job.end_time, job.error = RUNNING, now, None, None
        if job.feed_uri is None:
            template = self.options(job).feed_uri or self._config.default_feed_uri
            job.feed_uri = self._render_uri(template, job.feed_params(now, self._config.host_name))
            window = partition_window(template, now)
            job.feed_window = list(window) if window is not None else None
        self.hold(job)
        run.shipping = job.shipping  # the items file was complete when the worker went down: ship it, no re-run
        yield self._store.save(job)
        yield self._recover_parts(run)
        if self._gate is not None:
            self._gate.succeeded("worker")  # its job files are written again
        if job.shipping:
            yield self._ship(run)
            return
        job.stats = {}
        yield run.items.open()
        if run.warc is not None:
            run.warc.name = shipped_name(warc_uri(job.feed_uri))  # (its warcinfo names the file as shipped)
            yield run.warc.open()
        if not run.halted:
            urls = yield self._io(self._store.load_urls, job)
            run.add(urls)
        self.note(LogLevel.info, job, "Worker: job {id} ({spider}) started: {count} URLs{settings}",
                  spider=job.spider, count=len(run.todo), settings=self.options(job).in_effect(self._config))
        progress = LogStats(self._reactor, functools.partial(self._logs.progress, job.id), lambda: run.stats)
        progress.start()
        self._pipeline.start(run)
        try:
            yield run.settled
        finally:
            progress.stop()
        fetched()  # the next pending job starts while this one ships
        job.stats = dict(run.stats)
        if run.halted is None:
            yield self._ship(run)
        else:
            yield self._halted(run)

    @defer.inlineCallbacks
    def requeue(self, run: Run) -> Any:
        """A run whose files could not be written (its storage refused them): its files and claims go, and the
        job is pending again (saved if the storage lets it; else a restart finds it running and runs it again)."""
        run.halted = run.halted or "interrupted"
        try:
            yield self._halted(run)
        except Exception as e:
            log.debug("Worker: job {id} kept as pending in memory only: {error}", id=run.job.id, error=e)
        run.job.state, run.job.start_time = PENDING, None

    @defer.inlineCallbacks
    def _halted(self, run: Run) -> Any:
        """A cancelled or interrupted run: its files go; an interrupted job is pending again."""
        job = run.job
        if run.part_clock is not None:
            run.part_clock.reset()
        if run.sealing is not None:
            yield run.sealing
        self._itemized.release(job.id)
        yield run.items.discard()
        if run.halted != "interrupted":  # cancelled: its parts shipped stay shipped, its ledger goes
            yield self._io(_forget_parts, run.parts)
        if run.warc is not None:
            yield run.warc.discard()
        if run.halted == "interrupted":
            job.state, job.start_time = PENDING, None
        else:
            self._dump_stats(job, "cancelled")
        yield self._store.save(job)

    @defer.inlineCallbacks
    def _ship(self, run: Run) -> Any:
        """Make the items file durable, mark the job ``shipping``, hand the file over, then finish.

        With WARC output, the WARC file goes first (if not gone already): the items file, handed over last
        (or, format "warc", dropped), says the job still has to ship.  Once the job is saved as shipping, a
        write its storage refuses (the spool's, the ledger's, the job file's) is made again when the storage
        gate tries again; at a stop it is left to the next start, which ships the file."""
        job = run.job
        run.shipping = True
        if run.part_clock is not None:
            run.part_clock.reset()
        if run.sealing is not None:  # a part being cut ships before the rest (the partition's hold ends last)
            yield run.sealing
        if not job.shipping:
            yield run.items.close()
            if run.warc is not None:
                yield run.warc.close()
            job.shipping = True
            job.itemized = self._itemized.records(job.id)  # held again at the next start if the worker dies
            try:
                yield self._store.save(job)
            except Exception:
                job.shipping, job.itemized = False, []  # not saved so: the job runs again
                raise
        feed = job.feed_uri
        assert feed is not None
        window = (job.feed_window[0], job.feed_window[1]) if job.feed_window else None
        yield self._recover_parts(run)  # a part whose shipping failed goes before the rest
        if run.warc is not None and os.path.exists(run.warc.path):
            warc_path = run.warc.path
            yield self._gated("spool", lambda: self._shipper.ship(warc_path, warc_uri(feed), window))
        if self._config.feed_format == "warc":
            yield self._io(unlink_quietly, run.items.path)
        elif self._config.feed_format == "parquet":  # converted once, then the .jl goes: a re-ship finds either
            yield self._io(self._to_parquet, job)
            parquet_path = self.parquet_path(job)
            yield self._gated("spool", lambda: self._shipper.ship(parquet_path, parquet.parquet_uri(feed), window,
                                                                   release=job.id))
        else:  # an empty file too: "batch done, no items"
            items = run.items.path
            yield self._gated("spool", lambda: self._shipper.ship(items, feed, window, release=job.id))
        yield self._gated("worker", lambda: defer.maybeDeferred(self._itemized.commit, job.id))
        yield self._io(run.parts.remove)
        job.shipping, job.itemized = False, []
        self.end(job, FINISHED)
        yield self._gated("worker", lambda: self._store.save(job))
        self._finished(job)

    # -- parts (see parts.py) -------------------------------------------------------------------------------

    @defer.inlineCallbacks
    def _recover_parts(self, run: Run) -> Any:
        """What earlier runs cut: their pages make no item again, the parts not shipped are shipped now."""
        recovered = yield self._io(run.parts.recover)
        run.sealed, run.next_part = recovered.sealed, recovered.next
        by_number: dict[int, str] = {}
        for number, path in recovered.unshipped:  # a .jl (cut, maybe converted halfway) wins over a .parquet
            if path.endswith(".jl") or number not in by_number:
                by_number[number] = path
        for number in sorted(by_number):
            yield self._ship_part(run, number, by_number[number])

    @defer.inlineCallbacks
    def _seal(self, run: Run) -> Any:
        """The job's file is old or idle: what it holds is cut as the next part and shipped; the job goes on."""
        if run.shipping or run.halted or run.sealing is not None or not run.items.fingerprints:
            return
        number, run.next_part = run.next_part, run.next_part + 1
        pages = set(run.items.fingerprints)
        run.sealing = done = Deferred[None]()
        try:
            path = yield run.items.cut(lambda fps: run.parts.cut(number, fps))
            self._itemized.commit(run.job.id, only=pages)
            yield self._ship_part(run, number, path)
        except Exception:
            log.failure("Worker: job {id}: cutting part {number} failed; it ships at the job's end or next run",
                        id=run.job.id, number=number)
        finally:
            run.sealing = None
            done.callback(None)

    @defer.inlineCallbacks
    def _ship_part(self, run: Run, number: int, path: str) -> Any:
        job = run.job
        assert job.feed_uri is not None
        uri = part_uri(job.feed_uri, number)
        if self._config.feed_format == "parquet":
            if path.endswith(".jl"):
                path = yield self._io(self._part_to_parquet, job, path)
            uri = parquet.parquet_uri(uri)
        window = (job.feed_window[0], job.feed_window[1]) if job.feed_window else None
        yield self._shipper.ship(path, uri, window)
        self.note(LogLevel.info, job, "Worker: job {id}: part {number} handed to the shipper ({name})",
                  number=number, name=os.path.basename(uri))

    def _columns(self, job: Job) -> list[tuple[str, str]]:
        """A Parquet feed's columns: the fields of the site the job was sent with, else of the worker's own."""
        rules = self._job_rules(job)
        sites = [s for s in rules.sites if s.name == job.spider] if rules is not None else []
        own = self._sites().get(job.spider)
        return columns(sites or ([own] if own is not None else []))

    def _part_to_parquet(self, job: Job, path: str) -> str:
        """Thread: a cut part as Parquet; its path."""
        target = path[: -len(".jl")] + parquet.EXTENSION
        parquet.convert(path, target, self._columns(job))
        os.unlink(path)
        return target

    def _to_parquet(self, job: Job) -> None:
        """Thread: the items file as Parquet with the spider's columns, then the items file removed."""
        items = self.items_path(job)
        if os.path.exists(items):
            parquet.convert(items, self.parquet_path(job), self._columns(job))
            os.unlink(items)

    def _finished(self, job: Job) -> None:
        """The job's last lines: its counts (and its stats, in its log only)."""
        stats = ", ".join(f"{k}={v}" for k, v in sorted(job.stats.items())) or "none"
        self._logs.line(job.id, f"Worker: job {job.id} stats: {stats}; feed {redact(job.feed_uri or '')}")
        self._dump_stats(job, "finished")
        left_out = self._logs.take_dropped(job.id)
        self.note(LogLevel.info, job, "Worker: job {id} finished: {items} items from {pages} pages, {failed} URLs "
                  "failed{left_out}", items=job.stats.get("items", 0), pages=job.stats.get("pages", 0),
                  failed=job.stats.get("failed", 0),
                  left_out=f" ({left_out} lines about single URLs not in this log)" if left_out else "")

    def _dump_stats(self, job: Job, reason: str) -> None:
        """Scrapy's stats block at the spider's close, in the job's log (ScrapydWeb and LogParser read it)."""
        start = job.start_time or job.created
        stats = scrapy_stats(job.stats, reason, start, job.end_time or start)
        self._logs.line(job.id, "Dumping Scrapy stats:", tail=dump(stats))

    def options(self, job: Job) -> JobOptions:
        """What the job's settings ask for (checked when it was accepted)."""
        try:
            return job_options(job.settings)
        except SettingError as e:  # a job file from elsewhere: run it with the worker's own settings
            log.error("Worker: job {id}: {error}; running it without its settings", id=job.id, error=str(e))
            return JobOptions()

    def note(self, level: LogLevel, job: Job, fmt: str, **fields: Any) -> None:
        """A line of the worker's log that is about ``job``: in the job's own log too."""
        self._logs.note(log, level, job.id, fmt, id=job.id, **fields)

    def end(self, job: Job, state: str) -> None:
        """``job`` ended in ``state`` now: it holds its feed's partition no more."""
        job.state, job.end_time = state, self._reactor.seconds()
        self._shipper.release(job.id)

    def arm_partitions(self) -> None:
        """The jobs from disk hold their partitions: the shipper may close partitions from now on."""
        self._shipper.arm_partitions()

    def hold(self, job: Job) -> None:
        """A job that will ship into a partition keeps it open (no marker) until it ends."""
        if job.feed_uri is not None and job.feed_window and job.state not in ENDED:
            self._shipper.hold(job.id, job.feed_uri)


def _forget_parts(parts: JobParts) -> None:
    """Thread: a cancelled job's part files not shipped, and its ledger, go."""
    parts.discard_parts()
    parts.remove()


def _cap(*caps: int) -> int:
    """The lowest of the caps that are set (0: none)."""
    return min((c for c in caps if c), default=0)


def _canonical_keys(recrawls: Mapping[str, Recrawl]) -> dict[str, Recrawl]:
    """DISTRIBUTED_RECRAWL by the canonical form of each URL (the form a job's URLs are fetched in); a URL that is
    none is left out (its fetch, if it is one of the job's, is a plain GET)."""
    found = {}
    for url, recrawl in recrawls.items():
        try:
            found[canonicalize(url)] = recrawl
        except BadURL:
            continue
    return found


def shipped_name(uri: str) -> str:
    """The name a file is shipped under: the last part of its feed URI's path."""
    from urllib.parse import unquote, urlsplit

    return os.path.basename(unquote(urlsplit(uri).path)) or uri
