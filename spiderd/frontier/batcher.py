"""Detail URLs in fixed-size batches to Scrapyd-compatible workers (seed 003's middleware as a service).

``add(urls)`` is the crawler's detail sink.  New URLs (checked against the
pool's persistent seen set, so a restart forgets nothing) are appended to the
open batch file in the spool, then marked seen.  A URL in the open batch stays there
even when marking it failed: the pool may have marked it all the same (Redis ran
the call, and the connection was lost before its answer), and no later add would
take it again; it is marked again before its batch is sealed.  A batch is sealed when it
holds ``batch_size`` URLs or ``flush_interval`` seconds after its first URL:
it gets a number from the pool (unique across restarts and nodes), is split
so that no ``DISTRIBUTED_START_URLS`` setting exceeds ``max_setting_bytes``
(Scrapyd passes each setting as one command-line argument, and Linux caps one
at 128 KiB: a larger batch is answered "ok", then lost), and is written to the
spool as ``batch-<n>.json`` before it is POSTed to ``schedule.json``, with a job id
of its own (``jobid``): a batch sent again after a crash names the same job,
which a spiderd worker runs once.

Targets take turns by batch number.  A refused connection, a timeout, an
HTTP error or a ``"status": "error"`` answer sends the batch to the next
target after a backoff; it leaves the spool only once a target accepted it.
``startService`` resends whatever the spool holds.  Pages sent again (seed
004's mod_detail, ``add_recrawls``) go in batches of their own, sealed at once,
with each page's previous fetch and validators in ``DISTRIBUTED_RECRAWL``.  ``stopService`` seals the
open batch and returns the ``DeferredList`` of every POST in flight (bounded
by ``stop_timeout``); unsent batches stay spooled for the next start.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.defer import Deferred, DeferredLock
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.config.sections import BatchSection
from spiderd.contracts.pool import IBatchLedger
from spiderd.core.blocking import Lane
from spiderd.core.lifecycle import InFlight, settled
from spiderd.core.recrawls import Recrawl
from spiderd.core.storage import storage_error
from spiderd.core.reactors import INodeReactor
from spiderd.core.retry import Backoff
from spiderd.core.secrets import redact
from spiderd.frontier.batchspool import Batch, append_lines, open_path, read_spool, remove, write_sealed
from spiderd.frontier.batchtargets import TargetFigures, next_target, target_rows
from spiderd.config.jobrules import job_setting
from spiderd.frontier.batchwire import check_answer, make_client, schedule_form, split, split_recrawls, target_url

if TYPE_CHECKING:
    from treq.client import HTTPClient

    from spiderd.fetch.extract import Rules

log = Logger()
T = TypeVar("T")


@dataclass(frozen=True)
class LocalWorker:
    """This node's own worker as a batch target: its project (the batches') and its loopback URL (asked at start)."""

    project: str
    target: Callable[[], str]


class Batcher(Service):
    """The detail path to remote workers: ``add(urls)`` batches, spools and sends them."""

    name = "batcher"  # type: ignore[assignment]  # Service declares it None

    def __init__(
        self, reactor: INodeReactor, pool: IBatchLedger, spool_dir: str, config: BatchSection, http: HTTPClient | None = None,
        clock: IReactorTime | None = None, local: Callable[[], str] | None = None,
        spider_of: Callable[[str], str] | None = None, lane: Lane | None = None, *,
        rules_of: Callable[[str], str | None] | None = None, retry_first: float = 1.0, retry_max: float = 300.0, stop_timeout: float = 30.0, max_posts: int = 8,
    ) -> None:
        """``config``: the ``[batch]`` section (its ``spider`` names the batches unless ``spider_of`` does);
        ``reactor`` does the I/O; ``clock`` (default: the reactor) runs the flush, retry and timeout timers;
        ``local()`` gives the target that ``"local"`` stands for (this node's worker), asked at start;
        ``spider_of(url)`` names the spider (site) of a URL: a batch holds one spider's URLs; ``lane``
        (default: one of its own) writes the spool; a failed POST is retried after ``retry_first`` seconds,
        doubling up to ``retry_max``; at most ``max_posts`` POSTs are in flight (the rest wait in order,
        spooled); a stop waits ``stop_timeout`` seconds for them; ``rules_of(spider)``: the site rules a batch
        carries (:mod:`spiderd.config.jobrules`), as they are when it is sent, or None."""
        if not config.targets:
            raise ValueError("the batcher needs at least one target")
        self._reactor = reactor
        self._clock = clock or reactor
        self._pool = pool
        self._dir = spool_dir
        self._config = config
        self._retry = Backoff(retry_first, retry_max)
        self._stop_timeout = stop_timeout
        self._max_posts = max_posts
        self._http = http
        self._local = local
        self._spider_of = spider_of or (lambda url: config.spider)
        self._rules_of = rules_of or (lambda spider: None)
        self._targets: list[tuple[str, tuple[str, str] | None]] = []
        self._figures: list[TargetFigures] = []  # per target, in the order of config.targets
        self._open: list[str] = []
        self._open_set: set[str] = set()
        self._unmarked: list[str] = []  # open URLs the pool may not have marked seen yet: marked before a seal
        self._lock = DeferredLock()
        self._timer: IDelayedCall | None = None
        self._lane = lane or Lane(reactor, "batcher")
        self._posts = InFlight()
        self._ready: deque[Batch] = deque()  # sealed, waiting for a POST slot
        self._cut_off = False  # the stop deadline passed: start no more POSTs
        self._spooled: dict[int, Batch] = {}
        self.sent = self.urls_sent = self.failures = 0
        self.last_error = ""

    # -- service --------------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        self._cut_off = False
        os.makedirs(self._dir, exist_ok=True)
        self._targets = [target_url(self._local() if t == "local" else t)  # type: ignore[misc]  # given with "local"
                         for t in self._config.targets]
        if len(self._figures) != len(self._targets):
            self._figures = [TargetFigures(url.removesuffix("/schedule.json")) for url, _ in self._targets]
        self._lane.start()
        if self._http is None:
            self._http = make_client(self._reactor)
        self._lock.run(self._recover).addErrback(lambda f: log.failure("Recovering the batch spool", f))

    @defer.inlineCallbacks
    def stopService(self) -> Any:
        super().stopService()
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        yield self._lock.run(self._seal)
        deadline = self._clock.callLater(self._stop_timeout, self._cut)
        yield self._posts.wait()
        if deadline.active():
            deadline.cancel()
        for batch in self._spooled.values():
            if batch.timer is not None and batch.timer.active():
                batch.timer.cancel()
        if self._spooled:
            log.info("{count} batches stay in the spool for the next start", count=len(self._spooled))
        self._lane.stop()

    # -- adding ---------------------------------------------------------------------

    def add(self, urls: Iterable[str]) -> Deferred[int]:
        """Queue detail URLs not seen before; fires with the number queued, once they are in the spool."""
        urls = list(urls)
        if not self.running:
            return defer.fail(RuntimeError("the batcher is stopped"))
        return self._lock.run(self._add, urls)

    @defer.inlineCallbacks
    def _add(self, urls: list[str]) -> Any:
        fresh = yield self._pool.seen_filter(urls)
        fresh = [u for u in fresh if u not in self._open_set]
        if not fresh and not self._unmarked:
            return 0
        if fresh:
            yield self._in_thread(append_lines, open_path(self._dir), fresh)
            self._open.extend(fresh)
            self._open_set.update(fresh)
            self._unmarked.extend(fresh)
        try:
            yield self._mark()
            if len(self._open) >= self._config.size:
                yield self._seal(everything=False)
        finally:
            self._arm_timer()  # (a seal that failed is tried again by the timer)
        return len(fresh)

    @defer.inlineCallbacks
    def _mark(self) -> Any:
        """Mark the open URLs not marked yet as seen in the pool (they stay open, and unmarked, if that fails)."""
        if self._unmarked:
            yield self._pool.seen_add(self._unmarked)
            self._unmarked = []

    def add_recrawls(self, pages: list[Recrawl]) -> Deferred[int]:
        """Send detail pages again (seed 004's mod_detail, from ``IRecrawl.recrawl_batched``): in batches of their
        own (no seen set: they were sent before), each naming its pages' previous fetches (``DISTRIBUTED_RECRAWL``),
        sealed and spooled at once; fires with the number spooled."""
        if not self.running:
            return defer.fail(RuntimeError("the batcher is stopped"))
        return self._lock.run(self._add_recrawls, list(pages))

    @defer.inlineCallbacks
    def _add_recrawls(self, pages: list[Recrawl]) -> Any:
        size = self._config.size
        by_spider = _by_spider([p.url for p in pages], self._spider_of)
        of = {p.url: p for p in pages}
        chunks = [(spider, chunk) for spider, urls in by_spider.items()
                  for start in range(0, len(urls), size)
                  for chunk in split_recrawls([of[u] for u in urls[start:start + size]], self._config.max_setting_bytes)]
        if not chunks:
            return 0
        first = yield self._pool.next_batch(len(chunks))
        batches = [Batch(first + i, [p.url for p in chunk], spider, recrawls=chunk)
                   for i, (spider, chunk) in enumerate(chunks)]
        yield self._in_thread(write_sealed, self._dir, batches, list(self._open))
        for batch in batches:
            self._spooled[batch.number] = batch
            self._send(batch)
        return len(pages)

    def _arm_timer(self) -> None:
        """Have the open batch sent ``flush_interval`` after now, unless it is empty or a timer is set."""
        if self._open and self.running and (self._timer is None or not self._timer.active()):
            self._timer = self._clock.callLater(self._config.flush_interval, self._flush_timer)

    def flush(self) -> Deferred[None]:
        """Seal every open URL now (the crawl is over: no reason to wait for the timer)."""
        return self._lock.run(self._seal)

    def idle(self) -> bool:
        """True when nothing is open, spooled or in flight."""
        return not self._open and not self._spooled and not len(self._posts) and not self._lock.locked

    def settled(self) -> Deferred[None]:
        """Fires when the POSTs in flight now and the sealing under way are over (retry timers aside)."""
        return settled([self._posts.wait(), self._lock.run(lambda: None)])

    def _flush_timer(self) -> None:
        self._lock.run(self._seal).addErrback(self._not_sealed)

    def _not_sealed(self, failure: Failure) -> None:
        """Sealing failed: tried again a flush interval later (a full disk is told of once, by the storage gate
        of the writes that wait for it)."""
        if storage_error(failure) is None:
            log.failure("Sealing a batch", failure)
        else:
            log.debug("Sealing a batch: {error}", error=storage_error(failure))
        self._arm_timer()

    @defer.inlineCallbacks
    def _seal(self, everything: bool = True) -> Any:
        """Cut the open URLs into batches (all of them, or only full batches), number them (split by the
        byte limit), spool them in one write and send them: work per call, never a chain per batch."""
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        size = self._config.size
        count = len(self._open) if everything else len(self._open) // size * size
        if not count:
            return
        yield self._mark()  # (a URL sent must be seen: else a page that links it again sends it again)
        cut, rest = self._open[:count], self._open[count:]
        chunks = [(spider, chunk) for start in range(0, count, size)
                  for spider, same in _by_spider(cut[start:start + size], self._spider_of).items()
                  for chunk in split(same, self._config.max_setting_bytes)]
        first = yield self._pool.next_batch(len(chunks))
        batches = [Batch(first + i, chunk, spider) for i, (spider, chunk) in enumerate(chunks)]
        yield self._in_thread(write_sealed, self._dir, batches, rest)
        self._open = rest
        self._open_set = set(rest)
        for batch in batches:
            self._spooled[batch.number] = batch
            self._send(batch)

    # -- sending --------------------------------------------------------------------

    def _send(self, batch: Batch) -> None:
        """POST ``batch`` when a slot is free (at most ``max_posts`` at once, in order)."""
        if not self.running and batch.attempts:
            return
        self._ready.append(batch)
        self._pump()

    def _pump(self) -> None:
        while self._ready and len(self._posts) < self._max_posts and not self._cut_off:
            batch = self._ready.popleft()
            index = next_target(batch.number, batch.attempts, len(self._targets))
            url, auth = self._targets[index]
            figures = self._figures[index]
            figures.in_flight += 1
            d = self._post(url, auth, batch)
            d.addCallbacks(lambda _, b=batch, u=url, t=figures: self._accepted(b, u, t),
                           lambda f, b=batch, u=url, t=figures: self._refused(b, u, f, t))
            d.addErrback(lambda f, b: log.failure("Batch {n}", f, n=b.number), batch)
            self._posts.track(d).addBoth(self._posted)

    def _posted(self, _: Any) -> None:
        self._pump()  # the finished POST has left the in-flight set: its slot is free

    def _cut(self) -> None:
        """The stop deadline: cancel the POSTs in flight, start no more (the rest stay spooled)."""
        self._cut_off = True
        self._posts.cancel_all()

    def _post(self, url: str, auth: tuple[str, str] | None, batch: Batch) -> Deferred[Any]:
        spider = batch.spider or self._config.spider
        data = schedule_form(self._config.project, spider, batch.number, batch.job_id, batch.urls,
                             self._config.feed_uri, self._rules_of(spider), batch.recrawls)
        assert self._http is not None  # made at start
        d = self._http.post(url, data=data, auth=auth, timeout=self._config.timeout,
                            reactor=self._clock)  # type: ignore[arg-type]  # treq needs only its timers here
        return d.addCallback(check_answer)

    def _accepted(self, batch: Batch, url: str, figures: TargetFigures) -> Deferred[None]:
        self._spooled.pop(batch.number, None)
        self.sent += 1
        self.urls_sent += len(batch.urls)
        figures.in_flight -= 1
        figures.sent += 1
        figures.urls_sent += len(batch.urls)
        figures.last_accepted = self._clock.seconds()
        log.debug("Batch {n} ({count} URLs) accepted by {url}", n=batch.number, count=len(batch.urls), url=url)
        return self._in_thread(remove, batch.path)

    def _refused(self, batch: Batch, url: str, failure: Failure, figures: TargetFigures) -> None:
        batch.attempts += 1
        self.failures += 1
        self.last_error = f"{redact(url)}: {failure.getErrorMessage()}"
        figures.in_flight -= 1
        figures.failures += 1
        figures.last_error = failure.getErrorMessage()
        delay = self._retry.delay(batch.attempts)
        log.warn("Batch {n} not accepted by {url} ({why}); next target in {delay:.0f}s",
                 n=batch.number, url=url, why=failure.getErrorMessage(), delay=delay)
        if self.running:
            batch.timer = self._clock.callLater(delay, self._send, batch)

    # -- the spool ------------------------------------------------------------------

    @defer.inlineCallbacks
    def _recover(self) -> Any:
        """Resend the spooled batches; reopen the open batch (minus URLs already spooled)."""
        spooled, open_urls = yield self._in_thread(read_spool, self._dir)
        for batch in spooled:
            self._spooled[batch.number] = batch
            self._send(batch)
        if spooled or open_urls:
            log.info("Spool: resending {batches} batches, {urls} URLs in the open batch",
                     batches=len(spooled), urls=len(open_urls))
        self._open = open_urls + self._open
        self._open_set.update(open_urls)
        if open_urls:
            self._unmarked = open_urls + self._unmarked
            self._arm_timer()
            yield self._mark()

    def _in_thread(self, function: Callable[..., T], *args: Any) -> Deferred[T]:
        return self._lane.run(function, *args)

    def status(self) -> dict[str, Any]:
        """Counters for the status API; ``targets``: per target, waiting first (see batchtargets.py)."""
        return {
            "open": len(self._open),
            "in_flight": len(self._posts),
            "queued": len(self._ready),
            "spooled": len(self._spooled),
            "sent": self.sent,
            "urls_sent": self.urls_sent,
            "failures": self.failures,
            "last_error": self.last_error,
            "targets": target_rows(self._figures, self._spooled.values()),
        }


def _by_spider(urls: list[str], spider_of: Callable[[str], str]) -> dict[str, list[str]]:
    """``urls`` grouped by spider, in order."""
    groups: dict[str, list[str]] = {}
    for url in urls:
        groups.setdefault(spider_of(url), []).append(url)
    return groups


def build_batcher(batch: BatchSection, reactor: INodeReactor, pool: IBatchLedger, spool_dir: str,
                  local: LocalWorker | None, rules: Rules, lane: Lane) -> Batcher | None:
    """Detail URLs to workers in batches (spooled in ``spool_dir``); none (details fetched here) when
    batch.targets is empty.

    ``local``: this node's own worker (``"local"`` stands for it: its project is the batches'), else None;
    ``rules`` name the site of a URL (the batch's spider, unless ``[batch] spider`` names one)."""
    if not batch.targets:
        return None
    default = rules.sites[0].name if rules.sites else "default"
    config = replace(batch, project=local.project if local else batch.project, spider=batch.spider or default)
    spider_of = None if batch.spider else _site_name(rules, default)
    return Batcher(reactor, pool, spool_dir, config, local=local.target if local else None,
                   spider_of=spider_of, lane=lane, rules_of=_site_rules(rules))


def _site_rules(rules: Rules) -> Callable[[str], str | None]:
    """The rules of the site a spider is named for, as a job carries them (None: no site of that name)."""
    def setting(spider: str) -> str | None:
        site = next((s for s in rules.sites if s.name == spider), None)
        return job_setting(site) if site is not None else None

    return setting


def _site_name(rules: Rules, default: str) -> Callable[[str], str]:
    """One spider per site: each batch names the site of its URLs (``default`` for a URL of no site)."""
    def name(url: str) -> str:
        site = rules.site_for(url)
        return site.name if site is not None else default

    return name
