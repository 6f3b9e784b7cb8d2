"""The running jobs' URLs through the engine: the worker's queue, its fetch slots, and what an outcome means for a
job (its retries, its items file, its counters).

The worker has ``concurrency`` URL slots in all, shared by every running job.  A job's URLs wait in the worker's
:class:`~spiderd.engine.hostqueue.HostQueue`, per host, holding no slot: hosts take turns through the engine's
politeness (at most ``per_host_concurrency`` requests to one host over all jobs, ``per_host_delay`` between
starts, a robots.txt Crawl-delay, ``[fetch.hosts]`` overrides, adaptive delay, per-IP groups), and the jobs of
one host take turns in its line.  A job may be capped lower (``job_concurrency``, its CONCURRENT_REQUESTS), and
its own CONCURRENT_REQUESTS_PER_DOMAIN and DOWNLOAD_DELAY apply inside the worker's (see
:class:`~.files.JobHosts`); its USER_AGENT and ROBOTSTXT_OBEY go to the fetcher with each of its requests.  So a
URL whose host is paced, blocked or full never holds a slot that another URL could use.

A fetched answer goes through the node's page engine (:class:`~spiderd.engine.steps.PageSteps`, the same steps
as the crawler's); this module is the worker's port to it (:class:`JobPort`) and decides what the outcome means.
Network errors and 5xx are retried ``failure_threshold`` times, as the frontier's pool retries them: at once,
behind the URLs waiting for the same host (with a ``retry_delay``, after it, doubling): a URL waiting for its
retry holds nothing.  A throttling answer (429, 503) blocks its host for every job until its Retry-After
(capped by ``max_retry_after``; without one, a back-off of 1, 2, 4 ... seconds per consecutive throttle of the
host) and queues the URL again at once, without counting an attempt, ``max_throttles`` times at most: it waits in
its host's line for the block to end.  A URL's slot is free once its page is parsed: the page store commits in
batches, and a job whose last URLs wait only for their commit asks the store to write now rather than waiting
for its flush timer.  So no timer that the configuration did not ask for (a retry delay, a per-host delay) ever
paces a job.

An item is written only once its page is committed (a page the store refuses is counted and logged), and the run
settles only when every save has.  Every URL given to a job yields its item (a job scheduled again, or a recrawl,
makes fresh items), unless a redirect made that page's item within ``redirect_window``; a redirect to a page that
this job, another running job or (within the window) an earlier job made an item of makes none.  The all role's
own worker, with ``[items] skip_duplicate_content``, asks the pool too (``claim_content``, through the engine): a
page whose content digest another URL gave first makes no item and no stored page, and is counted as
``duplicate_content``.  Halting a run drops its queued URLs and cancels whatever the others wait on (a fetch, a
retry delay); what is being parsed or stored finishes, and then the run is settled.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Callable

from twisted.internet import defer, task
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from spiderd.core import conditional as cg
from spiderd.core import status as st
from spiderd.core.recrawls import Recrawl
from spiderd.core.retry import Backoff
from spiderd.core.rules import PoliteRules
from spiderd.core.storage import storage_error
from spiderd.core import throttle as th
from spiderd.core.urls import fingerprint, host_of
from spiderd.engine.hostqueue import Entry, HostQueue, entry
from spiderd.engine.politeness import Politeness
from spiderd.engine.steps import Outcome, PageSteps, Verdict
from spiderd.store.interfaces import IPageStore
from spiderd.worker.config import WorkerConfig
from spiderd.worker.run import Run

if TYPE_CHECKING:
    from spiderd.core.stats import CrawlStats
    from spiderd.fetch.extract import Extracted, Rules
    from spiderd.fetch.fetcher import Fetcher, FetchResult
    from spiderd.worker.itemized import Itemized
    from spiderd.worker.jobrules import JobRules

log = Logger()

MAX_RETRY_DELAY = 60.0


def retryable(status: int) -> bool:
    """5xx and network errors are retried; 200, other HTTP codes and final failures are not."""
    if 500 <= status < 600:
        return True
    return status < 0 and status not in st.FINAL_CODES


def worker_politeness(config: WorkerConfig) -> Politeness:
    """The worker's politeness over all its jobs, from ``[fetch]``'s per-host settings."""
    return Politeness(delay=config.per_host_delay, concurrency=config.per_host_concurrency,
                      overrides=dict(config.host_overrides), adaptive=config.adaptive,
                      adaptive_overrides=dict(config.adaptive_overrides))


class Pipeline:
    """Works the running jobs' URLs with the shared fetcher and the node's page engine."""

    def __init__(self, reactor: IReactorTime, config: WorkerConfig, fetcher: Fetcher, steps: PageSteps,
                 itemized: Itemized | None = None, clock: IReactorTime | None = None,
                 stats: CrawlStats | None = None, on_slack: Callable[[], None] | None = None,
                 on_fetched: Callable[[Recrawl], None] | None = None) -> None:
        """``reactor`` does the I/O; ``clock`` (default: the reactor) runs the retry and per-host timers;
        ``stats`` (the node's CrawlStats, if given) counts every fetch, for its status and metrics; ``on_slack``
        is called when the worker has free slots that no running job's URL may take now (the runner may start
        another job); ``on_fetched`` is told each job URL's stored 200 and 304 (its URL, the time, the answer's
        validators: the all role's pool keeps them for the next recrawl)."""
        self._reactor = reactor
        self.clock = clock or reactor
        self._config = config
        self._fetcher = fetcher
        self.steps = steps
        self.job_rules: JobRules | None = None  # the site rules jobs carry, compiled per version
        self.queue = HostQueue(worker_politeness(config))
        self.turns = self.queue.turns(self.clock)  # a rendered page's sub-requests count in the same politeness
        self.itemized = itemized
        self.totals: Counter[str] = Counter()  # over every job since the start
        self.stats = stats
        self.on_slack = on_slack
        self.on_fetched = on_fetched
        self.in_flight = 0  # URLs holding one of the worker's slots
        self._wake: IDelayedCall | None = None
        self._gate = steps.gate  # the storage gate: no URL starts while it holds
        if self._gate is not None:
            self._gate.add_listener(self.fill)

    # -- the worker's slots -----------------------------------------------------------------------------------

    def start(self, run: Run) -> None:
        """Queue ``run``'s URLs and start what the free slots allow."""
        run.queue = self.queue
        while run.todo:
            url, attempt = run.todo.popleft()
            self._queue(run, url, attempt)
        self.fill()
        run.check_settled()

    def _queue(self, run: Run, url: str, attempt: int) -> None:
        run.queued += 1
        self.queue.add(entry(run, url, attempt))

    def fill(self) -> None:
        """Start URLs whose host's turn has come while the worker has free slots; wake when the next one comes."""
        if self._gate is not None and self._gate.blocked():
            return  # a sink refuses writes: the gate calls fill when it tries again
        now = self.clock.seconds()
        while self.in_flight < self._config.concurrency:
            taken = self.queue.take(now)
            if taken is None:
                break
            self._begin(taken, now)
        self._wake_later(now)
        if self.in_flight < self._config.concurrency and self.on_slack is not None:
            self.on_slack()

    def set_politeness(self, rules: PoliteRules) -> None:
        """Pace hosts by ``rules`` from their next request on, for every job (the configuration changed)."""
        self.queue.politeness.configure(rules)
        self.fill()

    def _wake_later(self, now: float) -> None:
        """Call ``fill`` when the queue's next host is due (one timer, moved earlier when need be)."""
        due = self.queue.next_time() if self.queue.waiting else None
        if due is None:
            self.stop()
            return
        if self.in_flight >= self._config.concurrency:
            return
        if self._wake is not None and self._wake.active():
            if self._wake.getTime() <= due:
                return
            self._wake.cancel()
        self._wake = self.clock.callLater(max(0.0, due - now), self._woken)

    def _woken(self) -> None:
        self._wake = None
        self.fill()

    def stop(self) -> None:
        """Cancel the wake timer (the runs are halted or finished)."""
        if self._wake is not None and self._wake.active():
            self._wake.cancel()

    def _begin(self, taken: Entry, now: float) -> None:
        run: Run = taken.owner  # type: ignore[assignment]  # (the queue's owners are runs)
        run.queued -= 1
        run.active += 1
        self.in_flight += 1
        if run.hosts is not None:
            run.hosts.started(taken.host, now)
        d = self._work(run, taken)
        d.addErrback(self._url_failed, run, taken.url)
        d.addBoth(self._url_over, run)

    def _url_over(self, _: Any, run: Run) -> None:
        run.active -= 1
        self.in_flight -= 1
        self.queue.freed(run)
        self._settling(run)
        self.fill()

    def _url_failed(self, failure: Failure, run: Run, url: str) -> None:
        if not (run.halted and failure.check(CancelledError)):
            log.failure("Worker: job {id}: {url} failed", failure, id=run.job.id, url=url)
            run.note(f"{url} failed: {failure.type.__name__}: {failure.getErrorMessage()}", LogLevel.error)
            run.stats["failed"] += 1

    def _settling(self, run: Run) -> None:
        """Settle ``run`` if it can; if only commits are left, have the store write them now."""
        if run.fetching_done and run.storing and self.steps.store is not None:
            self.steps.store.flush()
        run.check_settled()

    # -- one URL ----------------------------------------------------------------------------------------------

    def _work(self, run: Run, taken: Entry) -> Deferred[None]:
        """Fetch, then the engine's steps (a throttle blocks the host before its slot frees), then the outcome
        (plain calls and callbacks: this runs for every URL)."""
        recrawl = run.recrawl.get(taken.url)
        sent = recrawl.validators if recrawl is not None else None  # a recrawl: conditional on what was kept
        try:
            kind = "detail" if run.warc is None else None  # (a fetch child keeps no answer for the WARC file)
            fetching = run.wait(self.steps.fetch(self._fetcher, taken.url, sent, turns=self.turns, kind=kind,
                                                 rules=run.rules, **run.fetch_options))
        except Exception:
            self._fetch_over(taken, run, None)
            return defer.fail()
        return fetching.addCallbacks(self._fetched, self._fetch_failed, callbackArgs=(run, taken, recrawl, sent),
                                     errbackArgs=(run, taken))

    def _fetch_failed(self, failure: Failure, run: Run, taken: Entry) -> Failure:
        self._fetch_over(taken, run, None)
        return failure

    def _fetch_over(self, taken: Entry, run: Run, elapsed: float | None) -> None:
        """The fetch's host slot frees (its politeness learns how long the answer took)."""
        self.queue.done(taken.host, self.clock.seconds(), elapsed)
        if run.hosts is not None:
            run.hosts.released(taken.host)

    def _fetched(self, result: FetchResult, run: Run, taken: Entry, recrawl: Recrawl | None,
                 sent: cg.Validators | None) -> Deferred[None] | None:
        try:
            if run.halted:
                return None
            if recrawl is not None:
                result.previous_fetch = recrawl.fetched_at  # (a 304's WARC revisit record refers to it)
            self._count(run, result)
            processing = self.steps.process(result, JobPort(self, run), sent)
        finally:
            self._fetch_over(taken, run, result.elapsed)
        return processing.addCallbacks(self._processed, self._processing_failed, callbackArgs=(run, taken),
                                       errbackArgs=(run, taken))

    def _processing_failed(self, failure: Failure, run: Run, taken: Entry) -> Failure | None:
        if not failure.check(Exception):
            return failure
        log.failure("Worker: job {id}: processing {url} failed", failure, id=run.job.id, url=taken.url)
        run.note(f"{taken.url}: parsing failed (see the worker's log)", LogLevel.error)
        run.stats["processing_errors"] += 1
        if not run.halted:
            self._retry(run, taken, "processing error (parsing the page failed)")
        return None

    def _processed(self, outcome: Outcome, run: Run, taken: Entry) -> None:
        if not run.halted:
            self._settle(run, taken, outcome)

    def _count(self, run: Run, result: FetchResult) -> None:
        run.stats["requests"] += 1
        run.stats[f"status_{st.name(result.status)}"] += 1
        if self.stats is not None:
            self.stats.fetched(result.status, result.wire_bytes, result.elapsed)

    def _settle(self, run: Run, taken: Entry, outcome: Outcome) -> None:
        """What the outcome means for the job."""
        result, verdict = outcome.result, outcome.verdict
        if verdict is Verdict.THROTTLED:
            self._throttled(run, taken, result, outcome.wait)
        elif verdict is Verdict.FAILED and retryable(result.status):
            self._retry(run, taken, _why(result))
        elif verdict is Verdict.FAILED:
            run.stats["failed"] += 1
            run.note(f"{result.url} failed: {_why(result)} (not retried)", LogLevel.warn)
        elif verdict is Verdict.DUPLICATE:
            run.stats["duplicates"] += 1
        elif verdict is Verdict.NOT_MODIFIED:
            self._not_modified(run, taken, result)
        elif verdict is Verdict.PAGE:
            self._page(run, outcome)

    def _not_modified(self, run: Run, taken: Entry, result: FetchResult) -> None:
        """A 304 to a recrawl's conditional GET: done and unchanged, no item line."""
        run.stats["not_modified"] += 1
        if self.stats is not None:
            self.stats.incr("not_modified")
        recrawl = run.recrawl[taken.url]
        assert recrawl.validators is not None  # (only a conditional fetch is NOT_MODIFIED)
        self._tell(taken.url, recrawl.validators.updated(result.validators), result.fetched_at)

    def _tell(self, url: str, validators: cg.Validators | None, when: float = 0.0) -> None:
        """Tell ``on_fetched`` of a job URL's answer, in at ``when`` (its WARC-Date; 0: now); its failure is
        logged: the job goes on."""
        if self.on_fetched is None:
            return
        try:
            self.on_fetched(Recrawl(url, when or self.clock.seconds(), validators))
        except Exception:
            log.failure("Worker: telling the fetch of {url}", url=url)

    def _throttled(self, run: Run, taken: Entry, result: FetchResult, wait: float) -> None:
        """A 429 or 503 (its host blocked by the port until its Retry-After, or for the back-off of its
        consecutive throttles): ``url`` waits in its host's line again at the same attempt, up to
        ``max_throttles`` times; past them the throttle is a failure, retried as any other."""
        run.stats["throttled"] += 1
        if self.stats is not None:
            self.stats.errors["throttled"] += 1
        run.throttles[taken.url] += 1
        why = th.reason(result.status, wait)
        if run.throttles[taken.url] > self._config.max_throttles:
            self._retry(run, taken, why)
            return
        run.note(f"{taken.url}: {why}", LogLevel.info)
        self._queue(run, taken.url, taken.attempt)

    def _retry(self, run: Run, taken: Entry, why: str) -> None:
        """Queue the URL again after its retry delay (it holds nothing meanwhile), or count it failed."""
        attempt = taken.attempt + 1
        if attempt > self._config.failure_threshold:
            run.stats["failed"] += 1
            run.note(f"{taken.url} failed: {why}, {attempt} attempts", LogLevel.warn)
            return
        delay = Backoff(self._config.retry_delay, MAX_RETRY_DELAY).delay(attempt)
        if delay <= 0:
            self._queue(run, taken.url, attempt)
            return
        run.delayed += 1
        run.wait(task.deferLater(self.clock, delay)).addBoth(self._retry_due, run, taken.url, attempt)

    def _retry_due(self, result: Any, run: Run, url: str, attempt: int) -> None:
        run.delayed -= 1
        if not run.halted:
            self._queue(run, url, attempt)
        self._settling(run)
        self.fill()

    def _page(self, run: Run, outcome: Outcome) -> None:
        """A parsed page: noindex and duplicate content end here; else its item is written once it is stored."""
        extracted = outcome.extracted
        assert extracted is not None  # (a PAGE has one)
        url = outcome.result.final_url
        if extracted.noindex:  # the page's robots directives: no item, no stored page; the URL is done
            run.stats["noindex"] += 1
            run.note(f"{url}: noindex (no item, not stored)")
            return
        if outcome.duplicate_content:  # another URL gave this content first: no item, no stored page
            run.stats["duplicate_content"] += 1
            if self.stats is not None:
                self.stats.incr("duplicate_content")
            return
        run.storing += 1
        if outcome.saved is None:  # not stored (no page store): the item at once, with no Deferred to wait on
            self._stored_now(run, extracted, outcome.result)
            return
        outcome.saved.addCallbacks(lambda _: self._stored(run, extracted, outcome.result),
                                   lambda f: self._not_stored(run, url, f))
        outcome.saved.addBoth(lambda _: self._storing_over(run))

    def _stored_now(self, run: Run, extracted: Extracted, result: FetchResult) -> None:
        try:
            self._stored(run, extracted, result)
        except Exception:
            log.failure("Worker: job {id}: the item of {url} failed", id=run.job.id, url=result.final_url)
        self._storing_over(run)

    def _stored(self, run: Run, extracted: Extracted, result: FetchResult) -> None:
        run.stats["pages"] += 1
        recrawl = run.recrawl.get(result.url)
        self._tell(result.url, result.validators, result.fetched_at)
        if extracted.item is not None:
            item, line = extracted.item, extracted.line  # (its line as the parse child encoded it, or None)
            if recrawl is not None:  # seed 004's mod_detail: a changed page, and when it was fetched before
                item, line = {**item, "recrawl": True, "previous_fetched_at": recrawl.fetched_at}, None
                run.stats["recrawled_items"] += 1
            run.items.write(item, line)
            run.stats["items"] += 1
            if self.stats is not None:
                self.stats.item_made(run.job.spider, extracted.item)
        elif extracted.error:
            run.stats[f"parse_{extracted.error}"] += 1

    def _not_stored(self, run: Run, url: str, failure: Failure) -> None:
        if storage_error(failure) is None:  # (the storage gate tells of a full disk, once a while)
            log.failure("Worker: job {id}: storing {url} failed", failure, id=run.job.id, url=url)
        run.note(f"{url}: storing the page failed: {failure.getErrorMessage()}", LogLevel.error)
        run.stats["processing_errors"] += 1

    def _storing_over(self, run: Run) -> None:
        run.storing -= 1
        run.check_settled()

    # -- redirects and repeats --------------------------------------------------------------------------------

    def fresh(self, run: Run, url: str) -> bool:
        """True if ``url`` (a page fetched for this run) should make an item (see :mod:`.itemized`)."""
        if url in run.seen:
            return False
        fp = fingerprint(url)
        if fp in run.sealed:  # a part of an earlier run of the job holds its item
            return False
        if self.itemized is None:
            return True
        if fp in run.direct:
            return self.itemized.direct(fp, run.job.id)
        return self.itemized.claim(fp, run.job.id)


