"""One job's URLs through fetch, retry, parse, store and the items file.

``job_concurrency`` URLs of a run are in flight at once, and at most
``per_host_concurrency`` requests per host over all runs.  Network errors and
5xx are retried ``failure_threshold`` times (after ``retry_delay``, doubling);
a page that cannot be parsed is retried the same way.  A URL's slot is free
once its page is parsed: the page store commits in batches (a second or so),
and waiting for that would cap a job near ``job_concurrency`` pages a second.
An item is written only once its page is committed (a page the store refuses
is counted and logged), the run settles only when every save has, and a
redirect to a page the job has already made an item of makes none.  Halting a run cancels whatever its URLs
wait on (a host slot, a fetch, a retry delay); what is being parsed or stored
finishes, and then the run is settled.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

from twisted.internet import defer, task
from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from .. import status as st
from ..urls import fingerprint, host_of
from .config import WorkerConfig
from .files import HostSlots, ItemsFile
from .jobs import Job

log = Logger()

DONE, RETRY = "done", "retry"
MAX_RETRY_DELAY = 60.0


def retryable(status: int) -> bool:
    """5xx and network errors are retried; 200, other HTTP codes and final failures are not."""
    if 500 <= status < 600:
        return True
    return status < 0 and status not in st.FINAL_CODES


class TeeCounter(Counter[str]):
    """A Counter whose changes also go to ``parent`` (the worker's totals over every job)."""

    def __init__(self, parent: Counter[str] | None = None) -> None:
        super().__init__()
        self._parent = parent

    def __setitem__(self, key: str, value: int) -> None:
        if self._parent is not None:
            self._parent[key] += value - self.get(key, 0)
        super().__setitem__(key, value)


class Run:
    """One execution of a job: its URLs to do, what they wait on, its counters."""

    def __init__(self, job: Job, items: ItemsFile, totals: Counter[str] | None = None) -> None:
        self.job = job
        self.items = items
        self.todo: deque[str] = deque()
        self.active = 0
        self.storing = 0
        self.halted: str | None = None  # "cancelled" or "interrupted"
        self.shipping = False
        self.seen: set[str] = set()
        self.stats: Counter[str] = TeeCounter(totals)
        self.blocking: set[Deferred[Any]] = set()
        self.settled: Deferred[None] = Deferred()

    def wait(self, d: Deferred[Any]) -> Deferred[Any]:
        """Track ``d`` so that halting cancels it."""
        self.blocking.add(d)
        return d.addBoth(self._untrack, d)

    def _untrack(self, result: Any, d: Deferred[Any]) -> Any:
        self.blocking.discard(d)
        return result

    def halt(self, why: str) -> None:
        """Stop fetching: drop the URLs not started, cancel what the others wait on."""
        self.halted = self.halted or why
        self.todo.clear()
        for d in list(self.blocking):
            d.cancel()
        self.check_settled()

    def check_settled(self) -> None:
        """Fire ``settled`` once no URL is in flight and none is left (or the run is halted)."""
        if self.active == 0 and self.storing == 0 and (self.halted or not self.todo) and not self.settled.called:
            self.settled.callback(None)


class Pipeline:
    """Works runs' URLs with the shared fetcher, parser and page store."""

    def __init__(self, reactor: Any, config: WorkerConfig, fetcher: Any, parser: Any, pages: Any,
                 itemized: Any = None) -> None:
        self._reactor = reactor
        self._config = config
        self._fetcher = fetcher
        self._parser = parser
        self._pages = pages
        self.hosts = HostSlots(config.per_host_concurrency, config.per_host_delay, reactor, config.host_overrides)
        self.itemized = itemized
        self.totals: Counter[str] = Counter()  # over every job since the start
        self.stats: Any = None  # the node's CrawlStats, when its status and metrics count the worker's fetches

    def fill(self, run: Run) -> None:
        """Start URLs of ``run`` up to ``job_concurrency``."""
        while run.todo and run.active < self._config.job_concurrency and not run.halted:
            url = run.todo.popleft()
            run.active += 1
            d = self._fetch_url(run, url)
            d.addErrback(self._url_failed, run, url)
            d.addBoth(self._url_over, run)
        run.check_settled()

    def _url_over(self, _: Any, run: Run) -> None:
        run.active -= 1
        self.fill(run)

    def _url_failed(self, failure: Failure, run: Run, url: str) -> None:
        if not (run.halted and failure.check(CancelledError)):
            log.failure("Worker: job {id}: {url} failed", failure, id=run.job.id, url=url)
            run.stats["failed"] += 1

    @defer.inlineCallbacks
    def _fetch_url(self, run: Run, url: str) -> Any:
        for attempt in range(self._config.failure_threshold + 1):
            if attempt:
                delay = min(MAX_RETRY_DELAY, self._config.retry_delay * 2 ** (attempt - 1))
                yield run.wait(task.deferLater(self._reactor, delay))
            result = yield self._fetch(run, url)
            if run.halted:
                return
            outcome = yield self._outcome(run, result)
            if outcome != RETRY or run.halted:
                return
        run.stats["failed"] += 1

    @defer.inlineCallbacks
    def _fetch(self, run: Run, url: str) -> Any:
        host = host_of(url)
        yield run.wait(self.hosts.acquire(host))
        try:
            result = yield run.wait(self._fetcher.fetch(url))
        finally:
            self.hosts.release(host)
        return result

    @defer.inlineCallbacks
    def _outcome(self, run: Run, result: Any) -> Any:
        run.stats["requests"] += 1
        run.stats[f"status_{st.name(result.status)}"] += 1
        if self.stats is not None:
            self.stats.fetched(result.status, result.wire_bytes, result.elapsed)
        if result.status == 200:
            outcome = yield self._page(run, result)
            return outcome
        if retryable(result.status):
            return RETRY
        run.stats["failed"] += 1
        return DONE

    @defer.inlineCallbacks
    def _page(self, run: Run, result: Any) -> Any:
        url = result.final_url
        fresh = url not in run.seen and (self.itemized is None or self.itemized.claim(fingerprint(url), run.job.id))
        if not fresh:  # a redirect to a page this job, or another, has made an item of
            run.stats["duplicates"] += 1
            return DONE
        run.seen.add(url)
        preset = self._pages.preset if self._pages is not None else None
        try:
            extracted = yield self._parser.parse(url, result.body, result.content_type, "detail",
                                                 self._reactor.seconds(), result.status, compress=preset)
        except Exception:
            run.seen.discard(url)
            log.failure("Worker: job {id}: parsing {url} failed", id=run.job.id, url=url)
            run.stats["processing_errors"] += 1
            return RETRY
        if run.halted:
            return DONE
        run.storing += 1
        saved = self._store(url, result.body, extracted)
        saved.addCallbacks(lambda _: self._stored(run, extracted), lambda f: self._not_stored(run, url, f))
        saved.addBoth(lambda _: self._storing_over(run))
        return DONE

    def _store(self, url: str, body: bytes, extracted: Any) -> Deferred[Any]:
        if self._pages is None:
            return defer.succeed(None)
        return self._pages.save(url, fingerprint(url), body, compressed=extracted.compressed)

    def _stored(self, run: Run, extracted: Any) -> None:
        run.stats["pages"] += 1
        if extracted.item is not None:
            run.items.write(extracted.item)
            run.stats["items"] += 1
        elif extracted.error:
            run.stats[f"parse_{extracted.error}"] += 1

    def _not_stored(self, run: Run, url: str, failure: Failure) -> None:
        log.failure("Worker: job {id}: storing {url} failed", failure, id=run.job.id, url=url)
        run.stats["processing_errors"] += 1

    def _storing_over(self, run: Run) -> None:
        run.storing -= 1
        run.check_settled()
