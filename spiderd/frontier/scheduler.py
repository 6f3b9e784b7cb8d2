"""Clock-driven jobs on the pool: the seed timer (seed 002) and recrawl (seed 004).

Seed timer.  ``[pool] seed_cron`` (cron, or Quartz with seconds first such as
seed 002's ``0 10 1 * * ?``; see :mod:`spiderd.core.cron`) queues the seeds again
with ``always=True`` (a done seed is fetched again) at every firing.  The seeds
are the pool's ``seed_urls()``, read at the firing: on Redis every member of
seed 002's ``spider.seed.urls`` (the nodes' configured seeds, added at start
and reload, and whatever other tools added), on LevelDB and memory the
configured seeds (as of the last start or reload).  The next
firing is computed from the injected clock and armed with ``callLater``; it
is re-armed before the work starts, so a firing that fails is logged and the
timer goes on.  When several nodes share a Redis pool, each arms the same
firings; before injecting, a node claims ``cron:<epoch of the firing>`` with
``pool.claim_once`` (``SET NX PX`` on Redis) and only the node that gets it
injects.  The embedded pool has one node: its claim always succeeds once.

Recrawl.  Pages whose (registered domain, kind) has an interval
(``[[sites]] recrawl_list`` / ``recrawl_detail``, seconds, 0 = never) are
kept, once done, in the pool's crawled sets scored by fetch time.  Every
``recrawl_every`` seconds the recrawler asks the pool to queue again, as
``add(always=True)``, the pages fetched more than their interval ago (oldest
first), list pages first, then detail pages, each kind within its budget:

    budget(kind) = min(recrawl_batch, max(ceil(ratio(kind) x fetches since the last run),
                                          recrawl_batch - waiting URLs))

where ``ratio(list)`` is ``recrawl_list_ratio`` and ``ratio(detail)`` is
``recrawl_detail_ratio`` (seed 004's mod_list and mod_detail), and the
waiting URLs of the detail budget include the list pages just queued.  While
new URLs wait (more than ``recrawl_batch``), recrawled pages of a kind thus
enter the queues at most ratio(kind) times as fast as this node fetches, so in
the long run recrawls take at most the sum of the two ratios of the fetches
(settings refuse a sum over 1) and new URLs keep the rest; when the queues
run low, they are topped up to ``recrawl_batch`` per run, list pages first,
so an idle crawler refreshes at once but never floods its queues.  Seed 004's
other two ratios, get_list and get_detail, split each pop between the waiting
list and detail URLs (recrawled pages included): ``[pool] list_ratio`` and
``detail_ratio``, see :mod:`spiderd.frontier.pool.split`.  Each
node of a cluster runs its own recrawler; one script per call on Redis means
no page is queued twice.  Sites that share a registered domain share the
shortest interval.

Where detail pages go to workers in batches (``[batch] targets``), recrawled
detail pages go to them too: the pool keeps the pages it sent in a crawled set
of their own (scored when sent, or when this node's worker fetched them), the
recrawler takes those due (``recrawl_batched``, within the detail budget) and
the batcher sends them again in batches that carry each page's previous fetch
and validators (``DISTRIBUTED_RECRAWL``, see :mod:`spiderd.core.recrawls`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from twisted.application.service import Service
from twisted.internet import defer, task
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.config.sections import PoolSection
from spiderd.contracts.pool import IRecrawl, ISeedTimerPool
from spiderd.core.cron import Cron, CronError, parse
from spiderd.core.lifecycle import InFlight
from spiderd.core.recrawls import Recrawl
from spiderd.core.urls import host_of, registered_domain
from spiderd.frontier.seeds import add_in_slices

log = Logger()

CLAIM_TTL = 3600.0  # a firing's claim outlives any clock skew between nodes


class SeedTimer(Service):
    """Queues the pool's ``seed_urls()`` again (always=True) at each firing of ``cron``, on one node per firing."""

    name = "seed-timer"  # type: ignore[assignment]  # Service declares it None

    def __init__(self, clock: IReactorTime, pool: ISeedTimerPool, cron: Cron, claim_ttl: float = CLAIM_TTL) -> None:
        self._clock = clock
        self._pool = pool
        self._cron = cron
        self._ttl = claim_ttl
        self._call: IDelayedCall | None = None
        self._work = InFlight()
        self.next_firing: float | None = None

    def startService(self) -> None:
        super().startService()
        self._arm(self._clock.seconds())

    def stopService(self) -> defer.Deferred[None]:
        super().stopService()
        if self._call is not None and self._call.active():
            self._call.cancel()
        return self.settled()

    def settled(self) -> defer.Deferred[None]:
        """Fires once the firings in progress (claim, then injection) are over."""
        return self._work.wait()

    def _arm(self, after: float) -> None:
        try:
            at = self._cron.next_after(after)
        except CronError as e:
            log.error("Seed timer stops: {why}", why=str(e))
            self.next_firing = None
            return
        self.next_firing = at
        self._call = self._clock.callLater(max(0.0, at - self._clock.seconds()), self._fire, at)

    def _fire(self, at: float) -> None:
        self._arm(max(at, self._clock.seconds()))  # first: a firing that fails never stops the timer
        d = defer.maybeDeferred(self._pool.claim_once, f"cron:{int(at)}", self._ttl)
        d.addCallback(self._claimed, at)
        d.addErrback(lambda f: log.failure("Seed timer: the firing at {at:.0f} failed", f, at=at))
        self._work.track(d)

    def _claimed(self, won: bool, at: float) -> Any:
        if not won:
            log.info("Seed timer: another node injects the seeds of the firing at {at:.0f}", at=at)
            return None
        return self._pool.seed_urls().addCallback(self._inject)

    def _inject(self, seeds: Sequence[str]) -> Any:
        d = add_in_slices(self._pool, seeds, self._clock, always=True)
        return d.addCallback(lambda added: log.info("Seed timer: {added} of {count} seeds queued again",
                                                    added=added, count=len(seeds)))


