"""The embedded URL pool: seed 000's contract over an ordered key-value store.

Every change of a URL's state is one atomic write batch that also carries the
counters, so a ``kill -9`` between two batches leaves a consistent pool.  Only
the host table, the hubs and a lease bound live in memory; all of them are
rebuilt at open from the small ``C``, ``H`` and ``L`` ranges, never by a scan
of the URLs.  So do the marks of leased URLs added again (``always``), which
need no rebuilding: at open every lease goes back to its queue.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from typing import Any, Callable, Iterable

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from spiderd.core import status as st
from spiderd.frontier.interfaces import IURLPool, IURLPoolAdmin
from spiderd.frontier.politeness import HostSlot, Politeness, hub_quota
from spiderd.core.urls import MAX_URL_LENGTH, BadURL, URL, fingerprint, host_of, parse
from spiderd.frontier.pool import keys as k
from spiderd.frontier.pool.crawled import CrawledSets
from spiderd.frontier.pool import records as rec
from spiderd.frontier.pool.kvexport import FINGERPRINT, KVExport
from spiderd.frontier.pool.split import RESERVE_SCAN, KindSplit

log = Logger()

TRIM_EVERY = 4096
PREFETCH = 8
PREFETCH_HOSTS = 5000


class _Queues:
    """A host's read state in its two queues (list, detail): position past the last key read, keys read
    ahead and not taken yet, and whether the queue may hold more."""

    __slots__ = ("position", "buffered", "maybe")

    def __init__(self) -> None:
        self.position: list[bytes | None] = [None, None]
        self.buffered: list[deque[tuple[bytes, bytes]]] = [deque(), deque()]
        self.maybe = [True, True]


@implementer(IURLPool, IURLPoolAdmin)
class KVPool(CrawledSets):
    """A crash-safe, polite URL pool over a plyvel-like store (``get``, ``write_batch``, ``iterator``).

    ``recrawl`` names the (registered domain, kind) pairs whose done pages are
    kept in crawled sets; ``linkbase`` turns the linkbase on (see crawled.py).
    """

    def __init__(
        self,
        kv: Any,
        clock: IReactorTime,
        *,
        politeness: Politeness | None = None,
        failure_threshold: int = st.FAILURE_THRESHOLD,
        pending_threshold: float = 300.0,
        done_codes: frozenset[int] = st.DONE_CODES,
        final_codes: frozenset[int] = st.FINAL_CODES,
        max_url_length: int = MAX_URL_LENGTH,
        max_urls_per_host: int = 0,
        trim: Callable[[], Any] | None = None,
        recrawl: Iterable[tuple[str, str]] = (),
        linkbase: bool = False,
        linkbase_max: int = 0,
        list_ratio: float = 0.0,
        detail_ratio: float = 0.0,
    ) -> None:
        self._kv = kv
        self._clock = clock
        self.politeness = politeness or Politeness()
        self.failure_threshold = failure_threshold
        self.pending_threshold = pending_threshold
        self._done_codes = done_codes
        self._final_codes = final_codes
        self._max_url_length = max_url_length
        self._max_per_host = max_urls_per_host
        self.split = KindSplit(list_ratio, detail_ratio)
        self.rejected: Counter[str] = Counter()
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
        self._init_crawled(recrawl, linkbase, linkbase_max)
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
        self._hub_heap = [(entry[2], fp) for fp, entry in self._hubs.items()]
        heapq.heapify(self._hub_heap)
        recovered = self._expire(float("inf"))
        if recovered:
            log.info("Recovered {count} leased URLs from the previous run", count=recovered)

    # -- adding ---------------------------------------------------------------------

    def add(self, url: str, always: bool = False, detail: bool = False) -> defer.Deferred[bool]:
        return defer.succeed(self._addmany((url,), always, detail) == 1)

    def addmany(self, urls: Iterable[str], always: bool = False, detail: bool = False) -> defer.Deferred[int]:
        if isinstance(urls, str):
            urls = (urls,)
        return defer.succeed(self._addmany(urls, always, detail))

    def _addmany(self, urls: Iterable[str], always: bool, detail: bool) -> int:
        prio = 1 if detail else 0
        kv_get = self._kv.get
        batch = self._kv.write_batch()
        counters = self._counters
        touched: dict[str, HostSlot] = {}
        seen: set[int] = set()
        added = 0
        for raw in urls:
            self._touched += 1
            u = self._parse(raw)
            if u is None or u.fingerprint in seen:
                continue
            seen.add(u.fingerprint)
            skey = k.state_key(u.fingerprint)
            state = kv_get(skey)
            if state is not None:
                if not always or state[0] == k.WAITING:
                    continue
                if state[0] == k.PENDING:  # leased: queued again when its lease ends, never fetched twice at once
                    if u.fingerprint not in self._again:
                        self._again[u.fingerprint] = prio
                        added += 1
                    continue
                counters[{k.DONE: 2, k.FAILED: 3, k.BATCHED: 5}[state[:1]]] -= 1
                self._forget_crawled(batch, u.host, u.fingerprint, state)
            slot = touched.get(u.host) or self._slot(u.host)
            if state is None and self._max_per_host and not self._take_budget(slot):
                self.rejected["host-full"] += 1
                continue
            touched[u.host] = slot
            self._enqueue(batch, u.url, u.fingerprint, slot, prio, 0)
            added += 1
        if added:
            for slot in touched.values():  # the budgets spent here (the only place they change)
                if slot.seen is not None:
                    batch.put(k.HOST_SEEN + slot.hid, k.u64(slot.seen))
            self._commit(batch, touched.values())
        self._maybe_trim()
        return added

    def _take_budget(self, slot: HostSlot) -> bool:
        """Count one new URL against the host's budget (max_urls_per_host); False when it is spent."""
        if slot.seen is None:
            stored = self._kv.get(k.HOST_SEEN + slot.hid)
            slot.seen = k.from_u64(stored)[0] if stored else 0
        if slot.seen >= self._max_per_host:
            return False
        slot.seen += 1
        return True

    def _enqueue(self, batch: Any, url: str, fp: int, slot: HostSlot, prio: int, failures: int) -> None:
        counters = self._counters
        counters[4] += 1
        seq = counters[4]
        batch.put(k.queue_key(slot.hid, prio, seq), bytes((min(failures, 255),)) + url.encode())
        if slot.cursor is not None:
            slot.cursor.maybe[prio] = True
        batch.put(k.state_key(fp), k.active(k.WAITING, failures, prio, seq))
        counters[0] += 1
        slot.waiting += 1

    # -- popping --------------------------------------------------------------------

    def pop(self, count: int, hub_percent: int = 50) -> defer.Deferred[dict[str, bool]]:
        now = self._clock.seconds()
        if now >= self._lease_bound:
            self._expire(now)
        batch = self._kv.write_batch()
        hubs = self._pop_hubs(batch, now, hub_quota(count, hub_percent))
        result: dict[str, bool] = dict.fromkeys(hubs, True)
        touched = self._pop_urls(batch, now, count - len(hubs), result)
        if result:
            self._commit(batch, touched)
        self._touched += len(result)
        self._maybe_collect(now)
        self._maybe_trim()
        return defer.succeed(result)

    def _pop_urls(self, batch: Any, now: float, wanted: int, result: dict[str, bool]) -> list[HostSlot]:
        """Lease up to ``wanted`` waiting URLs: the kinds' reserved shares first (see split.py), then any."""
        deadline_ms = int((now + self.pending_threshold) * 1000)
        touched: list[HostSlot] = []
        taken = [0, 0]
        reserved = self.split.reserve(wanted)
        left = wanted
        if any(reserved):
            left -= self._turns(batch, now, reserved, True, deadline_ms, result, touched, taken)
        self._turns(batch, now, [left, left], False, deadline_ms, result, touched, taken)
        self.split.settle(wanted, taken)
        if touched and self._lease_bound == float("inf"):
            self._lease_bound = deadline_ms / 1000.0
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
            buffered = queues.buffered[prio]
            while counts[0] + counts[1] < quota and caps[prio] > 0:
                if not buffered:
                    if not queues.maybe[prio]:
                        break
                    self._refill(slot, queues, prio, max(quota - counts[0] - counts[1], self._prefetch()))
                    if not buffered:
                        break
                key, value = buffered.popleft()
                url = value[1:].decode()
                fp = fingerprint(url)
                batch.delete(key)
                batch.put(k.lease_key(deadline_ms, fp), value[:1] + key[9:10] + value[1:])
                batch.put(k.state_key(fp), k.active(k.PENDING, value[0], prio, deadline_ms))
                result[url] = False
                self._leased[url] = [fp, slot.host, True]
                counts[prio] += 1
                caps[prio] -= 1
        return counts

    def _refill(self, slot: HostSlot, queues: "_Queues", prio: int, count: int) -> None:
        """Read the next ``count`` keys of one host queue into its buffer, from just past the last key read.

        A seek from the start of the queue would walk over every deleted key
        (LevelDB keeps them until a compaction); new keys always sort after the
        read position because their sequence numbers grow.  One seek serves
        several pops of the host: iterators are the cost of a pop.
        """
        lowest = k.QUEUE + slot.hid + bytes((prio,))
        buffered = queues.buffered[prio]
        for key, value in self._kv.iterator(start=queues.position[prio] or lowest, stop=k.prefix_end(lowest)):
            queues.position[prio] = key + b"\x00"
            buffered.append((key, value))
            if len(buffered) >= count:
                return
        queues.maybe[prio] = False  # read to the end: empty, once the buffer is taken, until something is queued

    def _prefetch(self) -> int:
        """Keys read ahead per seek: a few, unless there are so many hosts that buffers would add up."""
        return PREFETCH if len(self.politeness.hosts) <= PREFETCH_HOSTS else 1

    def _dequeue(self, batch: Any, slot: HostSlot, state: bytes) -> tuple[int, int]:
        """Take a waiting URL (its ``state``) out of its host queue and the read-ahead; (failures, prio)."""
        failures, prio, seq = k.parse_active(state)
        key = k.queue_key(slot.hid, prio, seq)
        batch.delete(key)
        self._unbuffer(slot, prio, key)
        self._counters[0] -= 1
        slot.waiting -= 1
        return failures, prio

    def _unbuffer(self, slot: HostSlot, prio: int, key: bytes) -> None:
        """A queued key deleted outside a pop (a status or a claim for a waiting URL) leaves the read-ahead too."""
        queues = slot.cursor
        if queues is not None:
            buffered = queues.buffered[prio]
            for index, (buffered_key, _) in enumerate(buffered):
                if buffered_key == key:
                    del buffered[index]
                    return

    def _pop_hubs(self, batch: Any, now: float, wanted: int) -> list[str]:
        out: list[str] = []
        heap = self._hub_heap
        later = []
        while heap and heap[0][0] <= now and len(out) < wanted:
            due, fp = heapq.heappop(heap)
            entry = self._hubs.get(fp)
            if entry is None or entry[2] != due:
                continue
            url, host, _ = entry
            slot = self._slot(host)
            if slot.next_allowed > now or slot.inflight >= slot.concurrency:
                later.append((due, fp))
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

    # -- statuses -------------------------------------------------------------------

    def claim(self, url: str, by: str | None = None) -> defer.Deferred[bool]:
        """Lease ``url`` (a redirect target) unless it is done, failed or leased already; fires True if leased.

        A waiting URL leaves its queue, so no other fetch takes it while the
        page that redirected to it is processed; ``set_status`` ends the lease.
        A claim that ``by`` (the redirecting URL) holds already is renewed, so
        that URL's next fetch takes it again when the first one's processing
        died.  Claims do not outlive the process: at open every lease returns.
        """
        u = self._parse(url)
        if u is None:
            return defer.succeed(False)
        state = self._kv.get(k.state_key(u.fingerprint))
        owner = _owner(by, self._max_url_length)
        held = self._leased.get(u.url)
        retake = state is not None and state[0] == k.PENDING and held is not None and owner and held[3:] == owner
        if state is not None and state[0] != k.WAITING and not retake:
            return defer.succeed(False)
        slot = self._slot(u.host)
        batch = self._kv.write_batch()
        failures = prio = 0
        if retake:
            failures, prio, deadline = k.parse_active(state)
            batch.delete(k.lease_key(deadline, u.fingerprint))
            self._counters[1] -= 1
        elif state is not None:
            failures, prio = self._dequeue(batch, slot, state)
        deadline_ms = int((self._clock.seconds() + self.pending_threshold) * 1000)
        batch.put(k.lease_key(deadline_ms, u.fingerprint), bytes((failures, prio)) + u.url.encode())
        batch.put(k.state_key(u.fingerprint), k.active(k.PENDING, failures, prio, deadline_ms))
        self._counters[1] += 1
        self._leased[u.url] = [u.fingerprint, u.host, False] + owner
        self._lease_bound = min(self._lease_bound, deadline_ms / 1000.0)
        self._commit(batch, (slot,))
        return defer.succeed(True)

    def seen_filter(self, urls: Iterable[str]) -> defer.Deferred[list[str]]:
        """The canonical forms of ``urls`` the pool has never seen (in any state), without duplicates."""
        kv_get = self._kv.get
        fresh: dict[int, str] = {}
        for u in map(self._parse, urls):
            if u is not None and u.fingerprint not in fresh and kv_get(k.state_key(u.fingerprint)) is None:
                fresh[u.fingerprint] = u.url
        return defer.succeed(list(fresh.values()))

    def seen_add(self, urls: Iterable[str]) -> defer.Deferred[int]:
        """Record ``urls`` as sent in a batch (a final state here); fires with the number newly recorded."""
        batch = self._kv.write_batch()
        marked: set[int] = set()
        for u in map(self._parse, urls):
            if u is not None and u.fingerprint not in marked and self._kv.get(k.state_key(u.fingerprint)) is None:
                marked.add(u.fingerprint)
                batch.put(k.state_key(u.fingerprint), k.BATCHED)
        if marked:
            self._counters[5] += len(marked)
            self._commit(batch, ())
        return defer.succeed(len(marked))

    def next_batch(self, count: int = 1) -> defer.Deferred[int]:
        """Reserve ``count`` batch numbers, unique for the life of the store; fires with the first."""
        last = k.from_u64(self._kv.get(k.BATCH_NUMBER, k.u64(0)))[0]
        self._kv.put(k.BATCH_NUMBER, k.u64(last + count))
        return defer.succeed(last + 1)

    def fetched(self, url: str) -> defer.Deferred[None]:
        """The request for a handed-out URL is over: free its host slot (the lease stays until set_status)."""
        self._release(self._leased.get(url))
        return defer.succeed(None)

    def _release(self, leased: list[Any] | None) -> None:
        if leased is not None and leased[2]:
            leased[2] = False
            self.politeness.release(self._slot(leased[1]))

    def set_status(self, url: str, status_code: int, reason: str | None = None) -> defer.Deferred[None]:
        batch = self._kv.write_batch()
        slot = self._status_into(batch, url, status_code, None, reason)
        if slot is not None:
            self._commit(batch, (slot,))
        return defer.succeed(None)

    def set_statuses(
        self, statuses: Iterable[tuple[Any, ...]], checkpoint: tuple[str, int] | None = None
    ) -> defer.Deferred[None]:
        """Record several outcomes (``(url, code)`` or ``(url, code, reason)``) and ``checkpoint`` (a name and
        a count) in one atomic write.

        A write with a checkpoint is synced (LevelDB's log fsynced): the writer
        that sets it made its data durable first and counts on the pool to keep
        the checkpoint through a power cut; the writes before it are synced with it.
        """
        batch = self._kv.write_batch(sync=checkpoint is not None)
        slots: dict[str, HostSlot] = {}
        done: set[int] = set()
        for url, code, *reason in statuses:
            slot = self._status_into(batch, url, code, done, *reason)
            if slot is not None:
                slots[slot.host] = slot
        if checkpoint is not None:
            name, value = checkpoint
            batch.put(k.checkpoint_key(name), k.u64(value))
        if slots or checkpoint is not None:
            self._commit(batch, slots.values())
        return defer.succeed(None)

    def _status_into(self, batch: Any, url: str, code: int, done: set[int] | None,
                     reason: str | None = None) -> HostSlot | None:
        """End ``url``'s lease (this process's record of it) and put its new state in ``batch``, unless its
        fingerprint is in ``done`` (given twice in one write); the host slot touched, or None."""
        self._touched += 1
        leased = self._leased.pop(url, None)
        u = URL(url, leased[1], leased[0]) if leased is not None else self._parse(url)
        if leased is None and u is not None:  # a redirect target's URL, maybe not in canonical form
            leased = self._leased.pop(u.url, None)
        self._release(leased)
        if u is None or (done is not None and u.fingerprint in done):
            return None
        if done is not None:
            done.add(u.fingerprint)
        return self._set_status(batch, u, code, reason)

    def _set_status(self, batch: Any, u: URL, code: int, reason: str | None = None) -> HostSlot | None:
        """Put the change of one URL's state in ``batch``; the host slot it touched, or None (already final)."""
        skey = k.state_key(u.fingerprint)
        state = self._kv.get(skey)
        counters = self._counters
        slot = self._slot(u.host)
        failures = prio = 0
        known = state is not None  # a hub or a redirect target with no state of its own has no kind
        if state is not None and state[0] == k.PENDING:
            failures, prio, deadline = k.parse_active(state)
            batch.delete(k.lease_key(deadline, u.fingerprint))
            counters[1] -= 1
            again = self._again.pop(u.fingerprint, None)
            if again is not None:  # added again while leased: this fetch's outcome makes way for a new one
                self._enqueue(batch, u.url, u.fingerprint, slot, again, 0)
                return slot
        elif state is not None and state[0] == k.WAITING:
            failures, prio = self._dequeue(batch, slot, state)
        elif state is not None:
            return None  # already final
        if code in self._done_codes:
            batch.put(skey, self._done_state(batch, u.url, u.host, u.fingerprint, prio) if known else k.DONE)
            counters[2] += 1
            if failures:
                batch.delete(k.failure_key(u.fingerprint))
        elif code in self._final_codes or failures >= self.failure_threshold:
            batch.put(skey, k.FAILED)
            counters[3] += 1
            self._note_failure(batch, u, code, reason, failures + 1, final=True)
        else:
            self._enqueue(batch, u.url, u.fingerprint, slot, prio, failures + 1)
            self._note_failure(batch, u, code, reason, failures + 1, final=False)
        return slot

    def _note_failure(self, batch: Any, u: URL, code: int, reason: str | None, failures: int, final: bool) -> None:
        """Keep why ``u`` failed (its last failure) in its ``E`` entry; a final failure is logged (debug)."""
        why = st.recorded(code, reason)
        batch.put(k.failure_key(u.fingerprint), k.pack_failure(self._clock.seconds(), failures, why))
        if final:
            log.debug("{url} failed for good: {reason}", url=u.url, reason=why)

    def checkpoint(self, name: str) -> defer.Deferred[int | None]:
        """The count last recorded under ``name`` by ``set_statuses``, or None."""
        value = self._kv.get(k.checkpoint_key(name))
        return defer.succeed(None if value is None else k.from_u64(value)[0])

    def drop_checkpoint(self, name: str) -> defer.Deferred[None]:
        self._kv.delete(k.checkpoint_key(name))
        return defer.succeed(None)

    # -- hubs and hosts -------------------------------------------------------------

    def set_hubs(self, urls: Iterable[str], refresh_span: float) -> defer.Deferred[None]:
        self._hub_span = float(refresh_span)
        batch = self._kv.write_batch()
        wanted = {u.fingerprint: u for u in map(self._parse, urls) if u is not None}
        for fp in list(self._hubs):
            if fp not in wanted:
                del self._hubs[fp]
                batch.delete(k.HUB + fp.to_bytes(8, "big"))
        for fp, u in wanted.items():
            if fp not in self._hubs:
                self._hubs[fp] = [u.url, u.host, 0.0]
                batch.put(k.HUB + fp.to_bytes(8, "big"), k.u64(0) + u.url.encode())
            else:
                due = self._hubs[fp][2]
                self._hubs[fp][2] = min(due, self._clock.seconds() + self._hub_span)
        batch.write()
        self._hub_heap = [(entry[2], fp) for fp, entry in self._hubs.items()]
        heapq.heapify(self._hub_heap)
        return defer.succeed(None)

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
        largest = self.politeness.top(5)
        return defer.succeed(
            {
                "waiting": waiting,
                "pending": pending,
                "done": done,
                "failed": failed,
                "batched": batched,
                "hosts": self.politeness.active_hosts(),
                "max_host": largest[0] if largest else ["", 0],
                "largest": largest,
                "hubs": len(self._hubs),
                "rejected": dict(self.rejected),
            }
        )

    def why(self, url: str) -> defer.Deferred[dict[str, Any]]:
        try:
            u = parse(url, self._max_url_length)
        except BadURL as e:
            return defer.succeed({"url": url, "state": "rejected", "reason": e.reason})
        state = self._kv.get(k.state_key(u.fingerprint))
        answer: dict[str, Any] = {"url": u.url, "urlhash": u.fingerprint, "host": u.host, "hub": u.fingerprint in self._hubs}
        answer.update(_describe_state(state))
        if u.fingerprint in self._again:
            answer["queued_again"] = True
        failed = self._kv.get(k.failure_key(u.fingerprint))
        if failed is not None:
            answer["last_failure"] = rec.last_failure(*k.unpack_failure(failed))
        answer.update(self._link_of(u.fingerprint))
        slot = self.politeness.hosts.get(u.host)
        if slot is not None:
            answer["host_waiting"] = slot.waiting
            answer["host_inflight"] = slot.inflight
            answer["host_delay"] = slot.delay
            answer["host_next_allowed"] = slot.next_allowed
        return defer.succeed(answer)

    # -- export and import -----------------------------------------------------------

    def export(self, chunk: int = 1000) -> KVExport:
        """A reader of every entry (see :mod:`.records`): waiting and pending URLs, then finished fingerprints."""
        return KVExport(self._kv, chunk)

    def import_states(self, records: Iterable[Any]) -> defer.Deferred[dict[str, Any]]:
        """Re-add exported URLs (waiting again) and restore finished fingerprints the pool has never seen.

        Fires with ``queued``, ``restored``, ``known`` (already in the pool) and
        ``rejected`` (``[index, reason]`` of each bad record).
        """
        found = rec.sort_records(records, FINGERPRINT, self._max_url_length)
        codes = {"done": (k.DONE, 2), "failed": (k.FAILED, 3), "batched": (k.BATCHED, 5)}
        batch = self._kv.write_batch()
        restored: set[int] = set()
        for fp, state in found.finals:
            skey = k.state_key(fp)
            if fp not in restored and self._kv.get(skey) is None:
                value, counter = codes[state]
                batch.put(skey, value)
                self._counters[counter] += 1
                restored.add(fp)
        if restored:
            self._commit(batch, ())
        queued = self._addmany(found.urls[0], False, False) + self._addmany(found.urls[1], False, True)
        offered = len(found.urls[0]) + len(found.urls[1])
        return defer.succeed(rec.counts(queued, offered, len(restored), len(found.finals), found.rejected))

    def compact(self) -> None:
        """Compact the store range by range (a blocking call: for maintenance and benchmarks).

        LevelDB keeps deleted queue and lease keys until a compaction reaches
        them; a whole-store ``compact_range()`` leaves many behind, one range at
        a time does not.
        """
        compact = getattr(self._kv, "compact_range", None)
        if compact is not None:
            for prefix in (k.QUEUE, k.LEASE, k.STATE, k.HOST, k.HUB, k.CRAWLED, k.FAILURE):
                compact(start=prefix, stop=k.prefix_end(prefix))

    def close(self) -> defer.Deferred[None]:
        if not getattr(self._kv, "closed", False):
            self._kv.close()
        return defer.succeed(None)

    # -- internals ------------------------------------------------------------------

    def _parse(self, url: str) -> URL | None:
        try:
            return parse(url, self._max_url_length)
        except BadURL as e:
            self.rejected[e.reason] += 1
            log.info("Rejected URL ({reason}): {url!r}", reason=e.reason, url=e.url[:200])
            return None

    def _slot(self, host: str) -> HostSlot:
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
            slots = {}
            for key, value in expired:
                url = value[2:].decode()
                fp = int.from_bytes(key[9:], "big")
                slot = slots.get(host_of(url)) or self._slot(host_of(url))
                slots[slot.host] = slot
                batch.delete(key)
                self._release(self._leased.pop(url, None))
                self._counters[1] -= 1
                again = self._again.pop(fp, None)  # added again while leased: a new request, no failures
                prio, failures = (value[1], value[0]) if again is None else (again, 0)
                self._enqueue(batch, url, fp, slot, prio, failures)
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
        self._ops += 1
        if self._ops % 10000 == 0:
            self.politeness.collect(now)


def _owner(by: str | None, max_length: int) -> list[int]:
    """``[fingerprint]`` of the URL holding a claim, or ``[]``."""
    try:
        return [parse(by, max_length).fingerprint] if by is not None else []
    except BadURL:
        return []


def _describe_state(state: bytes | None) -> dict[str, Any]:
    if state is None:
        return {"state": "unknown"}
    if state[:1] == k.DONE:
        return {"state": "done", **({"fetched_at": int.from_bytes(state[2:], "big") / 1000.0} if len(state) > 1 else {})}
    if state == k.FAILED:
        return {"state": "failed"}
    if state == k.BATCHED:
        return {"state": "batched"}
    failures, prio, number = k.parse_active(state)
    kind = "detail" if prio else "list"
    if state[0] == k.WAITING:
        return {"state": "waiting", "failures": failures, "kind": kind}
    return {"state": "pending", "failures": failures, "kind": kind, "lease_until": number / 1000.0}

