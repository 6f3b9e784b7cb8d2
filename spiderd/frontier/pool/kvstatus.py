"""The embedded pool's outcomes: statuses (the end of a lease), redirect claims, checkpoints.

A status or a claim of a waiting URL takes it out of its queue; a status of a
leased one ends the lease, and if it was added again meanwhile (``always``),
queues it afresh instead of recording the outcome.  A done status of a hub or
of a recrawled page keeps the validators it carries (conditional GET), or drops
them when it carries none; a final failure drops them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger
from zope.interface import implementer

from spiderd.contracts.pool import ICheckpoints
from spiderd.core import conditional as cg
from spiderd.core import status as st
from spiderd.core.urls import URL
from spiderd.engine.politeness import HostSlot
from spiderd.frontier.pool import keys as k
from spiderd.frontier.pool.crawled import CrawledSets
from spiderd.frontier.pool.kvcore import KVState
from spiderd.frontier.pool.kvqueues import KVQueues
from spiderd.frontier.pool.shared import parsed, status_parts

log = Logger()


@implementer(ICheckpoints)
class KVStatuses:
    """KVPool's status recorder: claim, fetched, set_status(es), throttle, validators, checkpoints; over the pool's
    ``state``, taking waiting URLs out of the ``queues``, keeping done pages in the ``crawled`` sets."""

    def __init__(self, state: KVState, queues: KVQueues, crawled: CrawledSets) -> None:
        self._state = state
        self._queues = queues
        self._crawled = crawled
        self._kv = state.kv
        self._counters = state.counters
        self._leased = state.leased
        self._throttles: dict[int, int] = {}  # fp -> throttled fetches of an active URL (its Y entry)
        self.resync()

    def resync(self) -> None:
        """The throttle counts as the store has them (at open, and after a write it refused)."""
        self._throttles.clear()
        for key, value in self._kv.iterator(prefix=k.THROTTLED):
            self._throttles[int.from_bytes(key[1:], "big")] = value[0]

    # -- redirect claims ------------------------------------------------------------

    def claim(self, url: str, by: str | None = None) -> defer.Deferred[bool]:
        """Lease ``url`` (a redirect target) unless it is done, failed or leased already; fires True if leased.

        A waiting URL leaves its queue, so no other fetch takes it while the
        page that redirected to it is processed; ``set_status`` ends the lease.
        A claim that ``by`` (the redirecting URL) holds already is renewed, so
        that URL's next fetch takes it again when the first one's processing
        died.  Claims do not outlive the process: at open every lease returns.
        """
        u = self._state.urls.parse(url)
        if u is None:
            return defer.succeed(False)
        state = self._kv.get(k.state_key(u.fingerprint))
        claimant = parsed(by, self._state.max_url_length)
        owner = [claimant.fingerprint] if claimant is not None else []
        held = self._leased.get(u.url)
        retake = state is not None and state[0] == k.PENDING and held is not None and owner and held[3:] == owner
        if state is not None and state[0] != k.WAITING and not retake:
            return defer.succeed(False)
        slot = self._state.slot(u.host)
        batch = self._kv.write_batch()
        failures = prio = hops = 0
        if retake:
            hops = self._state.hops_of(u.fingerprint, state, u.host)
            failures, prio, deadline = k.parse_active(state)
            batch.delete(k.lease_key(deadline, u.fingerprint))
            self._counters[1] -= 1
        elif state is not None:
            failures, prio, hops = self._queues.dequeue(batch, slot, state)
        deadline_ms = int((self._state.clock.seconds() + self._state.pending_threshold) * 1000)
        batch.put(k.lease_key(deadline_ms, u.fingerprint), k.url_value(bytes((failures, prio)), u.url, hops))
        batch.put(k.state_key(u.fingerprint), k.active(k.PENDING, failures, prio, deadline_ms))
        self._counters[1] += 1
        self._leased[u.url] = [u.fingerprint, u.host, False] + owner
        self._state.lease_bound = min(self._state.lease_bound, deadline_ms / 1000.0)
        try:
            self._state.commit(batch, (slot,))
        except Exception:  # not written (a full disk): the claim is not this process's either
            if held is None:
                del self._leased[u.url]
            else:
                self._leased[u.url] = held
            raise
        return defer.succeed(True)

    # -- statuses -------------------------------------------------------------------

    def fetched(self, url: str, elapsed: float | None = None) -> defer.Deferred[None]:
        """The request for a handed-out URL is over (it took ``elapsed`` seconds, if given: adaptive politeness
        paces its host by it): free its host slot (the lease stays until set_status)."""
        leased = self._leased.get(url)
        if elapsed is not None and leased is not None and leased[2]:
            self._state.politeness.fetched(self._state.slot(leased[1]), elapsed, self._state.clock.seconds())
        self._state.release(leased, settle=False)
        return defer.succeed(None)

    def set_status(self, url: str, status_code: int, reason: str | None = None) -> defer.Deferred[None]:
        batch = self._kv.write_batch()
        slot = self._status_into(batch, url, status_code, None, reason)
        if slot is not None:
            self._state.commit(batch, (slot,))
        return defer.succeed(None)

    def throttle(self, url: str, until: float, status_code: int, reason: str | None = None) -> defer.Deferred[None]:
        """A throttling answer (429, 503) for ``url``: its host gives nothing before ``until`` (clock time) and
        the URL is queued again without a failure, up to ``max_throttles`` times; past them, as ``set_status``."""
        batch = self._kv.write_batch()
        slot = self._status_into(batch, url, status_code, None, reason, until)
        if slot is not None:
            self._state.commit(batch, (slot,))
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
        for url, code, reason, validators in map(status_parts, statuses):
            slot = self._status_into(batch, url, code, done, reason, validators=validators)
            if slot is not None:
                slots[slot.host] = slot
        if checkpoint is not None:
            name, value = checkpoint
            batch.put(k.checkpoint_key(name), k.u64(value))
        if slots or checkpoint is not None:
            self._state.commit(batch, slots.values())
        return defer.succeed(None)

    def _status_into(self, batch: Any, url: str, code: int, done: set[int] | None, reason: str | None = None,
                     until: float | None = None, validators: cg.Validators | None = None) -> HostSlot | None:
        """End ``url``'s lease (this process's record of it) and put its new state in ``batch``, unless its
        fingerprint is in ``done`` (given twice in one write); the host slot touched, or None."""
        self._state.touched += 1
        leased = self._leased.pop(url, None)
        u = URL(url, leased[1], leased[0]) if leased is not None else self._state.urls.parse(url)
        if leased is None and u is not None:  # a redirect target's URL, maybe not in canonical form
            leased = self._leased.pop(u.url, None)
        self._state.release(leased, settle=False)
        try:
            if u is None or (done is not None and u.fingerprint in done):
                return None
            if done is not None:
                done.add(u.fingerprint)
            return self._set_status(batch, u, code, reason, until, validators)
        finally:
            self._state.settle(leased)  # after a retry or the links went in: the host's turn goes on

    def _set_status(self, batch: Any, u: URL, code: int, reason: str | None = None, until: float | None = None,
                    validators: cg.Validators | None = None) -> HostSlot | None:
        """Put the change of one URL's state in ``batch``; the host slot it touched, or None (already final)."""
        skey = k.state_key(u.fingerprint)
        state = self._kv.get(skey)
        counters = self._counters
        slot = self._state.slot(u.host)
        failures = prio = hops = 0
        known = state is not None  # a hub or a redirect target with no state of its own has no kind
        hub = u.fingerprint in self._state.hubs
        if state is not None and state[0] == k.PENDING:
            hops = self._state.hops_of(u.fingerprint, state, u.host)  # kept by a retry or a throttle
            failures, prio, deadline = k.parse_active(state)
            batch.delete(k.lease_key(deadline, u.fingerprint))
            counters[1] -= 1
            again = self._state.again.pop(u.fingerprint, None)
            if again is not None:  # added again while leased: this fetch's outcome makes way for a new one
                if code in self._state.done_codes:
                    self._validators_into(batch, u, hub or self._crawled.recrawled(u.host, prio), validators)
                self._state.enqueue(batch, u.url, u.fingerprint, slot, again, 0)
                return slot
        elif state is not None and state[0] == k.WAITING:
            failures, prio, hops = self._queues.dequeue(batch, slot, state)
        elif state is not None:
            done_again = code in self._state.done_codes
            if hub and (done_again or code in self._state.final_codes):  # a hub is done again at every hand-out
                return slot if self._validators_into(batch, u, True, validators if done_again else None) else None
            return None  # already final
        if until is not None and self._throttled(batch, u, slot, until):
            self._state.enqueue(batch, u.url, u.fingerprint, slot, prio, failures, hops)
            self._note_failure(batch, u, code, reason, failures, final=False)
            return slot
        if code in self._state.done_codes:
            self._forget_throttles(batch, u.fingerprint)
            batch.put(skey, self._crawled.done_state(batch, u.url, u.host, u.fingerprint, prio) if known else k.DONE)
            self._validators_into(batch, u, hub or (known and self._crawled.recrawled(u.host, prio)), validators)
            counters[2] += 1
            if failures:
                batch.delete(k.failure_key(u.fingerprint))
        elif code in self._state.final_codes or failures >= self._state.failure_threshold:
            batch.put(skey, k.FAILED)
            counters[3] += 1
            self._forget_throttles(batch, u.fingerprint)
            self._note_failure(batch, u, code, reason, failures + 1, final=True)
            self._validators_into(batch, u, hub or (known and self._crawled.recrawled(u.host, prio)), None)
        else:
            self._state.enqueue(batch, u.url, u.fingerprint, slot, prio, failures + 1, hops)
            self._note_failure(batch, u, code, reason, failures + 1, final=False)
        return slot

    def _validators_into(self, batch: Any, u: URL, kept: bool, validators: cg.Validators | None) -> bool:
        """Where ``u``'s validators are ``kept`` (a hub, a recrawled kind), a done fetch keeps those it gave, and
        one that gave none (or a final failure: None) drops them; False if nothing was written."""
        if not (kept and self._state.conditional_get):
            return False
        key = k.validators_key(u.fingerprint)
        if validators is not None:
            batch.put(key, cg.pack(validators))
        else:
            batch.delete(key)
        return True

    def validators(self, url: str) -> defer.Deferred[cg.Validators | None]:
        """The validators kept for ``url`` (a hub or a recrawled page; see set_statuses), or None."""
        if not (self._state.conditional_get and (self._state.hubs or self._crawled.kept)):
            return defer.succeed(None)  # none can be kept: no lookup (and no parse) per handed-out URL
        u = parsed(url, self._state.max_url_length)
        return defer.succeed(None if u is None else cg.unpack(self._kv.get(k.validators_key(u.fingerprint))))

    def _throttled(self, batch: Any, u: URL, slot: HostSlot, until: float) -> bool:
        """Block ``u``'s host until ``until``; count a throttle of ``u``: True while it has had at most
        ``max_throttles`` (queued again, no failure counted), False past them (a failure as any other)."""
        self._state.politeness.block(slot, until)
        count = self._throttles.get(u.fingerprint, 0) + 1
        if count > self._state.max_throttles:
            return False
        self._throttles[u.fingerprint] = count
        batch.put(k.throttle_key(u.fingerprint), bytes((min(count, 255),)))
        return True

    def _forget_throttles(self, batch: Any, fp: int) -> None:
        """A URL done or failed for good: its throttles count no more."""
        if self._throttles and self._throttles.pop(fp, None) is not None:
            batch.delete(k.throttle_key(fp))

    def _note_failure(self, batch: Any, u: URL, code: int, reason: str | None, failures: int, final: bool) -> None:
        """Keep why ``u`` failed (its last failure) in its ``E`` entry; a final failure is logged (debug)."""
        why = st.recorded(code, reason)
        batch.put(k.failure_key(u.fingerprint), k.pack_failure(self._state.clock.seconds(), failures, why))
        self._state.host_errors.add(u.host)
        if final:
            log.debug("{url} failed for good: {reason}", url=u.url, reason=why)
            self._state.recent_failures.add(u.url, why, self._state.clock.seconds())

    # -- checkpoints ----------------------------------------------------------------

    def checkpoint(self, name: str) -> defer.Deferred[int | None]:
        """The count last recorded under ``name`` by ``set_statuses``, or None."""
        value = self._kv.get(k.checkpoint_key(name))
        return defer.succeed(None if value is None else k.from_u64(value)[0])

    def drop_checkpoint(self, name: str) -> defer.Deferred[None]:
        self._kv.delete(k.checkpoint_key(name))
        return defer.succeed(None)

