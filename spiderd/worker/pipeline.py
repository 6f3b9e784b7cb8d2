"""The running jobs' URLs through fetch, retry, parse, store and the items file.

The worker has ``concurrency`` URL slots in all, shared by every running job:
whenever a slot frees, the next running job (in turn) with URLs left starts
one, so a job that is down to its last slow URLs never leaves the worker
idle while the jobs after it wait.  A job may be capped lower
(``job_concurrency``, its CONCURRENT_REQUESTS), and at most
``per_host_concurrency`` requests go to one host over all jobs; a job's own
CONCURRENT_REQUESTS_PER_DOMAIN and DOWNLOAD_DELAY apply inside those (see
:class:`~.files.JobHosts`), and its USER_AGENT and ROBOTSTXT_OBEY go to the
fetcher with each of its requests.  Network errors and 5xx are retried ``failure_threshold``
times (after ``retry_delay``, doubling): a URL waiting for its retry gives
its slot back.  A throttling answer (429, 503) blocks its host for every job
until its Retry-After (capped by ``max_retry_after``; without one, a back-off
of 1, 2, 4 ... seconds per consecutive throttle of the host) and queues the
URL again then without counting an attempt, ``max_throttles`` times at most.  A URL's slot is free once its page is parsed: the page store
commits in batches, and a job whose last URLs wait only for their commit asks
the store to write now rather than waiting for its flush timer.  So no timer
that the configuration did not ask for (a retry delay, a per-host delay) ever
paces a job.

An item is written only once its page is committed (a page the store refuses
is counted and logged), and the run settles only when every save has.
Every URL given to a job yields its item (a job scheduled again, or a
recrawl, makes fresh items), unless a redirect made that page's item within
``redirect_window``; a redirect to a page that this job, another running job
or (within the window) an earlier job made an item of makes none.  The all
role's own worker, with ``[items] skip_duplicate_content``, asks the pool too
(``claim_content``): a page whose content digest another URL gave first makes
no item and no stored page, and is counted as ``duplicate_content``.  Halting a run cancels whatever its URLs wait on (a host slot,
a fetch, a retry delay); what is being parsed or stored finishes, and then
the run is settled.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import TYPE_CHECKING, Any, Callable

from twisted.internet import defer, task
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from spiderd.core import status as st
from spiderd.core import throttle as th
from spiderd.core.retry import Backoff
from spiderd.core.urls import fingerprint, host_of
from spiderd.store.interfaces import IPageStore
from spiderd.worker.config import WorkerConfig
from spiderd.worker.hostslots import HostSlots
from spiderd.worker.run import Run

if TYPE_CHECKING:
    from spiderd.core.stats import CrawlStats
    from spiderd.fetch.extract import Extracted
    from spiderd.fetch.fetcher import Fetcher, FetchResult
    from spiderd.fetch.parsepool import ParsePool
    from spiderd.worker.itemized import Itemized

log = Logger()

DONE, RETRY, THROTTLED = "done", "retry", "throttled"
ClaimContent = Callable[[str, str], "Deferred[bool]"]  # the pool's claim_content(digest, url)
MAX_RETRY_DELAY = 60.0


def retryable(status: int) -> bool:
    """5xx and network errors are retried; 200, other HTTP codes and final failures are not."""
    if 500 <= status < 600:
        return True
    return status < 0 and status not in st.FINAL_CODES


class Pipeline:
    """Works the running jobs' URLs with the shared fetcher, parser and page store."""

    def __init__(self, reactor: IReactorTime, config: WorkerConfig, fetcher: Fetcher, parser: ParsePool,
                 pages: IPageStore | None, itemized: Itemized | None = None, clock: IReactorTime | None = None,
                 stats: CrawlStats | None = None, claim_content: ClaimContent | None = None) -> None:
        """``reactor`` does the I/O; ``clock`` (default: the reactor) runs the retry and per-host timers;
        ``stats`` (the node's CrawlStats, if given) counts every fetch, for its status and metrics;
        ``claim_content`` (the pool's, in the all role with ``skip_duplicate_content``): a page whose content
        digest another URL gave first gives no item and no stored page."""
        self._reactor = reactor
        self._clock = self.clock = clock or reactor
        self._config = config
        self._fetcher = fetcher
        self._parser = parser
        self._pages = pages
        self.hosts = HostSlots(config.per_host_concurrency, config.per_host_delay, self._clock,
                               config.host_overrides, config.adaptive, config.adaptive_overrides)
        self.throttles = th.HostThrottles(config.max_retry_after)  # consecutive 429/503 per host: the back-off
        self.itemized = itemized
        self.totals: Counter[str] = Counter()  # over every job since the start
        self.stats = stats
        self._claim_content = claim_content
        self.in_flight = 0  # URLs holding one of the worker's slots
        self._runs: deque[Run] = deque()  # the runs with URLs to fetch, in turn

    # -- the worker's slots -----------------------------------------------------------------------------------

    def start(self, run: Run) -> None:
        """Take ``run``'s URLs into the rotation and start what the free slots allow."""
        self._runs.append(run)
        self.fill()
        run.check_settled()

    def fill(self) -> None:
        """Start URLs, the running jobs taking turns, while the worker has free slots."""
        while self.in_flight < self._config.concurrency:
            run = self._next_run()
            if run is None:
                return
            url, attempt = run.todo.popleft()
            self._begin(run, url, attempt)

    def _next_run(self) -> Run | None:
        """The next run in turn that may start a URL (runs with nothing left leave the rotation)."""
        for _ in range(len(self._runs)):
            run = self._runs[0]
            self._runs.rotate(-1)
            if run.can_start():
                return run
        self._runs = deque(r for r in self._runs if r.todo and not r.halted)
        return None

    def _begin(self, run: Run, url: str, attempt: int) -> None:
        run.active += 1
        self.in_flight += 1
        d = self._work_url(run, url, attempt)
        d.addErrback(self._url_failed, run, url)
        d.addBoth(self._url_over, run)

    def _url_over(self, _: Any, run: Run) -> None:
        run.active -= 1
        self.in_flight -= 1
        self._settling(run)
        self.fill()

    def _url_failed(self, failure: Failure, run: Run, url: str) -> None:
        if not (run.halted and failure.check(CancelledError)):
            log.failure("Worker: job {id}: {url} failed", failure, id=run.job.id, url=url)
            run.note(f"{url} failed: {failure.type.__name__}: {failure.getErrorMessage()}", LogLevel.error)
            run.stats["failed"] += 1

    def _settling(self, run: Run) -> None:
        """Settle ``run`` if it can; if only commits are left, have the store write them now."""
        if run.fetching_done and run.storing and self._pages is not None:
            self._pages.flush()
        run.check_settled()

    # -- one URL ----------------------------------------------------------------------------------------------

    @defer.inlineCallbacks
    def _work_url(self, run: Run, url: str, attempt: int) -> Any:
        result = yield self._fetch(run, url)
        if run.halted:
            return
        outcome = yield self._outcome(run, result)
        if outcome == THROTTLED and not run.halted:
            self._throttled(run, url, attempt, result)
        elif outcome == RETRY and not run.halted:
            self._retry(run, url, attempt + 1, _why(result))

    def _throttled(self, run: Run, url: str, attempt: int, result: FetchResult) -> None:
        """A 429 or 503 (its host blocked by ``_fetch`` until its Retry-After, or for the back-off of its
        consecutive throttles): ``url`` is queued again then at the same attempt, up to ``max_throttles``
        times; past them the throttle is a failure, retried as any other."""
        wait = max(0.0, self.hosts.blocked_until(host_of(url)) - self._clock.seconds())  # as _fetch blocked it
        run.stats["throttled"] += 1
        if self.stats is not None:
            self.stats.errors["throttled"] += 1
        run.throttles[url] += 1
        why = th.reason(result.status, wait)
        if run.throttles[url] > self._config.max_throttles:
            self._retry(run, url, attempt + 1, why)
            return
        run.note(f"{url}: {why}", LogLevel.info)
        run.delayed += 1
        run.wait(task.deferLater(self._clock, wait)).addBoth(self._retry_due, run, url, attempt)

    def _retry(self, run: Run, url: str, attempt: int, why: str) -> None:
        """Queue ``url`` again after its retry delay (its slot is free meanwhile), or count it failed."""
        if attempt > self._config.failure_threshold:
            run.stats["failed"] += 1
            run.note(f"{url} failed: {why}, {attempt} attempts", LogLevel.warn)
            return
        delay = Backoff(self._config.retry_delay, MAX_RETRY_DELAY).delay(attempt)
        run.delayed += 1
        run.wait(task.deferLater(self._clock, delay)).addBoth(self._retry_due, run, url, attempt)

    def _retry_due(self, result: Any, run: Run, url: str, attempt: int) -> None:
        run.delayed -= 1
        if not run.halted:
            run.todo.appendleft((url, attempt))
            if run not in self._runs:
                self._runs.append(run)
        self._settling(run)
        self.fill()

    @defer.inlineCallbacks
    def _fetch(self, run: Run, url: str) -> Any:
        host, own = host_of(url), run.hosts
        if own is not None:
            yield run.wait(own.acquire(host))
        try:
            yield run.wait(self.hosts.acquire(host))
        except BaseException:
            if own is not None:
                own.abandon(host)
            raise
        if own is not None:
            own.started(host)
        result = None
        try:
            result = yield run.wait(self._fetcher.fetch(url, **run.fetch_options))
            if th.throttled(result.status):  # blocked before the slot frees, so no waiting request slips in
                wait = self.throttles.wait(host, result.retry_after)
                self.hosts.block(host, self._clock.seconds() + wait)
        finally:
            self.hosts.release(host, getattr(result, "elapsed", None))
            if own is not None:
                own.release(host)
        return result

    @defer.inlineCallbacks
    def _outcome(self, run: Run, result: FetchResult) -> Any:
        run.stats["requests"] += 1
        run.stats[f"status_{st.name(result.status)}"] += 1
        if self.stats is not None:
            self.stats.fetched(result.status, result.wire_bytes, result.elapsed)
        if run.warc is not None and getattr(result, "headers", None) is not None and not run.halted:
            run.warc.write(result)
        if th.throttled(result.status):
            return THROTTLED
        if result.status > 0:
            self.throttles.answered(host_of(result.url))
        if result.status == 200:
            outcome = yield self._page(run, result)
            return outcome
        if retryable(result.status):
            return RETRY
        run.stats["failed"] += 1
        run.note(f"{result.url} failed: {_why(result)} (not retried)", LogLevel.warn)
        return DONE

    def _fresh(self, run: Run, url: str) -> bool:
        """True if ``url`` (a page fetched for this run) should make an item (see :mod:`.itemized`)."""
        if url in run.seen:
            return False
        if self.itemized is None:
            return True
        fp = fingerprint(url)
        if fp in run.direct:
            return self.itemized.direct(fp, run.job.id)
        return self.itemized.claim(fp, run.job.id)

    @defer.inlineCallbacks
    def _page(self, run: Run, result: FetchResult) -> Any:
        url = result.final_url
        if not self._fresh(run, url):
            run.stats["duplicates"] += 1
            return DONE
        run.seen.add(url)
        preset = self._pages.preset if self._pages is not None else None
        try:
            extracted = yield self._parser.parse(url, result.body, result.content_type, "detail",
                                                 self._clock.seconds(), result.status, compress=preset,
                                                 robots_tag=result.robots_tag)
        except Exception:
            run.seen.discard(url)
            log.failure("Worker: job {id}: parsing {url} failed", id=run.job.id, url=url)
            run.note(f"{url}: parsing failed (see the worker's log)", LogLevel.error)
            run.stats["processing_errors"] += 1
            return RETRY
        if run.halted:
            return DONE
        if extracted.noindex:  # the page's robots directives: no item, no stored page; the URL is done
            run.stats["noindex"] += 1
            run.note(f"{url}: noindex (no item, not stored)")
            return DONE
        if extracted.canonical is not None:
            run.seen.add(extracted.canonical)
        if self._claim_content is not None and extracted.digest is not None:
            holds = yield self._claim_content(extracted.digest, extracted.canonical or url)
            if not holds:  # another URL gave this content first: no item, no stored page; the URL is done
                run.stats["duplicate_content"] += 1
                if self.stats is not None:
                    self.stats.incr("duplicate_content")
                return DONE
            if run.halted:
                return DONE
        run.storing += 1
        saved = self._store(extracted.canonical or url, result.body, extracted)
        saved.addCallbacks(lambda _: self._stored(run, extracted), lambda f: self._not_stored(run, url, f))
        saved.addBoth(lambda _: self._storing_over(run))
        return DONE

    def _store(self, url: str, body: bytes, extracted: Extracted) -> Deferred[None]:
        if self._pages is None:
            return defer.succeed(None)
        return self._pages.save(url, fingerprint(url), body, compressed=extracted.compressed, digest=extracted.digest)

    def _stored(self, run: Run, extracted: Extracted) -> None:
        run.stats["pages"] += 1
        if extracted.item is not None:
            run.items.write(extracted.item)
            run.stats["items"] += 1
        elif extracted.error:
            run.stats[f"parse_{extracted.error}"] += 1

    def _not_stored(self, run: Run, url: str, failure: Failure) -> None:
        log.failure("Worker: job {id}: storing {url} failed", failure, id=run.job.id, url=url)
        run.note(f"{url}: storing the page failed: {failure.getErrorMessage()}", LogLevel.error)
        run.stats["processing_errors"] += 1

    def _storing_over(self, run: Run) -> None:
        run.storing -= 1
        run.check_settled()


def _why(result: FetchResult) -> str:
    """Why a fetch did not give a page, in a few words: ``HTTP 404``, ``timeout``, ``robots``."""
    if result.status == 200:
        return "processing error (parsing the page failed)"
    if result.status > 0:
        return f"HTTP {result.status}"
    if result.status == st.ROBOTS_DENIED:
        return "denied by robots.txt"
    return getattr(result, "reason", None) or st.reason(result.status)  # the fetcher's words, as the pool keeps them
