"""The embedded URL pool: seed 000's contract over an ordered key-value store.

Every change of a URL's state is one atomic write batch that also carries the
counters, so a ``kill -9`` between two batches leaves a consistent pool.  Only
the host table, the hubs and a lease bound live in memory; all of them are
rebuilt at open from the small ``C``, ``H`` and ``L`` ranges, never by a scan
of the URLs.  So do the marks of leased URLs added again (``always``), which
need no rebuilding: at open every lease goes back to its queue.

The pool is made of parts, each given the one shared state (:class:`~.kvcore.KVState`: the store, the
counters, the leases, the hubs, politeness, and the write primitives) and the parts it works with:
``queues`` (:mod:`.kvqueues`: adding, popping, hubs), ``statuses`` (:mod:`.kvstatus`: outcomes, redirect
claims, checkpoints), ``ledger`` (:mod:`.kvledger`: the seen set, batch numbers), ``crawled``
(:mod:`.crawled`: seed 004's crawled sets, linkbase, claim_once), ``content`` (:mod:`.content`: content
digests) and ``admin`` (:mod:`.kvadmin`: why, hosts, export, import).  This class answers each contract
through them, and the rest itself: seeds, host policy, counts, closing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from spiderd.contracts.pool import ExportReader, IURLPool, IURLPoolAdmin
from spiderd.core.conditional import Validators
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool.content import KVContent
from spiderd.frontier.pool.crawled import CrawledSets
from spiderd.frontier.pool.kvadmin import KVAdmin
from spiderd.frontier.pool.kvcore import KVState
from spiderd.frontier.pool.kvledger import KVLedger
from spiderd.frontier.pool.kvqueues import KVQueues
from spiderd.frontier.pool.kvstatus import KVStatuses
from spiderd.frontier.pool.options import PoolOptions
from spiderd.frontier.pool.shared import stats_answer


@implementer(IURLPool, IURLPoolAdmin)
class KVPool:
    """A crash-safe, polite URL pool over a plyvel-like store (``get``, ``write_batch``, ``iterator``): every
    contract and the admin part.  ``options`` (the same for every backend): its ``recrawl`` names the
    (registered domain, kind) pairs whose done pages are kept in crawled sets; ``config.linkbase`` turns the
    linkbase on (see crawled.py).  ``trim`` compacts the store now and then.
    """

    def __init__(self, kv: Any, clock: IReactorTime, options: PoolOptions = PoolOptions(), *,
                 politeness: Politeness | None = None, trim: Callable[[], Any] | None = None) -> None:
        config = options.config
        self.state = state = KVState(kv, clock, options, politeness=politeness, trim=trim)
        self.crawled = CrawledSets(state, options.recrawl, config.linkbase, config.linkbase_max)
        self.queues = KVQueues(state, self.crawled)
        self.statuses = KVStatuses(state, self.queues, self.crawled)
        self.ledger = KVLedger(state)
        self.content = KVContent(kv, config.max_url_length)
        self.admin = KVAdmin(state, self.queues, self.crawled)
        self._kv = kv
        self._clock = clock
        self.politeness = state.politeness
        self.split = state.split
        self.hops = state.hops
        self.rejected = state.rejected
        self.recent_failures = state.recent_failures
        self.host_errors = state.host_errors
        self.failure_threshold = state.failure_threshold
        self.max_throttles = state.max_throttles
        self.conditional_get = state.conditional_get
        self.pending_threshold = state.pending_threshold
        self._seeds: list[str] = []  # the configured seeds, as last given to set_seeds

    # -- the queue: adding, counts (IURLQueue) --------------------------------------

    def add(self, url: str, always: bool = False, detail: bool = False) -> defer.Deferred[bool]:
        return self.queues.add(url, always, detail)

    def addmany(self, urls: Iterable[str], always: bool = False, detail: bool = False,
                parent: str | None = None) -> defer.Deferred[int]:
        return self.queues.addmany(urls, always, detail, parent)

    def within_hops(self, parent: str, urls: Sequence[str]) -> defer.Deferred[list[str]]:
        return self.queues.within_hops(parent, urls)

    def size(self) -> defer.Deferred[int]:
        return defer.succeed(self.state.counters[0])

    def empty(self) -> defer.Deferred[bool]:
        return defer.succeed(self.state.counters[0] == 0)

    def stats(self) -> defer.Deferred[dict[str, Any]]:
        state = self.state
        waiting, pending, done, failed, _, batched = state.counters
        counts = {"waiting": waiting, "pending": pending, "done": done, "failed": failed, "batched": batched}
        answer = stats_answer(counts, self.politeness.active_hosts(), self.politeness.top(5), len(state.hubs),
                              self.rejected)
        return defer.succeed(answer)

    # -- statuses and pops (ILeases), checkpoints (ICheckpoints) ---------------------

    def pop(self, count: int, hub_percent: int = 50) -> defer.Deferred[dict[str, bool]]:
        return self.queues.pop(count, hub_percent)

    def claim(self, url: str, by: str | None = None) -> defer.Deferred[bool]:
        return self.statuses.claim(url, by)

    def fetched(self, url: str, elapsed: float | None = None) -> defer.Deferred[None]:
        return self.statuses.fetched(url, elapsed)

    def set_status(self, url: str, status_code: int, reason: str | None = None) -> defer.Deferred[None]:
        return self.statuses.set_status(url, status_code, reason)

    def throttle(self, url: str, until: float, status_code: int, reason: str | None = None) -> defer.Deferred[None]:
        return self.statuses.throttle(url, until, status_code, reason)

    def set_statuses(self, statuses: Iterable[tuple[Any, ...]],
                     checkpoint: tuple[str, int] | None = None) -> defer.Deferred[None]:
        return self.statuses.set_statuses(statuses, checkpoint)

    def validators(self, url: str) -> defer.Deferred[Validators | None]:
        return self.statuses.validators(url)

    def next_due(self) -> defer.Deferred[float | None]:
        state = self.state
        now = self._clock.seconds()
        times = [self.politeness.next_time(), state.hub_heap[0][0] if state.hub_heap else None]
        if state.counters[1]:
            times.append(state.lease_bound)
        known = [t for t in times if t is not None and t != float("inf")]
        return defer.succeed(max(0.0, min(known) - now) if known else None)

    def checkpoint(self, name: str) -> defer.Deferred[int | None]:
        return self.statuses.checkpoint(name)

    def drop_checkpoint(self, name: str) -> defer.Deferred[None]:
        return self.statuses.drop_checkpoint(name)

    # -- the batch ledger (IBatchLedger) ---------------------------------------------

    def seen_filter(self, urls: Iterable[str]) -> defer.Deferred[list[str]]:
        return self.ledger.seen_filter(urls)

    def seen_add(self, urls: Iterable[str]) -> defer.Deferred[int]:
        return self.ledger.seen_add(urls)

    def next_batch(self, count: int = 1) -> defer.Deferred[int]:
        return self.ledger.next_batch(count)

    # -- seeds and hubs (ISeedLists), recrawl, linkbase, claims ----------------------

    def set_seeds(self, urls: Iterable[str]) -> defer.Deferred[int]:
        """Remember the configured seeds (in memory only: a start or reload gives them again) for the seed timer."""
        self._seeds = list(dict.fromkeys(urls))
        return defer.succeed(len(self._seeds))

    def seed_urls(self) -> defer.Deferred[list[str]]:
        """The seeds last given to set_seeds (one process: no other tool adds any)."""
        return defer.succeed(list(self._seeds))

    def set_hubs(self, urls: Iterable[str], refresh_span: float) -> defer.Deferred[None]:
        return self.queues.set_hubs(urls, refresh_span)

    def recrawl(self, cutoffs: Sequence[tuple[str, str, float]], limit: int) -> defer.Deferred[int]:
        return self.crawled.recrawl(cutoffs, limit)

    def add_links(self, parent: str, urls: Sequence[str], anchors: Sequence[str] = (),
                  xpaths: Sequence[str] = ()) -> defer.Deferred[int]:
        return self.crawled.add_links(parent, urls, anchors, xpaths)

    def claim_once(self, name: str, ttl: float) -> defer.Deferred[bool]:
        return self.crawled.claim_once(name, ttl)

    def claim_content(self, digest: str, url: str) -> defer.Deferred[bool]:
        return self.content.claim_content(digest, url)

    # -- host policy (IHostPolicy) ---------------------------------------------------

    def set_host_delay(self, host: str, delay: float) -> defer.Deferred[None]:
        self.politeness.set_robots_delay(host, delay)
        return defer.succeed(None)

    def set_host_group(self, host: str, group: str) -> defer.Deferred[None]:
        self.politeness.set_group(host, group)
        return defer.succeed(None)

    # -- admin (IURLPoolAdmin) -------------------------------------------------------

    def why(self, url: str) -> defer.Deferred[dict[str, Any]]:
        return self.admin.why(url)

    def hosts(self, limit: int = 50) -> defer.Deferred[list[dict[str, Any]]]:
        return self.admin.hosts(limit)

    def export(self, chunk: int = 1000) -> ExportReader:
        return self.admin.export(chunk)

    def import_states(self, records: Iterable[Any]) -> defer.Deferred[dict[str, Any]]:
        return self.admin.import_states(records)

    def compact(self) -> None:
        """Compact the store range by range (a blocking call: for maintenance and benchmarks)."""
        self.admin.compact()

    # -- closing --------------------------------------------------------------------

    def close(self) -> defer.Deferred[None]:
        if not getattr(self._kv, "closed", False):
            self._kv.close()
        return defer.succeed(None)
