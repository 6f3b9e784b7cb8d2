"""The embedded pool's core: its state, opening, and the store primitives every part writes through.

A URL's queue entry and state key are written by ``_enqueue``; every batch is
written by ``_commit`` with the host counts and the counters, so each change
is one atomic write; leases that ran out go back to their queues in
``_expire``.  The parts built on it: :mod:`.kvqueues` (adding, popping, hubs),
:mod:`.kvstatus` (outcomes, redirect claims, checkpoints, the seen set),
:mod:`.kvadmin` (why, export, import) and :mod:`.crawled` (seed 004); they
make :class:`~spiderd.frontier.pool.kvpool.KVPool`.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from spiderd.core.urls import host_of
from spiderd.engine.politeness import HostSlot, Politeness
from spiderd.frontier.pool import keys as k
from spiderd.frontier.pool.crawled import CrawledSets
from spiderd.frontier.pool.hops import HopLimits
from spiderd.frontier.pool.options import PoolOptions
from spiderd.frontier.pool.shared import HostErrors, RecentFailures, URLParsing
from spiderd.frontier.pool.split import KindSplit

log = Logger()

TRIM_EVERY = 4096


class KVCore(CrawledSets, URLParsing):
    """KVPool's state over a plyvel-like store (``get``, ``write_batch``, ``iterator``) and its primitives.

    ``options`` (the same for every backend): its ``recrawl`` names the (registered domain, kind) pairs whose
    done pages are kept in crawled sets; ``config.linkbase`` turns the linkbase on (see crawled.py). ``trim``
    compacts the store now and then.
    """

    def __init__(self, kv: Any, clock: IReactorTime, options: PoolOptions = PoolOptions(), *,
                 politeness: Politeness | None = None, trim: Callable[[], Any] | None = None) -> None:
        config = options.config
        self._kv = kv
        self.hops = HopLimits(config.max_hops, options.site_hops)  # link-hop limits (hops.py): counts in Q, L values
        self._clock = clock
        self.politeness = politeness or Politeness()
        self.failure_threshold = config.failure_threshold
        self.max_throttles = options.max_throttles
        self.conditional_get = options.conditional_get  # keep hubs' and recrawled pages' validators (set_statuses)
        self._throttles: dict[int, int] = {}  # fp -> throttled fetches of an active URL (its Y entry)
        self.pending_threshold = config.pending_threshold
        self._done_codes = options.done_codes
        self._final_codes = options.final_codes
        self._max_url_length = config.max_url_length
        self._max_per_host = config.max_urls_per_host
        self.split = KindSplit(config.list_ratio, config.detail_ratio)
        self.rejected: Counter[str] = Counter()
        self.recent_failures = RecentFailures()
        self.host_errors = HostErrors()
        self._counters = k.unpack_counters(kv.get(k.COUNTERS))
        self._hubs: dict[int, list[Any]] = {}  # fp -> [url, host, next_due]
        self._hub_heap: list[tuple[float, int]] = []
        # url -> [fp, host, holds a host slot] of the URLs and hubs this process handed out
        self._leased: dict[str, list[Any]] = {}
        # fp -> prio of leased URLs added again (always=True): queued when the lease ends (a restart returns every
        # lease to its queue, so this needs no place in the store)
        self._again: dict[int, int] = {}
        self._hub_span = 0.0
        self._seeds: list[str] = []  # the configured seeds, as last given to set_seeds
        self._lease_bound = float("inf")
        self._ops = 0
        self._trim = trim
        self._touched = 0
        self._init_crawled(options.recrawl, config.linkbase, config.linkbase_max)
        self._load()

    # -- opening --------------------------------------------------------------------

    def _load(self) -> None:
        """Rebuild the host table and the hubs; put leases from a previous run back in the queues."""
        politeness = self.politeness
        for key, value in self._kv.iterator(prefix=k.HOST):
            host = value[8:].decode()
            slot = politeness.slot(host, key[1:])
            slot.waiting = k.from_u64(value)[0]
            politeness.requeue(slot)
        for key, value in self._kv.iterator(prefix=k.HUB):
            fp = int.from_bytes(key[1:], "big")
            url = value[8:].decode()
            self._hubs[fp] = [url, host_of(url), k.from_u64(value)[0] / 1000.0]
        for key, value in self._kv.iterator(prefix=k.THROTTLED):
            self._throttles[int.from_bytes(key[1:], "big")] = value[0]
        self._hub_heap = [(entry[2], fp) for fp, entry in self._hubs.items()]
        heapq.heapify(self._hub_heap)
        recovered = self._expire(float("inf"))
        if recovered:
            log.info("Recovered {count} leased URLs from the previous run", count=recovered)

    # -- the primitives -------------------------------------------------------------

    def _enqueue(self, batch: Any, url: str, fp: int, slot: HostSlot, prio: int, failures: int, hops: int = 0) -> None:
        """Queue ``url`` (waiting, ``hops`` links from a seed) at the tail of its host's ``prio`` queue, in ``batch``."""
        counters = self._counters
        counters[4] += 1
        seq = counters[4]
        batch.put(k.queue_key(slot.hid, prio, seq), k.url_value(bytes((min(failures, 255),)), url, hops))
        if slot.cursor is not None:
            slot.cursor.maybe[prio] = True
        batch.put(k.state_key(fp), k.active(k.WAITING, failures, prio, seq))
        counters[0] += 1
        slot.waiting += 1

    def _hops_of(self, fp: int, state: bytes | None, host: str) -> int:
        """The hop count of an active URL of ``host`` (its ``state``), kept in its lease or queue value; 0 for any
        other, and when no hop limit is set."""
        if state is None or not self.hops.tracking or state[0] not in (k.PENDING, k.WAITING):
            return 0
        _, prio, number = k.parse_active(state)
        if state[0] == k.PENDING:
            value = self._kv.get(k.lease_key(number, fp))
            return 0 if value is None else k.split_url_value(value, 2)[1]
        value = self._kv.get(k.queue_key(k.host_id(host), prio, number))
        return 0 if value is None else k.split_url_value(value, 1)[1]

    def _release(self, leased: list[Any] | None) -> None:
        """Free the host slot a hand-out (its ``_leased`` record) holds, once."""
        if leased is not None and leased[2]:
            leased[2] = False
            self.politeness.release(self._slot(leased[1]))

    def _slot(self, host: str) -> HostSlot:
        """The politeness slot of ``host`` (made on first use)."""
        return self.politeness.slot(host, k.host_id(host))

    def _commit(self, batch: Any, slots: Iterable[HostSlot]) -> None:
        """Write ``batch`` with the host counts of ``slots`` and the counters, atomically."""
        for slot in slots:
            hkey = k.HOST + slot.hid
            if slot.waiting > 0:
                batch.put(hkey, k.u64(slot.waiting) + slot.host.encode())
            else:
                batch.delete(hkey)
            self.politeness.requeue(slot)
        batch.put(k.COUNTERS, k.pack_counters(self._counters))
        batch.write()

    def _expire(self, now: float) -> int:
        """Put URLs whose lease ended before ``now`` back in their host queues."""
        stop = k.lease_key(min(int(now * 1000), 2**63), 0) if now != float("inf") else k.prefix_end(k.LEASE)
        expired = list(self._kv.iterator(start=k.LEASE, stop=stop))
        if expired:
            batch = self._kv.write_batch()
            slots: dict[str, HostSlot] = {}
            for key, value in expired:
                url, hops = k.split_url_value(value, 2)
                fp = int.from_bytes(key[9:], "big")
                slot = slots.get(host_of(url)) or self._slot(host_of(url))
                slots[slot.host] = slot
                batch.delete(key)
                self._release(self._leased.pop(url, None))
                self._counters[1] -= 1
                again = self._again.pop(fp, None)  # added again while leased: a new request, no failures
                prio, failures = (value[1], value[0]) if again is None else (again, 0)
                self._enqueue(batch, url, fp, slot, prio, failures, hops if again is None else 0)
            self._commit(batch, slots.values())
        following = next(self._kv.iterator(prefix=k.LEASE, include_value=False), None)
        self._lease_bound = k.from_u64(following, 1)[0] / 1000.0 if following else float("inf")
        return len(expired)

    def _maybe_trim(self) -> None:
        """Every TRIM_EVERY URLs touched, drop the mapped table pages from the resident set (see trim.py)."""
        if self._trim is not None and self._touched >= TRIM_EVERY:
            self._touched = 0
            self._trim()

    def _maybe_collect(self, now: float) -> None:
        """Every 10,000 pops, let politeness forget idle hosts."""
        self._ops += 1
        if self._ops % 10000 == 0:
            self.politeness.collect(now)