@dataclass(frozen=True)
class RecrawlPolicy:
    """Recrawl intervals in seconds per (registered domain, kind)."""

    intervals: Mapping[tuple[str, str], float]

    @classmethod
    def from_sites(cls, sites: Iterable[Any]) -> RecrawlPolicy:
        """The sites' ``recrawl_list`` / ``recrawl_detail`` by the registered domains of their allowed hosts."""
        from spiderd.core.rules import normalize_host

        intervals: dict[tuple[str, str], float] = {}
        for site in sites:
            for host in site.allowed_hosts:
                domain = registered_domain(normalize_host(host))
                for kind, seconds in (("list", site.recrawl_list), ("detail", site.recrawl_detail)):
                    if seconds > 0:
                        intervals[(domain, kind)] = min(seconds, intervals.get((domain, kind), seconds))
        return cls(intervals)

    def keeps(self, url: str, kind: str) -> bool:
        """Whether the pages of kind ``kind`` of ``url``'s registered domain are recrawled."""
        return bool(self.intervals) and (registered_domain(host_of(url)), kind) in self.intervals

    def pairs(self) -> list[tuple[str, str]]:
        """The (domain, kind) pairs the pool keeps crawled sets for."""
        return list(self.intervals)

    def cutoffs(self, now: float, turn: int = 0) -> list[tuple[str, str, float]]:
        """(domain, kind, fetched at or before) of every set, list pages first; ``turn`` rotates the domains."""
        due = [(domain, kind, now - seconds) for (domain, kind), seconds in self.intervals.items()]
        return [*_rotated([c for c in due if c[1] == "list"], turn), *_rotated([c for c in due if c[1] != "list"], turn)]


def _rotated(items: list[Any], turn: int) -> list[Any]:
    start = turn % len(items) if items else 0
    return items[start:] + items[:start]


def budget(waiting: int, fetches: int, batch: int, ratio: float) -> int:
    """How many pages one recrawl run may queue (see the module docstring)."""
    return max(0, min(batch, max(math.ceil(ratio * fetches), batch - waiting)))


