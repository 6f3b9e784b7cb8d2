"""The embedded URL pool: seed 000's contract over an ordered key-value store.

Every change of a URL's state is one atomic write batch that also carries the
counters, so a ``kill -9`` between two batches leaves a consistent pool.  Only
the host table, the hubs and a lease bound live in memory; all of them are
rebuilt at open from the small ``C``, ``H`` and ``L`` ranges, never by a scan
of the URLs.  So do the marks of leased URLs added again (``always``), which
need no rebuilding: at open every lease goes back to its queue.

The pool is made of parts, one module each: :mod:`.kvcore` (state, opening,
the write primitives), :mod:`.kvqueues` (adding, popping, hubs),
:mod:`.kvstatus` (outcomes, redirect claims, checkpoints, the seen set),
:mod:`.kvadmin` (why, export, import), :mod:`.crawled` (seed 004) and :mod:`.content` (content digests).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from twisted.internet import defer
from zope.interface import implementer

from spiderd.contracts.pool import IURLPool, IURLPoolAdmin
from spiderd.frontier.pool.content import KVContent
from spiderd.frontier.pool.kvadmin import KVAdmin
from spiderd.frontier.pool.kvstatus import KVStatuses
from spiderd.frontier.pool.shared import stats_answer


@implementer(IURLPool, IURLPoolAdmin)
class KVPool(KVStatuses, KVAdmin, KVContent):
    """A crash-safe, polite URL pool over a plyvel-like store (``get``, ``write_batch``, ``iterator``): the core
    contract and the admin part.  Its options are :class:`~spiderd.frontier.pool.kvcore.KVCore`'s: ``recrawl``
    names the (registered domain, kind) pairs whose done pages are kept in crawled sets; ``linkbase`` turns the
    linkbase on (see crawled.py).
    """

    # -- seeds and hosts ------------------------------------------------------------

    def set_seeds(self, urls: Iterable[str]) -> defer.Deferred[int]:
        """Remember the configured seeds (in memory only: a start or reload gives them again) for the seed timer."""
        self._seeds = list(dict.fromkeys(urls))
        return defer.succeed(len(self._seeds))

    def seed_urls(self) -> defer.Deferred[list[str]]:
        """The seeds last given to set_seeds (one process: no other tool adds any)."""
        return defer.succeed(list(self._seeds))

    def set_host_delay(self, host: str, delay: float) -> defer.Deferred[None]:
        self.politeness.set_robots_delay(host, delay)
        return defer.succeed(None)

    def set_host_group(self, host: str, group: str) -> defer.Deferred[None]:
        self.politeness.set_group(host, group)
        return defer.succeed(None)

    # -- questions ------------------------------------------------------------------

    def size(self) -> defer.Deferred[int]:
        return defer.succeed(self._counters[0])

    def empty(self) -> defer.Deferred[bool]:
        return defer.succeed(self._counters[0] == 0)

    def next_due(self) -> defer.Deferred[float | None]:
        now = self._clock.seconds()
        times = [self.politeness.next_time(), self._hub_heap[0][0] if self._hub_heap else None]
        if self._counters[1]:
            times.append(self._lease_bound)
        known = [t for t in times if t is not None and t != float("inf")]
        return defer.succeed(max(0.0, min(known) - now) if known else None)

    def stats(self) -> defer.Deferred[dict[str, Any]]:
        waiting, pending, done, failed, _, batched = self._counters
        counts = {"waiting": waiting, "pending": pending, "done": done, "failed": failed, "batched": batched}
        answer = stats_answer(counts, self.politeness.active_hosts(), self.politeness.top(5), len(self._hubs),
                              self.rejected)
        return defer.succeed(answer)

    # -- closing --------------------------------------------------------------------

    def close(self) -> defer.Deferred[None]:
        if not getattr(self._kv, "closed", False):
            self._kv.close()
        return defer.succeed(None)

