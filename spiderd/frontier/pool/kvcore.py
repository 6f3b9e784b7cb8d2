"""The embedded pool's shared state (:class:`KVState`) and the store primitives every part writes through.

A URL's queue entry and state key are written by ``enqueue``; every batch is
written by ``commit`` with the host counts and the counters, so each change
is one atomic write; leases that ran out go back to their queues in
``expire``.  The parts are each given this one object: :mod:`.kvqueues`
(adding, popping, hubs), :mod:`.kvstatus` (outcomes, redirect claims,
checkpoints), :mod:`.kvledger` (the seen set, batch numbers), :mod:`.kvadmin`
(why, export, import), :mod:`.crawled` (seed 004) and :mod:`.content`;
:class:`~spiderd.frontier.pool.kvpool.KVPool` puts them together.
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
from spiderd.frontier.pool.hops import HopLimits
from spiderd.frontier.pool.options import PoolOptions
from spiderd.frontier.pool.shared import HostErrors, RecentFailures, URLParser
from spiderd.frontier.pool.split import KindSplit

log = Logger()

TRIM_EVERY = 4096


class KVState:
    """What the embedded pool's parts share, over a plyvel-like store (``get``, ``write_batch``, ``iterator``).

    Its containers (``counters``, ``leased``, ``again``, ``hubs``, ``hub_heap``)
    are changed in place, never replaced, so a part may keep a reference to one;
    the numbers that several parts move (``lease_bound``, ``touched``) are read
    and written here.  ``trim`` compacts the store now and then.
    """

    def __init__(self, kv: Any, clock: IReactorTime, options: PoolOptions = PoolOptions(), *,
                 politeness: Politeness | None = None, trim: Callable[[], Any] | None = None) -> None:
        config = options.config
        self.kv = kv
        self.clock = clock
        self.politeness = politeness or Politeness()
        self.politeness.limit_turns(config.max_active_hosts)
        self.hops = HopLimits(config.max_hops, options.site_hops)  # link-hop limits (hops.py): counts in Q, L values
        self.failure_threshold = config.failure_threshold
        self.max_throttles = options.max_throttles
        self.conditional_get = options.conditional_get  # keep hubs' and recrawled pages' validators (set_statuses)
        self.pending_threshold = config.pending_threshold
        self.done_codes = options.done_codes
        self.final_codes = options.final_codes
        self.max_url_length = config.max_url_length
        self.max_per_host = config.max_urls_per_host
        self.split = KindSplit(config.list_ratio, config.detail_ratio)
        self.rejected: Counter[str] = Counter()
        self.urls = URLParser(config.max_url_length, self.rejected)
        self.recent_failures = RecentFailures()
        self.host_errors = HostErrors()
        self.counters = k.unpack_counters(kv.get(k.COUNTERS))
        self.hubs: dict[int, list[Any]] = {}  # fp -> [url, host, next_due]
        self.hub_heap: list[tuple[float, int]] = []
        # host or group key -> fps of due hubs that wait for a fetch of it to end (its slots full, or the hub still
        # held by its previous fetch): out of the heap, so a waiting hub costs no pop (see park)
        self.parked: dict[str, set[int]] = {}
        # url -> [fp, host, holds a host slot] of the URLs and hubs this process handed out
        self.leased: dict[str, list[Any]] = {}
        # fp -> prio of leased URLs added again (always=True): queued when the lease ends (a restart returns every
        # lease to its queue, so this needs no place in the store)
        self.again: dict[int, int] = {}
        self.lease_bound = float("inf")
        self.touched = 0
        self._ops = 0
        self._trim = trim
        self._load()

    # -- opening --------------------------------------------------------------------

    def _load(self) -> None:
        """Rebuild the host table and the hubs; put leases from a previous run back in the queues."""
        self._load_hosts()
        self._load_hubs()
        recovered = self.expire(float("inf"))
        if recovered:
            log.info("Recovered {count} leased URLs from the previous run", count=recovered)

    def _load_hosts(self) -> None:
        """Each host's waiting count from the store (hosts it has none for: 0), its read position dropped."""
        politeness = self.politeness
        stored = {key[1:]: value for key, value in self.kv.iterator(prefix=k.HOST)}
        for slot in list(politeness.hosts.values()):
            value = stored.pop(k.host_id(slot.host), None)
            slot.waiting = 0 if value is None else k.from_u64(value)[0]
            slot.cursor = slot.seen = None
            politeness.requeue(slot)
        for value in stored.values():
            slot = politeness.slot(value[8:].decode())
            slot.waiting = k.from_u64(value)[0]
            politeness.requeue(slot)

    def _load_hubs(self) -> None:
        self.hubs.clear()
        for key, value in self.kv.iterator(prefix=k.HUB):
            fp = int.from_bytes(key[1:], "big")
            url = value[8:].decode()
            self.hubs[fp] = [url, host_of(url), k.from_u64(value)[0] / 1000.0]
        self.hub_heap[:] = [(entry[2], fp) for fp, entry in self.hubs.items()]
        heapq.heapify(self.hub_heap)

    def resync(self) -> None:
        """Memory as the store has it, after a write the store refused (the write's changes to memory were made
        first): the counters, each host's waiting count, the hubs, the lease bound; hand-outs of this process
        that the store has no lease of are dropped (their host slots freed); hosts read their queues afresh."""
        self.counters[:] = k.unpack_counters(self.kv.get(k.COUNTERS))
        self._load_hosts()
        self._load_hubs()
        for url, leased in list(self.leased.items()):
            state = self.kv.get(k.state_key(leased[0]))
            if (state is None or state[0] != k.PENDING) and leased[0] not in self.hubs:
                self.release(self.leased.pop(url))
        following = next(self.kv.iterator(prefix=k.LEASE, include_value=False), None)
        self.lease_bound = k.from_u64(following, 1)[0] / 1000.0 if following else float("inf")

    # -- the primitives -------------------------------------------------------------

    def enqueue(self, batch: Any, url: str, fp: int, slot: HostSlot, prio: int, failures: int, hops: int = 0) -> None:
        """Queue ``url`` (waiting, ``hops`` links from a seed) at the tail of its host's ``prio`` queue, in ``batch``."""
        counters = self.counters
        counters[4] += 1
        seq = counters[4]
        batch.put(k.queue_key(k.host_id(slot.host), prio, seq), k.url_value(bytes((min(failures, 255),)), url, hops))
        if slot.cursor is not None:
            slot.cursor.more(prio)
        batch.put(k.state_key(fp), k.active(k.WAITING, failures, prio, seq))
        counters[0] += 1
        slot.waiting += 1

    def hops_of(self, fp: int, state: bytes | None, host: str) -> int:
        """The hop count of an active URL of ``host`` (its ``state``), kept in its lease or queue value; 0 for any
        other, and when no hop limit is set."""
        if state is None or not self.hops.tracking or state[0] not in (k.PENDING, k.WAITING):
            return 0
        _, prio, number = k.parse_active(state)
        if state[0] == k.PENDING:
            value = self.kv.get(k.lease_key(number, fp))
            return 0 if value is None else k.split_url_value(value, 2)[1]
        value = self.kv.get(k.queue_key(k.host_id(host), prio, number))
        return 0 if value is None else k.split_url_value(value, 1)[1]

    def release(self, leased: list[Any] | None, settle: bool = True) -> None:
        """Free the host slot a hand-out (its ``leased`` record) holds, once; the hubs parked on its host (or
        group) go back to the heap.  ``settle``: the URL's status is in (or its lease ended), which ends its host's
        turn if that has no more work; else (its fetch is over, see ``fetched``) the turn waits for ``settle``."""
        if leased is None:
            return
        if leased[2]:
            leased[2] = False if settle else None
            self.politeness.release(self.slot(leased[1]), unsettled=not settle)
        elif leased[2] is None and settle:
            self.settle(leased)
        if self.parked:
            self.unpark(leased[1])

    def settle(self, leased: list[Any] | None) -> None:
        """The status of a hand-out whose host slot was freed at its fetch's end is in (see ``release``)."""
        if leased is not None and leased[2] is None:
            leased[2] = False
            self.politeness.settle(self.slot(leased[1]))

    def park(self, slot: HostSlot, fp: int) -> None:
        """Keep the due hub ``fp`` of ``slot``'s host out of the heap until a fetch of its host (or group) ends."""
        key = slot.host if slot.group is None else slot.group.key
        self.parked.setdefault(key, set()).add(fp)

    def unpark(self, host: str | None = None) -> None:
        """Put the hubs parked on ``host`` and its group (None: all of them) back in the heap, at their due time."""
        if host is None:
            keys = list(self.parked)
        else:
            slot = self.politeness.hosts.get(host)
            keys = [host] if slot is None or slot.group is None else [host, slot.group.key]
        for key in keys:
            for fp in self.parked.pop(key, ()):
                entry = self.hubs.get(fp)
                if entry is not None:
                    heapq.heappush(self.hub_heap, (entry[2], fp))

    def slot(self, host: str) -> HostSlot:
        """The politeness slot of ``host`` (made on first use)."""
        return self.politeness.slot(host)

    def commit(self, batch: Any, slots: Iterable[HostSlot]) -> None:
        """Write ``batch`` with the host counts of ``slots`` and the counters, atomically."""
        for slot in slots:
            hkey = k.HOST + k.host_id(slot.host)
            if slot.waiting > 0:
                batch.put(hkey, k.u64(slot.waiting) + slot.host.encode())
            else:
                batch.delete(hkey)
            self.politeness.requeue(slot)
        batch.put(k.COUNTERS, k.pack_counters(self.counters))
        batch.write()

    def expire(self, now: float) -> int:
        """Put URLs whose lease ended before ``now`` back in their host queues."""
        stop = k.lease_key(min(int(now * 1000), 2**63), 0) if now != float("inf") else k.prefix_end(k.LEASE)
        expired = list(self.kv.iterator(start=k.LEASE, stop=stop))
        if expired:
            batch = self.kv.write_batch()
            slots: dict[str, HostSlot] = {}
            for key, value in expired:
                url, hops = k.split_url_value(value, 2)
                fp = int.from_bytes(key[9:], "big")
                slot = slots.get(host_of(url)) or self.slot(host_of(url))
                slots[slot.host] = slot
                batch.delete(key)
                self.release(self.leased.pop(url, None))
                self.counters[1] -= 1
                again = self.again.pop(fp, None)  # added again while leased: a new request, no failures
                prio, failures = (value[1], value[0]) if again is None else (again, 0)
                self.enqueue(batch, url, fp, slot, prio, failures, hops if again is None else 0)
            self.commit(batch, slots.values())
            self.unpark()  # (a hub parked on a host that moved to another group meanwhile)
        following = next(self.kv.iterator(prefix=k.LEASE, include_value=False), None)
        self.lease_bound = k.from_u64(following, 1)[0] / 1000.0 if following else float("inf")
        return len(expired)

    def maybe_trim(self) -> None:
        """Every TRIM_EVERY URLs touched, drop the mapped table pages from the resident set (see trim.py)."""
        if self._trim is not None and self.touched >= TRIM_EVERY:
            self.touched = 0
            self._trim()

    def maybe_collect(self, now: float) -> None:
        """Every 10,000 pops, let politeness forget idle hosts."""
        self._ops += 1
        if self._ops % 10000 == 0:
            self.politeness.collect(now)
