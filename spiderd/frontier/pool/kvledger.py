"""The embedded pool's batch ledger: the seen set the batcher filters detail URLs by, and batch numbers.

A URL sent in a batch gets the final state ``B`` (batched) in the pool's own
state keys, so it is seen for good, whatever queue or lease it never had (with
an ``R`` entry when its domain's detail pages are recrawled, see crawled.py); the
last batch number is one key (``N``), so numbers are unique for the life of the store.
"""

from __future__ import annotations

from collections.abc import Iterable

from twisted.internet import defer
from zope.interface import implementer

from spiderd.contracts.pool import IBatchLedger
from spiderd.frontier.pool import keys as k
from spiderd.frontier.pool.crawled import CrawledSets
from spiderd.frontier.pool.kvcore import KVState


@implementer(IBatchLedger)
class KVLedger:
    """KVPool's seen_filter, seen_add and next_batch, over the pool's ``state`` (a URL sent in a batch of a
    recrawled domain also goes in its ``crawled`` set)."""

    def __init__(self, state: KVState, crawled: CrawledSets) -> None:
        self._state = state
        self._kv = state.kv
        self._crawled = crawled

    def seen_filter(self, urls: Iterable[str]) -> defer.Deferred[list[str]]:
        """The canonical forms of ``urls`` the pool has never seen (in any state), without duplicates."""
        kv_get = self._kv.get
        fresh: dict[int, str] = {}
        for u in map(self._state.urls.parse, urls):
            if u is not None and u.fingerprint not in fresh and kv_get(k.state_key(u.fingerprint)) is None:
                fresh[u.fingerprint] = u.url
        return defer.succeed(list(fresh.values()))

    def seen_add(self, urls: Iterable[str]) -> defer.Deferred[int]:
        """Record ``urls`` as sent in a batch (a final state here); fires with the number newly recorded."""
        batch = self._kv.write_batch()
        marked: set[int] = set()
        for u in map(self._state.urls.parse, urls):
            if u is not None and u.fingerprint not in marked and self._kv.get(k.state_key(u.fingerprint)) is None:
                marked.add(u.fingerprint)
                batch.put(k.state_key(u.fingerprint), self._crawled.batched_state(batch, u.url, u.host, u.fingerprint))
        if marked:
            self._state.counters[5] += len(marked)
            self._state.commit(batch, ())
        return defer.succeed(len(marked))

    def next_batch(self, count: int = 1) -> defer.Deferred[int]:
        """Reserve ``count`` batch numbers, unique for the life of the store; fires with the first."""
        last = k.from_u64(self._kv.get(k.BATCH_NUMBER, k.u64(0)))[0]
        self._kv.put(k.BATCH_NUMBER, k.u64(last + count))
        return defer.succeed(last + 1)
