"""The fetch loop: pop from the pool, fetch, extract, feed links back, store pages and items.

A deduplicated "kick" (a ``callLater(0)`` that is scheduled at most once)
pulls work whenever a slot frees, plus a slow heartbeat in case anything was
missed; the URLs a pull brings start START_BURST a reactor turn (each start may
connect and read robots.txt: 64 at once held the reactor); with ``pull_batch``
(the Redis pool's ``redis_pop_batch``) a pull waits for that many free slots
while more than half are busy (:func:`pull_waits`).
With ``pull_ahead`` (the Redis pool's ``redis_pop_ahead``) it pops ahead of its
free slots instead: up to that many leased URLs wait in a local queue for a slot,
and a pull (for the free slots and the queue's room) goes out once the queue is
down to half; at stop or pause, URLs still queued are left to their leases,
which bring them back (as fetches cut at stop).  A popped URL's wait (``max_queue_wait``) counts from when its pop
was asked, where its lease began: a pop answered later than that (its Redis stalled) starts none of its URLs, whose
leases may have ended and been handed to another node.  A fetch slot is freed as soon as the response is in; processing
(parsing, storing) runs beside it, bounded by ``max_processing``, which is
large because a page waits there for its batch of writes to be committed.
What is done with a fetched answer (parse, links, store, item, statuses) is
:mod:`.process`'s.

Conditional GET: a URL the pool keeps validators for (a hub, a page of a
recrawled kind) is fetched with them (If-None-Match, If-Modified-Since); a 304
is done again and unchanged, with no parse, item, stored page or links, and
counted as ``not_modified``; a 200's validators are recorded with its status.

Link hops (``max_hops``): links past their limit (``pool.within_hops``) are
dropped and counted as ``links_max_hops``; the rest are the leased URL's links.

Duplicate content (``skip_duplicate_content``): a detail page whose content
digest another URL gave first (``pool.claim_content``) gives no item and no
stored page; it is done, and counted as ``duplicate_content``.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from twisted.application.service import Service
from twisted.internet import defer, task
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core import conditional as cg
from spiderd.core import status as st
from spiderd.core.lifecycle import InFlight
from spiderd.core.stats import CrawlStats
from spiderd.core.storage import storage_error
from spiderd.engine.steps import PageSteps
from spiderd.engine.subrequests import HostTurns
from spiderd.feed.items import ItemWriter
from spiderd.fetch.fetcher import Fetcher, FetchResult
from spiderd.contracts.pool import ICrawlPool
from spiderd.frontier.process import Processor, page_kind

if TYPE_CHECKING:
    from spiderd.fetch.extract import Rules
    from spiderd.feed.warcfiles import WarcWriter

log = Logger()
START_BURST = 16  # fetches started in one reactor turn, the rest a turn later: a pull of 64 URLs of new hosts held
# the reactor for their 64 connects and robots.txt checks at once (bench/stalls.py on bench/hosts.py)
FAILING_PULLS = 12  # pulls failed in a row (each heartbeat, every 5 s, tries again): the loop is failing


def pull_size(concurrency: int, fetching: int, queued: int, ahead: int, batch: int, beat: bool = False) -> int:
    """URLs a pull asks for now (0: none).  Popping ahead (``ahead`` > 0): the free slots and the local queue's
    room, once the queue (``queued``) is down to half of ``ahead``; else the free slots, unless the pull waits for
    ``batch`` of them (:func:`pull_waits`; the heartbeat's pull, ``beat``, never waits); URLs popped and not
    started yet (``queued``: START_BURST start a turn) count as busy slots."""
    free = concurrency - fetching
    if ahead:
        return 0 if queued > ahead // 2 else free + ahead - queued
    free -= queued
    if free <= 0 or (not beat and pull_waits(concurrency, fetching + queued, batch)):
        return 0
    return free


def pull_waits(concurrency: int, fetching: int, batch: int) -> bool:
    """Whether a pull waits for more free fetch slots: fewer than ``batch`` are free (at most a quarter of them)
    while more than half are busy.  A pop of a few URLs costs a shared pool (Redis) about as much as one of many;
    with half the slots or more free the crawler pulls at once."""
    free = concurrency - fetching
    return free < min(batch, max(1, concurrency // 4)) and fetching > concurrency // 2


class CrawlService(Service):
    """Drives the pool, the fetcher, the parse pool and the sinks."""

    name = "crawler"  # type: ignore[assignment]  # Service declares it None

    def __init__(
        self,
        reactor: IReactorTime,
        pool: ICrawlPool,
        fetcher: Fetcher,
        steps: PageSteps,
        rules: Rules,
        stats: CrawlStats,
        *,
        detail_sink: Callable[[list[str]], Deferred[Any]] | None = None,
        items: ItemWriter | None = None,
        archive: WarcWriter | None = None,
        concurrency: int = 64,
        pull_batch: int = 1,
        pull_ahead: int = 0,
        max_queue_wait: float | None = None,
        max_processing: int | None = None,
        hub_percent: int = 50,
        exit_when_done: bool = False,
        stop_timeout: float = 60.0,
        linkbase: bool = False,
        conditional_get: bool = True,
        discovery: tuple[Any, ...] = (),
        turns: HostTurns | None = None,
    ) -> None:
        """``steps``: the node's page engine (parse, store, throttles, duplicate content), shared with its worker;
        ``turns``: the pool's politeness, where a rendered page's sub-requests take their turns."""
        self._reactor = reactor
        self.pool = pool
        self._fetcher = fetcher
        self._turns = turns
        self.stats = stats
        self._processor = Processor(reactor, pool, steps, rules, stats, detail_sink, items=items, archive=archive,
                                    linkbase=linkbase, conditional_get=conditional_get)
        self.concurrency = concurrency
        self._pull_batch = pull_batch  # free fetch slots a pull waits for while more than half are busy (pull_waits)
        self._pull_ahead = pull_ahead  # leased URLs that may wait for a slot (0: a pull asks for free slots only)
        self._queued: deque[tuple[str, bool, float]] = deque()  # (url, is_hub, popped at) not started yet
        self._max_queue_wait = max_queue_wait  # seconds a popped URL may wait (its lease must outlast its fetch)
        self._beat = False  # the heartbeat's pull, which never waits
        self._max_processing = max_processing or max(512, 4 * concurrency)
        self._hub_percent = hub_percent
        self._exit_when_done = exit_when_done
        self._stop_timeout = stop_timeout
        self._conditional = conditional_get  # fetch with the validators the pool kept (pool.validators)
        self.fetching = 0
        self.processing = 0
        self.paused = False
        self.finished: Deferred[None] = Deferred()
        self._work = InFlight()
        self._kick_call: IDelayedCall | None = None
        self._wake_call: IDelayedCall | None = None
        self._popping = False
        self.pull_failures = 0  # in a row
        self.last_error = ""
        self._gate = steps.gate if steps is not None else None  # the storage gate: no pop while it holds
        if self._gate is not None:
            self._gate.add_listener(self.kick)
        self._heartbeat = task.LoopingCall(self._heartbeat_pull)
        self._heartbeat.clock = reactor
        self._discovery = discovery
        for source in discovery:
            source.add_listener(self.kick)

    # -- service -------------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        self._heartbeat.start(5.0, now=False).addErrback(lambda f: log.failure("heartbeat", f))
        self.kick()

    def stopService(self) -> Deferred[None]:
        """Stop popping, let fetches and processing finish (cancelled after ``stop_timeout``)."""
        super().stopService()
        if self._heartbeat.running:
            self._heartbeat.stop()
        for call in (self._kick_call, self._wake_call):
            if call is not None and call.active():
                call.cancel()
        log.info("Stopping: waiting for {fetching} fetches and {processing} pages in processing",
                 fetching=self.fetching, processing=self.processing)
        self._drop_queue("Stopping")
        deadline = self._reactor.callLater(self._stop_timeout, self._work.cancel_all)
        d = self._work.wait()
        d.addBoth(lambda _: deadline.cancel() if deadline.active() else None)
        return d

    def pause(self) -> None:
        """Start nothing more; URLs popped ahead are left to their leases (a long pause would outlast them, and
        another node fetch them too)."""
        self.paused = True
        self._drop_queue("Paused")

    def _drop_queue(self, why: str) -> None:
        self._leave([url for url, _, _ in self._queued], why)
        self._queued.clear()

    def _leave(self, urls: list[str], why: str) -> None:
        """Leave popped URLs that will not start to their leases (they come back when the leases end), their hosts
        freed at once (``fetched``: no other node waits for those slots until then)."""
        if not urls:
            return
        log.info("{why}: {count} URLs popped ahead left to their leases", why=why, count=len(urls))
        for url in urls:
            defer.maybeDeferred(self.pool.fetched, url).addErrback(
                lambda f: log.failure("Freeing the host of a URL left to its lease", f))

    def _not_freed(self, failure: Failure, url: str) -> None:
        """Telling the pool that a fetch ended failed (Redis away): the URL's status, when it is recorded, frees
        its host slot all the same (or its lease's end does), so one quiet line, not an unhandled error."""
        log.debug("Freeing the host slot of {url} failed (its status frees it): {error}", url=url,
                  error=failure.getErrorMessage())

    def add_details(self, urls: list[str]) -> Deferred[Any]:
        """Send detail URLs where the crawler sends those it finds (the batcher, or the pool's detail queue)."""
        return self._processor.add_details(urls)

    def resume(self) -> None:
        self.paused = False
        self.kick()

    @property
    def queued(self) -> int:
        """URLs popped ahead of the free slots, waiting for one."""
        return len(self._queued)

    # -- the loop ------------------------------------------------------------------

    def kick(self) -> None:
        """Pull more work soon (at most one pull is scheduled at a time)."""
        if self._kick_call is None and self.running:
            self._kick_call = self._reactor.callLater(0, self._pull)

    def _heartbeat_pull(self) -> None:
        self._beat = True
        self.kick()

    def needs_backout(self) -> bool:
        """True when no more work should be pulled (nor started) now."""
        return self._held() or self.fetching >= self.concurrency

    def _held(self) -> bool:
        """True when nothing may be popped, even ahead: stopped, paused, processing full or storage blocked."""
        return (not self.running or self.paused or self.processing >= self._max_processing
                or self._gate is not None and self._gate.blocked())

    def _pull(self) -> None:
        self._kick_call = None
        beat, self._beat = self._beat, False
        self._start_queued()
        if self._popping or self._held():
            return
        wanted = pull_size(self.concurrency, self.fetching, len(self._queued), self._pull_ahead, self._pull_batch,
                           beat)
        if wanted <= 0:
            return  # a fetch's end kicks again
        self._popping = True
        d = defer.maybeDeferred(self.pool.pop, wanted, self._hub_percent)
        d.addCallback(self._popped, self._reactor.seconds())
        d.addCallbacks(self._pulled, self._pull_failed)

    def _start_queued(self) -> None:
        """Start URLs popped (ahead) while slots are free, START_BURST a turn (the next turn goes on); one that
        waited past ``max_queue_wait`` is left to its lease (which may have ended: another node may have it now,
        so its host is not freed either)."""
        now = self._reactor.seconds()
        started = 0
        while self._queued and not self.needs_backout():
            if started == START_BURST:
                self.kick()
                return
            started += 1
            url, hub, at = self._queued.popleft()
            if self._max_queue_wait is not None and now - at > self._max_queue_wait:
                log.info("{url} waited {waited:.0f} s for a fetch slot: left to its lease", url=url, waited=now - at)
                continue
            self._start(url, hub, at)

    def _pulled(self, _: Any) -> None:
        self._popping = False
        self.pull_failures = 0
        if self._gate is not None:
            self._gate.succeeded("pool")

    def _pull_failed(self, failure: Any) -> None:
        """A pull that failed is logged and counted; the heartbeat tries again. A loop failing again and
        again makes the node unhealthy (the status says "failing", systemd's watchdog stops being fed).
        One the pool's storage refused (a full disk) blocks the storage gate instead, which tries again."""
        self._popping = False
        if self._gate is not None and self._gate.failed("pool", failure):
            self.stats.errors["storage_blocked"] += 1
            return
        self.pull_failures += 1
        self.last_error = f"{failure.type.__name__}: {failure.getErrorMessage()}"[:300]
        self.stats.errors["pull"] += 1
        if self.pull_failures == 1 or self.pull_failures % 60 == 0:
            log.failure("Taking URLs from the pool failed ({count} times in a row); trying again", failure,
                        count=self.pull_failures)
        else:
            log.debug("Taking URLs from the pool failed again: {error}", error=self.last_error)

    @property
    def healthy(self) -> bool:
        """False once pulls failed FAILING_PULLS times in a row (a minute of heartbeats at least)."""
        return self.pull_failures < FAILING_PULLS

    def _popped(self, urls: dict[str, bool], asked: float) -> Any:
        """The URLs of a pop asked at ``asked``, when their leases began (the pool's deadline is the ask's time +
        pending_threshold): a pop answered late (its Redis stalled) has used up that much of their wait."""
        if not self.running or self.paused:  # the pop was on its way at the stop or pause
            self._leave(list(urls), "Stopped" if not self.running else "Paused")
            return None
        late = self._reactor.seconds() - asked
        if urls and self._max_queue_wait is not None and late > self._max_queue_wait:
            log.info("A pop answered {late:.1f} s after it was asked: its {count} URLs left to their leases",
                     late=late, count=len(urls))  # (hosts not freed either: a lease may be another node's now)
            self.kick()
            return None
        self._queued.extend((url, hub, asked) for url, hub in urls.items())
        self._start_queued()
        if urls:
            self.kick()
            return None
        return self.pool.next_due().addCallback(self._idle)

    def _idle(self, due: float | None) -> Any:
        """Nothing to pop now: wake when the pool says, or finish if all is done."""
        if due is not None:
            self._wake_at(due)
            return None
        if self.fetching or self.processing or self._queued or self._discovering():
            return None
        return self.pool.stats().addCallback(self._maybe_finished)

    def _discovering(self) -> bool:
        """True while a source of URLs other than pages (``discovery``: the sitemaps) is at work: not done yet.
        Each source has ``busy()`` and ``add_listener(kick)``, and calls it when it queued URLs or ended."""
        return any(source.busy() for source in self._discovery)

    def _wake_at(self, delay: float) -> None:
        if self._wake_call is not None and self._wake_call.active():
            if self._wake_call.getTime() <= self._reactor.seconds() + delay:
                return
            self._wake_call.cancel()
        self._wake_call = self._reactor.callLater(min(delay, 5.0), self.kick)

    def _maybe_finished(self, pool: dict[str, Any]) -> None:
        if pool["waiting"] == 0 and pool["pending"] == 0 and not self._discovering() and not self.finished.called:
            log.info("Nothing left to crawl")
            self.finished.callback(None)

    # -- one URL -------------------------------------------------------------------

    def _start(self, url: str, hub: bool, at: float) -> None:
        """Fetch and process ``url``, popped at ``at``: a write its storage refuses waits for the storage gate
        until the stop, or until its lease would end (``max_queue_wait`` after the pop), then it is left to it."""
        self.fetching += 1
        d = self._validators(url)
        d.addCallback(self._fetch, url, hub, at)
        d.addErrback(self._process_failed, url)
        d.addErrback(lambda f: log.failure("Recording the status of {url} failed", f, url=url))
        d.addBoth(self._processed)
        self._work.track(d)

    def _validators(self, url: str) -> Deferred[cg.Validators | None]:
        """What to make ``url``'s fetch conditional on: the validators the pool kept, or None (none kept,
        conditional GET off, or the pool could not say: then the fetch is a plain GET)."""
        if not self._conditional:
            return defer.succeed(None)
        d: Deferred[cg.Validators | None] = defer.maybeDeferred(self.pool.validators, url)
        return d.addErrback(self._no_validators, url)

    @staticmethod
    def _no_validators(failure: Any, url: str) -> None:
        log.warn("No validators for {url} ({error}): fetched without them", url=url,
                 error=f"{failure.type.__name__}: {failure.getErrorMessage()}")

    def _fetch(self, sent: cg.Validators | None, url: str, hub: bool, at: float) -> Deferred[Any]:
        steps = self._processor.steps
        # (with fetch processes, a child parses the page as its kind where it fetched it; else no classify here)
        kind = page_kind(self._processor.rules, hub, url) if steps.fetchers is not None else None
        d = steps.fetch(self._fetcher, url, sent, self._turns, kind)  # plain, or rendered as its site asks
        d.addBoth(self._fetched)
        return d.addCallback(self._processor.process, hub, sent, self._still_wanted(at))

    def _still_wanted(self, at: float) -> Callable[[], bool]:
        """Whether the processing of a URL popped at ``at`` may still wait for a write: while running and within
        its lease."""
        limit = None if self._max_queue_wait is None else at + self._max_queue_wait
        return lambda: bool(self.running) and (limit is None or self._reactor.seconds() < limit)

    def _fetched(self, result: FetchResult) -> FetchResult:
        defer.maybeDeferred(self.pool.fetched, result.url, result.elapsed).addErrback(self._not_freed, result.url)
        self.fetching -= 1
        self.processing += 1
        self.stats.fetched(result.status, result.wire_bytes, result.elapsed)
        self.kick()
        return result

    def _process_failed(self, failure: Any, url: str) -> Any:
        """Parsing or storing failed: count it as a failure of the URL (retried, then final); a storage error is
        not the page's fault: the URL is left to its lease, which brings it back (the storage gate said why)."""
        if failure.check(defer.CancelledError) and not self.running:
            return None  # abandoned at stop: the lease brings it back
        if storage_error(failure) is not None:
            self.stats.errors["storage_blocked"] += 1
            log.debug("{url}: left to its lease: {error}", url=url, error=storage_error(failure))
            return None
        log.failure("Processing {url} failed", failure, url=url)
        self.stats.errors[st.name(st.PROCESSING_ERROR)] += 1
        why = st.reason(st.PROCESSING_ERROR, f"{failure.type.__name__}: {failure.getErrorMessage()}")
        return self.pool.set_status(url, st.PROCESSING_ERROR, why)

    def _processed(self, _: Any) -> None:
        self.processing -= 1
        self.kick()