class JobPort:
    """The engine's port for one URL of a job (see :class:`spiderd.engine.steps.Port`)."""

    def __init__(self, pipeline: Pipeline, run: Run) -> None:
        self._pipeline = pipeline
        self._run = run

    def throttled(self, result: FetchResult, wait: float) -> None:
        """Block the host for every job now, before the fetch's host slot frees (no waiting URL slips in)."""
        self._pipeline.queue.block(host_of(result.url), self._pipeline.clock.seconds() + wait)

    def archive(self, result: FetchResult) -> Deferred[None] | None:
        if self._run.warc is not None:
            self._run.warc.write(result)
        return None

    def is_new(self, result: FetchResult) -> bool:
        """True the first time this job (or, through a redirect, any job) makes the page's item."""
        url = result.final_url
        if not self._pipeline.fresh(self._run, url):
            return False
        self._run.seen.add(url)
        return True

    def kind(self, result: FetchResult) -> str:
        return "detail"

    def rules(self) -> Rules | None:
        """The rules the job was sent with (its version, for the whole job), or None: the worker's own."""
        rules: Rules | None = self._run.rules
        return rules

    def parsed(self, result: FetchResult, extracted: Extracted) -> Deferred[Any] | None:
        """A job follows no links; its page's canonical URL is its own too (no second item of it)."""
        if extracted.canonical is not None and not extracted.noindex:
            self._run.seen.add(extracted.canonical)
        return None

    def wanted(self) -> bool:
        return not self._run.halted

    def keep_waiting(self) -> bool:
        return not self._run.halted

    def parse_failed(self, result: FetchResult) -> None:
        self._run.seen.discard(result.final_url)


def _why(result: FetchResult) -> str:
    """Why a fetch did not give a page, in a few words: ``HTTP 404``, ``timeout``, ``robots``."""
    if result.status == 200:
        return "processing error (parsing the page failed)"
    if result.status > 0:
        return f"HTTP {result.status}"
    if result.status == st.ROBOTS_DENIED:
        return "denied by robots.txt"
    return result.reason or st.reason(result.status)  # the fetcher's words, as the pool keeps them
