"""The embedded pool's queues: adding URLs, leasing them host by host (pop), and the hubs.

A host's queues (list, detail) are read a few keys ahead (``PREFETCH``) from
just past the last key read, so a pop seeks once per host and never walks
over deleted keys; a key deleted outside a pop (a status, a claim) leaves the
read-ahead too (``dequeue``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Any

from twisted.internet import defer

from spiderd.core.urls import fingerprint, host_of
from spiderd.engine.politeness import HostSlot
from spiderd.frontier.pool.split import hub_quota
from spiderd.frontier.pool import keys as k
from spiderd.frontier.pool.crawled import CrawledSets
from spiderd.frontier.pool.hops import REJECTED
from spiderd.frontier.pool.kvcore import KVState
from spiderd.frontier.pool.split import RESERVE_SCAN

PREFETCH = 8
PREFETCH_HOSTS = 5000


class _Queues:
    """A host's read state in its two queues (list 0, detail 1): the position past the last key read, the keys
    read ahead and not taken yet (a list, only while it holds some), and whether the queue may hold more (a
    bit per queue).

    Every host known has one, so it is kept flat (about 70 bytes, its
    lists aside): two empty deques alone would take 1.3 KB a host.
    """

    __slots__ = ("buffered0", "buffered1", "maybe", "position0", "position1")

    def __init__(self) -> None:
        self.position0: bytes | None = None
        self.position1: bytes | None = None
        self.buffered0: list[tuple[bytes, bytes]] | None = None
        self.buffered1: list[tuple[bytes, bytes]] | None = None
        self.maybe = 3

    def position(self, prio: int) -> bytes | None:
        """Just past the last key read in the ``prio`` queue (None: from its start)."""
        return self.position1 if prio else self.position0

    def buffered(self, prio: int) -> list[tuple[bytes, bytes]] | None:
        """The keys (and values) read ahead in the ``prio`` queue, None when there are none."""
        return self.buffered1 if prio else self.buffered0

    def keep(self, prio: int, position: bytes | None, buffered: list[tuple[bytes, bytes]] | None) -> None:
        """Set the ``prio`` queue's read position and read-ahead (None when empty)."""
        buffered = buffered or None
        if prio:
            self.position1, self.buffered1 = position, buffered
        else:
            self.position0, self.buffered0 = position, buffered

    def may_hold(self, prio: int) -> bool:
        """Whether the ``prio`` queue may hold keys past the read position."""
        return bool(self.maybe >> prio & 1)

    def more(self, prio: int) -> None:
        """Something was queued in ``prio``: read it again."""
        self.maybe |= 1 << prio

    def take(self, prio: int) -> tuple[bytes, bytes] | None:
        """The next key read ahead in ``prio`` (and its value), or None."""
        buffered = self.buffered(prio)
        if not buffered:
            return None
        item = buffered.pop(0)
        if not buffered:
            self.keep(prio, self.position(prio), None)
        return item