class Recrawler(Service):
    """Every ``every`` seconds, queues again the crawled pages whose interval has passed, within ``budget``."""

    name = "recrawler"  # type: ignore[assignment]  # Service declares it None

    def __init__(self, clock: IReactorTime, pool: IRecrawl, policy: RecrawlPolicy, fetches: Callable[[], int], *,
                 every: float = 60.0, batch: int = 1000, ratios: Mapping[str, float] | None = None,
                 batched: Callable[[list[Recrawl]], Deferred[Any]] | None = None) -> None:
        """``batched``: where detail pages go when workers fetch them (the batcher's ``add_recrawls``): the
        detail pages due are then those sent in batches (``pool.recrawl_batched``), sent there again."""
        self._clock = clock
        self._batched = batched
        self._pool = pool
        self._policy = policy
        self._fetches = fetches
        self._batch = batch
        self._ratios = {"list": 0.2, "detail": 0.1, **(ratios or {})}
        self._every = every
        self._last = 0
        self._runs = 0
        self._loop = task.LoopingCall(self.run)
        self._loop.clock = clock
        self._work = InFlight()
        self.queued_by_kind = {"list": 0, "detail": 0}

    def set_policy(self, policy: RecrawlPolicy) -> None:
        """Recrawl by ``policy`` from the next run on (the sites' intervals changed at run time)."""
        self._policy = policy

    @property
    def queued(self) -> int:
        """Pages queued again since the start."""
        return sum(self.queued_by_kind.values())

    def startService(self) -> None:
        super().startService()
        self._last = self._fetches()
        self._loop.start(self._every, now=False).addErrback(lambda f: log.failure("recrawler", f))

    def stopService(self) -> defer.Deferred[None]:
        """Stop the loop; fires once a run in progress is over (before the pool closes)."""
        super().stopService()
        if self._loop.running:
            self._loop.stop()
        return self._work.wait()

    def run(self) -> defer.Deferred[int]:
        """One run; fires with the number of pages queued again (0 after an error, which is logged)."""
        return self._work.track(self._pool.size().addCallback(self._queue).addErrback(self._failed))

    @defer.inlineCallbacks
    def _queue(self, waiting: int) -> Any:
        fetches = self._fetches()
        period, self._last = fetches - self._last, fetches
        if not self._policy.intervals:
            return 0
        self._runs += 1  # a different domain first each run: one busy domain cannot take every run's budget
        cutoffs = self._policy.cutoffs(self._clock.seconds(), self._runs)
        counts: dict[str, int] = {}
        for kind in ("list", "detail"):
            allowed = budget(waiting, period, self._batch, self._ratios[kind])
            mine = [c for c in cutoffs if c[1] == kind]
            if allowed <= 0 or not mine:
                continue
            if kind == "detail" and self._batched is not None:
                counts[kind] = yield self._send_again(mine, allowed)
            else:
                counts[kind] = yield self._pool.recrawl(mine, allowed)
            self.queued_by_kind[kind] += counts[kind]
            waiting += counts[kind]
        return self._queued(counts)

    @defer.inlineCallbacks
    def _send_again(self, cutoffs: list[tuple[str, str, float]], allowed: int) -> Any:
        """The detail pages sent in batches whose interval has passed, sent again in batches; their number."""
        assert self._batched is not None
        pages = yield self._pool.recrawl_batched(cutoffs, allowed)
        if pages:
            yield self._batched(pages)
        return len(pages)

    @staticmethod
    def _failed(failure: Failure) -> int:
        log.failure("Recrawl run failed", failure)
        return 0

    def _queued(self, counts: dict[str, int]) -> int:
        total = sum(counts.values())
        if total:
            log.info("Recrawl: {count} pages queued again ({lists} list, {details} detail)", count=total,
                     lists=counts.get("list", 0), details=counts.get("detail", 0))
        return total


class FetchesTold:
    """What this node's worker tells of its jobs' fetches (each stored 200 and 304, as a ``Recrawl``: URL, time,
    the answer's validators), for the pages of the domains whose detail pages are recrawled: into the pool
    (``batched_fetched``), one call per turn of the reactor, so the next recrawl of each is conditional on
    them."""

    def __init__(self, clock: IReactorTime, pool: IRecrawl, policy: RecrawlPolicy) -> None:
        self._clock = clock
        self._pool = pool
        self._policy = policy
        self._waiting: list[Recrawl] = []
        self._call: IDelayedCall | None = None

    def __call__(self, page: Recrawl) -> None:
        if self._policy.keeps(page.url, "detail"):
            self._waiting.append(page)
            if self._call is None:
                self._call = self._clock.callLater(0, self._flush)

    def _flush(self) -> None:
        pages, self._waiting, self._call = self._waiting, [], None
        d = defer.maybeDeferred(self._pool.batched_fetched, pages)
        d.addErrback(lambda f: log.failure("Recording {count} fetches of batched pages", f, count=len(pages)))


def fetches_told(clock: IReactorTime, pool: IRecrawl, sites: Iterable[Any]) -> FetchesTold | None:
    """What this node's worker tells its pool of its fetches, where any site recrawls its detail pages."""
    policy = RecrawlPolicy.from_sites(sites)
    return FetchesTold(clock, pool, policy) if any(kind == "detail" for _, kind in policy.intervals) else None


def schedulers(config: PoolSection, sites: Iterable[Any], clock: IReactorTime, seeds: ISeedTimerPool,
               pages: IRecrawl, fetches: Callable[[], int],
               batched: Callable[[list[Recrawl]], Deferred[Any]] | None = None,
               ) -> tuple[SeedTimer | None, Recrawler | None]:
    """The seed timer (``[pool] seed_cron``, on the pool's ``seeds``) and the recrawler (sites with recrawl
    intervals; the ``recrawl_*`` keys of ``[pool]``; on its crawled ``pages``; detail pages sent again to
    ``batched``, the batcher, where workers fetch them), each when configured."""
    timer = SeedTimer(clock, seeds, parse(config.seed_cron)) if config.seed_cron else None
    policy = RecrawlPolicy.from_sites(sites)
    if not policy.intervals:
        return timer, None
    ratios = {"list": config.recrawl_list_ratio, "detail": config.recrawl_detail_ratio}
    return timer, Recrawler(clock, pages, policy, fetches, every=config.recrawl_every, batch=config.recrawl_batch,
                            ratios=ratios, batched=batched)
