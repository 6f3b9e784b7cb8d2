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
digests) and ``admin`` (:mod:`.kvadmin`: why, hosts, export, import).  :class:`~.parts.PartsPool` passes
each call of the contracts to its part; this class answers the rest: counts, seeds, host policy, closing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from spiderd.contracts.pool import IURLPool, IURLPoolAdmin
from spiderd.core.rules import PoliteRules
from spiderd.core.urllist import URLList
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool.content import KVContent
from spiderd.frontier.pool.crawled import CrawledSets, recrawl_pairs
from spiderd.frontier.pool.kvadmin import KVAdmin, compact
from spiderd.frontier.pool.kvcore import KVState
from spiderd.frontier.pool.kvguard import Guarded, StoreGuard
from spiderd.frontier.pool.kvledger import KVLedger
from spiderd.frontier.pool.kvqueues import KVQueues
from spiderd.frontier.pool.kvstatus import KVStatuses
from spiderd.frontier.pool.options import PoolOptions
from spiderd.frontier.pool.parts import PartsPool
from spiderd.frontier.pool.shared import stats_answer


@implementer(IURLPool, IURLPoolAdmin)
class KVPool(PartsPool):
    """A crash-safe, polite URL pool over a plyvel-like store (``get``, ``write_batch``, ``iterator``): every
    contract and the admin part.  ``options`` (the same for every backend): its ``recrawl`` names the
    (registered domain, kind) pairs whose done pages are kept in crawled sets; ``config.linkbase`` turns the
    linkbase on (see crawled.py).  ``trim`` compacts the store now and then.
    """

    def __init__(self, kv: Any, clock: IReactorTime, options: PoolOptions = PoolOptions(), *,
                 politeness: Politeness | None = None, trim: Callable[[], Any] | None = None) -> None:
        config = options.config
        self.state = state = KVState(kv, clock, options, politeness=politeness, trim=trim)
        self._crawled = crawled = CrawledSets(state, options.recrawl, config.linkbase, config.linkbase_max)
        queues = KVQueues(state, crawled)
        self._statuses = statuses = KVStatuses(state, queues, crawled)
        self.guard = guard = StoreGuard(self._reopen, self._resync)  # a write the store refused: see kvguard.py
        parts = (queues, statuses, KVLedger(state, crawled), crawled, KVContent(kv, config.max_url_length),
                 KVAdmin(state, queues, crawled))
        super().__init__(*(cast(Any, Guarded(part, guard)) for part in parts))
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
        self._seeds = URLList()  # the configured seeds, as last given to set_seeds

    # -- counts (IURLQueue) ---------------------------------------------------------

    def size(self) -> defer.Deferred[int]:
        return defer.succeed(self.state.counters[0])

    def empty(self) -> defer.Deferred[bool]:
        return defer.succeed(self.state.counters[0] == 0)

    def stats(self) -> defer.Deferred[dict[str, Any]]:
        state = self.state
        waiting, pending, done, failed, _, batched = state.counters
        counts = {"waiting": waiting, "pending": pending, "done": done, "failed": failed, "batched": batched}
        answer = stats_answer(counts, self.politeness.active_hosts(), self.politeness.top(5), len(state.hubs),
                              self.rejected, in_turn=self.politeness.hosts_in_turn())
        return defer.succeed(answer)

    def next_due(self) -> defer.Deferred[float | None]:
        state = self.state
        now = self._clock.seconds()
        times = [self.politeness.next_time(), state.hub_heap[0][0] if state.hub_heap else None]
        if state.counters[1]:
            times.append(state.lease_bound)
        known = [t for t in times if t is not None and t != float("inf")]
        return defer.succeed(max(0.0, min(known) - now) if known else None)

    # -- seeds (ISeedLists) ---------------------------------------------------------

    def set_seeds(self, urls: Iterable[str]) -> defer.Deferred[int]:
        """Remember the configured seeds (in memory only: a start or reload gives them again) for the seed timer."""
        distinct = dict.fromkeys(urls)
        # the seed service's own list when it has no repeats
        self._seeds = urls if isinstance(urls, URLList) and len(distinct) == len(urls) else URLList(distinct)
        return defer.succeed(len(self._seeds))

    def seed_urls(self) -> defer.Deferred[Sequence[str]]:
        """The seeds last given to set_seeds (one process: no other tool adds any), compactly (see URLList)."""
        return defer.succeed(self._seeds)

    # -- host policy (IHostPolicy) ---------------------------------------------------

    def set_host_delay(self, host: str, delay: float) -> defer.Deferred[None]:
        self.politeness.set_robots_delay(host, delay)
        return defer.succeed(None)

    def set_host_group(self, host: str, group: str) -> defer.Deferred[None]:
        self.politeness.set_group(host, group)
        return defer.succeed(None)

    def set_recrawl(self, pairs: Sequence[tuple[str, str]]) -> defer.Deferred[None]:
        self._crawled.kept = recrawl_pairs(pairs)
        return defer.succeed(None)

    def set_site_hops(self, by_domain: Mapping[str, int]) -> defer.Deferred[None]:
        self.hops.set_sites(by_domain)
        return defer.succeed(None)

    def set_politeness(self, rules: PoliteRules) -> defer.Deferred[None]:
        self.politeness.configure(rules)
        return defer.succeed(None)

    # -- maintenance ----------------------------------------------------------------

    def compact(self) -> None:
        """Compact the store range by range (a blocking call: for maintenance and benchmarks)."""
        compact(self._kv)

    def _reopen(self) -> None:
        """After a write the store refused: open the store again (LevelDB's; raises while it cannot)."""
        reopen = getattr(self._kv, "reopen", None)
        if reopen is not None:
            reopen()

    def _resync(self) -> None:
        """Memory as the store has it (after a write it refused)."""
        self.state.resync()
        self._statuses.resync()
        self._crawled.resync()

    # -- closing --------------------------------------------------------------------

    def close(self) -> defer.Deferred[None]:
        if not getattr(self._kv, "closed", False):
            self._kv.close()
        return defer.succeed(None)