class KVQueues:
    """KVPool's queues: add and addmany (with the host budget), pop (hubs first, then the kinds' shares, then
    host by host), set_hubs; over the pool's ``state``, with its ``crawled`` sets (an added URL leaves its own)."""

    def __init__(self, state: KVState, crawled: CrawledSets) -> None:
        self._state = state
        self._crawled = crawled
        self._kv = state.kv
        self._clock = state.clock
        self._counters = state.counters
        self._leased = state.leased
        self._again = state.again
        self._hubs = state.hubs
        self._hub_heap = state.hub_heap
        self.politeness = state.politeness
        self._max_per_host = state.max_per_host
        self._hub_span = 0.0

    # -- adding ---------------------------------------------------------------------

    def add(self, url: str, always: bool = False, detail: bool = False) -> defer.Deferred[bool]:
        return defer.succeed(self.add_urls((url,), always, detail) == 1)

    def addmany(self, urls: Iterable[str], always: bool = False, detail: bool = False,
                parent: str | None = None) -> defer.Deferred[int]:
        if isinstance(urls, str):
            urls = (urls,)
        return defer.succeed(self.add_urls(urls, always, detail, parent))

    def within_hops(self, parent: str, urls: Sequence[str]) -> defer.Deferred[list[str]]:
        """The links ``urls`` of ``parent`` within their hop limit (all of them when none is set); the others
        are counted as rejected (``max-hops``)."""
        limits = self._state.hops
        if not limits.tracking:
            return defer.succeed(list(urls))
        hops = self._parent_hops(parent) + 1
        kept = [url for url in urls if limits.within(hops, host_of(url))]
        if len(kept) < len(urls):
            self._state.rejected[REJECTED] += len(urls) - len(kept)
        return defer.succeed(kept)

    def _parent_hops(self, parent: str) -> int:
        """The hop count of the page ``parent`` (leased: its links are added before its status)."""
        u = self._state.urls.parse(parent)
        return 0 if u is None else self._state.hops_of(u.fingerprint, self._kv.get(k.state_key(u.fingerprint)), u.host)

    def add_urls(self, urls: Iterable[str], always: bool, detail: bool, parent: str | None = None) -> int:
        """Queue ``urls`` (see IURLQueue.addmany); the number queued."""
        state = self._state
        limits, parse, rejected = state.hops, state.urls.parse, state.rejected
        prio = 1 if detail else 0
        hops = self._parent_hops(parent) + 1 if parent is not None and limits.tracking else 0
        kv_get = self._kv.get
        batch = self._kv.write_batch()
        counters = self._counters
        touched: dict[str, HostSlot] = {}
        seen: set[int] = set()
        added = 0
        for raw in urls:
            state.touched += 1
            u = parse(raw)
            if u is None or u.fingerprint in seen:
                continue
            seen.add(u.fingerprint)
            skey = k.state_key(u.fingerprint)
            known = kv_get(skey)
            if known is not None:
                if not always or known[0] == k.WAITING:
                    continue
                if known[0] == k.PENDING:  # leased: queued again when its lease ends, never fetched twice at once
                    if u.fingerprint not in self._again:
                        self._again[u.fingerprint] = prio
                        added += 1
                    continue
                counters[{k.DONE: 2, k.FAILED: 3, k.BATCHED: 5}[known[:1]]] -= 1
                self._crawled.forget(batch, u.host, u.fingerprint, known)
            if hops and known is None and not limits.within(hops, u.host):
                rejected[REJECTED] += 1
                continue
            slot = touched.get(u.host) or state.slot(u.host)
            if known is None and self._max_per_host and not self._take_budget(slot):
                rejected["host-full"] += 1
                continue
            touched[u.host] = slot
            state.enqueue(batch, u.url, u.fingerprint, slot, prio, 0, hops)
            added += 1
        if added:
            for slot in touched.values():  # the budgets spent here (the only place they change)
                if slot.seen is not None:
                    batch.put(k.HOST_SEEN + k.host_id(slot.host), k.u64(slot.seen))
            state.commit(batch, touched.values())
        state.maybe_trim()
        return added

    def _take_budget(self, slot: HostSlot) -> bool:
        """Count one new URL against the host's budget (max_urls_per_host); False when it is spent."""
        if slot.seen is None:
            stored = self._kv.get(k.HOST_SEEN + k.host_id(slot.host))
            slot.seen = k.from_u64(stored)[0] if stored else 0
        if slot.seen >= self._max_per_host:
            return False
        slot.seen += 1
        return True

    # -- popping --------------------------------------------------------------------

    def pop(self, count: int, hub_percent: int = 50) -> defer.Deferred[dict[str, bool]]:
        state = self._state
        now = self._clock.seconds()
        if now >= state.lease_bound:
            state.expire(now)
        batch = self._kv.write_batch()
        hubs = self._pop_hubs(batch, now, hub_quota(count, hub_percent))
        result: dict[str, bool] = dict.fromkeys(hubs, True)
        touched = self._pop_urls(batch, now, count - len(hubs), result)
        if result:
            try:
                state.commit(batch, touched)
            except Exception:  # not written (a full disk): nothing is handed out, the hosts' slots are free
                for url in result:
                    state.release(self._leased.pop(url, None))
                raise
        state.touched += len(result)
        state.maybe_collect(now)
        state.maybe_trim()
        return defer.succeed(result)

    def _pop_urls(self, batch: Any, now: float, wanted: int, result: dict[str, bool]) -> list[HostSlot]:
        """Lease up to ``wanted`` waiting URLs: the kinds' reserved shares first (see split.py), then any."""
        state = self._state
        deadline_ms = int((now + state.pending_threshold) * 1000)
        touched: list[HostSlot] = []
        taken = [0, 0]
        split = state.split
        reserved = split.reserve(wanted)
        left = wanted
        if any(reserved):
            left -= self._turns(batch, now, reserved, True, deadline_ms, result, touched, taken)
        self._turns(batch, now, [left, left], False, deadline_ms, result, touched, taken)
        split.settle(wanted, taken)
        if touched and state.lease_bound == float("inf"):
            state.lease_bound = deadline_ms / 1000.0
        return touched

    def _turns(self, batch: Any, now: float, caps: list[int], strict: bool, deadline_ms: int,
               result: dict[str, bool], touched: list[HostSlot], taken: list[int]) -> int:
        """Hosts in turn give up to ``caps[prio]`` URLs of each kind, ``sum(caps)`` in all if ``strict``, else
        ``max(caps)`` of any kind (``caps`` of one number each); returns the number leased.

        When ``strict``, a host with none of the kinds still wanted keeps its
        turn (is passed over), up to RESERVE_SCAN hosts a call.
        """
        politeness = self.politeness
        wanted = sum(caps) if strict else max(caps)
        passed: list[HostSlot] = []
        got = 0
        while wanted > 0 and len(passed) < RESERVE_SCAN:
            slot = politeness.ready(now)
            if slot is None:
                break
            quota = politeness.quota(slot, now, wanted)
            if passed:  # hosts passed over are ready too: one URL a turn
                quota = min(quota, 1)
            counts = self._take(batch, slot, quota, caps, deadline_ms, result)
            took = counts[0] + counts[1]
            if strict and not took:
                passed.append(slot)
                continue
            if took < quota and not strict:  # the count said more: trust the store
                slot.waiting = took
            politeness.taken(slot, took, now)
            touched.append(slot)
            taken[0] += counts[0]
            taken[1] += counts[1]
            wanted -= took
            got += took
            self._counters[0] -= took
            self._counters[1] += took
        for slot in passed:
            politeness.requeue(slot)
        return got

    def _take(self, batch: Any, slot: HostSlot, quota: int, caps: list[int], deadline_ms: int,
              result: dict[str, bool]) -> list[int]:
        """Lease up to ``quota`` URLs of one host, list URLs first, at most ``caps[prio]`` of each kind (the caps
        go down by what is taken); returns the counts per kind."""
        queues = slot.cursor or _Queues()
        slot.cursor = queues
        counts = [0, 0]
        for prio in (0, 1):
            while counts[0] + counts[1] < quota and caps[prio] > 0:
                item = queues.take(prio)
                if item is None:
                    if not queues.may_hold(prio):
                        break
                    self._refill(slot, queues, prio, max(quota - counts[0] - counts[1], self._prefetch()))
                    item = queues.take(prio)
                    if item is None:
                        break
                key, value = item
                url = k.split_url_value(value, 1)[0]
                fp = fingerprint(url)
                batch.delete(key)
                batch.put(k.lease_key(deadline_ms, fp), value[:1] + key[9:10] + value[1:])
                batch.put(k.state_key(fp), k.active(k.PENDING, value[0], prio, deadline_ms))
                result[url] = False
                self._leased[url] = [fp, slot.host, True]
                counts[prio] += 1
                caps[prio] -= 1
        return counts

    def _refill(self, slot: HostSlot, queues: _Queues, prio: int, count: int) -> None:
        """Read the next ``count`` keys of one host queue into its buffer, from just past the last key read.

        A seek from the start of the queue would walk over every deleted key
        (LevelDB keeps them until a compaction); new keys always sort after the
        read position because their sequence numbers grow.  One seek serves
        several pops of the host: iterators are the cost of a pop.
        """
        lowest = k.QUEUE + k.host_id(slot.host) + bytes((prio,))
        buffered = queues.buffered(prio) or []
        position = queues.position(prio)
        for key, value in self._kv.iterator(start=position or lowest, stop=k.prefix_end(lowest)):
            position = key + b"\x00"
            buffered.append((key, value))
            if len(buffered) >= count:
                break
        else:
            queues.maybe &= ~(1 << prio)  # read to the end: empty, once the buffer is taken, until something is queued
        queues.keep(prio, position, buffered)

    def _prefetch(self) -> int:
        """Keys read ahead per seek: a few, unless there are so many hosts that buffers would add up."""
        return PREFETCH if len(self.politeness.hosts) <= PREFETCH_HOSTS else 1

    def dequeue(self, batch: Any, slot: HostSlot, state: bytes) -> tuple[int, int, int]:
        """Take a waiting URL (its ``state``) out of its host queue and the read-ahead; (failures, prio, hops)."""
        failures, prio, seq = k.parse_active(state)
        key = k.queue_key(k.host_id(slot.host), prio, seq)
        hops = 0
        if self._state.hops.tracking:
            value = self._kv.get(key)
            hops = 0 if value is None else k.split_url_value(value, 1)[1]
        batch.delete(key)
        self._unbuffer(slot, prio, key)
        self._counters[0] -= 1
        slot.waiting -= 1
        return failures, prio, hops

    def _unbuffer(self, slot: HostSlot, prio: int, key: bytes) -> None:
        """A queued key deleted outside a pop (a status or a claim for a waiting URL) leaves the read-ahead too."""
        queues = slot.cursor
        buffered = None if queues is None else queues.buffered(prio)
        if queues is not None and buffered:
            for index, (buffered_key, _) in enumerate(buffered):
                if buffered_key == key:
                    del buffered[index]
                    queues.keep(prio, queues.position(prio), buffered)
                    return

    # -- hubs -----------------------------------------------------------------------

    def set_hubs(self, urls: Iterable[str], refresh_span: float) -> defer.Deferred[None]:
        self._hub_span = float(refresh_span)
        batch = self._kv.write_batch()
        wanted = {u.fingerprint: u for u in map(self._state.urls.parse, urls) if u is not None}
        for fp in list(self._hubs):
            if fp not in wanted:
                del self._hubs[fp]
                batch.delete(k.HUB + fp.to_bytes(8, "big"))
                batch.delete(k.validators_key(fp))  # a page kept in a crawled set too is asked for in full once
        for fp, u in wanted.items():
            if fp not in self._hubs:
                self._hubs[fp] = [u.url, u.host, 0.0]
                batch.put(k.HUB + fp.to_bytes(8, "big"), k.u64(0) + u.url.encode())
            else:
                due = self._hubs[fp][2]
                self._hubs[fp][2] = min(due, self._clock.seconds() + self._hub_span)
        batch.write()
        self._state.parked.clear()
        self._hub_heap[:] = [(entry[2], fp) for fp, entry in self._hubs.items()]
        heapq.heapify(self._hub_heap)
        return defer.succeed(None)

    def _pop_hubs(self, batch: Any, now: float, wanted: int) -> list[str]:
        """Lease up to ``wanted`` due hubs whose host may go now; each is due again a refresh span later.  A due
        hub whose host may not go yet is due at its host's next-allowed time; one whose host has no free slot, or
        that its previous fetch still holds, is parked until a fetch of that host ends (``KVState.park``): so a
        waiting hub costs no pop, and is never fetched twice at once."""
        out: list[str] = []
        heap = self._hub_heap
        later = []
        while heap and heap[0][0] <= now and len(out) < wanted:
            due, fp = heapq.heappop(heap)
            entry = self._hubs.get(fp)
            if entry is None or entry[2] != due:
                continue
            url, host, _ = entry
            slot = self._state.slot(host)
            if url in self._leased or slot.inflight >= slot.concurrency:
                self._state.park(slot, fp)  # back in the heap when a fetch of its host (or its own) ends
                continue
            if slot.next_allowed > now:  # due when its host may go (a delay, a throttling block)
                entry[2] = slot.next_allowed
                later.append((entry[2], fp))
                continue
            entry[2] = now + self._hub_span
            later.append((entry[2], fp))
            batch.put(k.HUB + fp.to_bytes(8, "big"), k.u64(int(entry[2] * 1000)) + url.encode())
            slot.inflight += 1
            slot.next_allowed = now + slot.delay
            self._leased[url] = [fp, host, True]
            out.append(url)
        for item in later:
            heapq.heappush(heap, item)
        return out
