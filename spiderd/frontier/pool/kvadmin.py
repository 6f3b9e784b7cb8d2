"""The embedded pool's admin part (IURLPoolAdmin): why, hosts, export and import; and compaction, for maintenance."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from twisted.internet import defer
from zope.interface import implementer

from spiderd.contracts.pool import IURLPoolAdmin
from spiderd.core import conditional as cg
from spiderd.engine.politeness import BENCHED
from spiderd.frontier.pool import keys as k
from spiderd.frontier.pool import records as rec
from spiderd.frontier.pool.crawled import CrawledSets
from spiderd.frontier.pool.kvcore import KVState
from spiderd.frontier.pool.kvexport import FINGERPRINT, KVExport
from spiderd.frontier.pool.kvqueues import KVQueues
from spiderd.frontier.pool.shared import host_limit, host_row, top_hosts, why_head, why_host, why_parse


@implementer(IURLPoolAdmin)
class KVAdmin:
    """KVPool's answers for operators and tools, over the pool's ``state``: why (with the linkbase entry of the
    ``crawled`` part), hosts, export, import_states (into the ``queues``)."""

    def __init__(self, state: KVState, queues: KVQueues, crawled: CrawledSets) -> None:
        self._state = state
        self._queues = queues
        self._crawled = crawled
        self._kv = state.kv

    # -- why ------------------------------------------------------------------------

    def why(self, url: str) -> defer.Deferred[dict[str, Any]]:
        """The URL's state (kind, failures, lease), its last failure, linkbase entry and host (see IURLPoolAdmin)."""
        state = self._state
        u = why_parse(url, state.max_url_length)
        if isinstance(u, dict):
            return defer.succeed(u)
        answer = why_head(u, u.fingerprint in state.hubs)
        answer.update(_describe_state(self._kv.get(k.state_key(u.fingerprint))))
        if u.fingerprint in state.again:
            answer["queued_again"] = True
        failed = self._kv.get(k.failure_key(u.fingerprint))
        if failed is not None:
            answer["last_failure"] = rec.last_failure(*k.unpack_failure(failed))
        answer.update(self._crawled.link_of(u.fingerprint))
        validators = cg.unpack(self._kv.get(k.validators_key(u.fingerprint)))
        if validators is not None:
            answer["validators"] = validators.described()
        slot = state.politeness.hosts.get(u.host)
        if slot is not None:
            answer.update(why_host(slot.waiting, slot.inflight, slot.delay, slot.next_allowed))
        return defer.succeed(answer)

    # -- hosts ----------------------------------------------------------------------

    def hosts(self, limit: int = 50) -> defer.Deferred[list[dict[str, Any]]]:
        """The hosts to look at first (see IURLPoolAdmin), from the host table in memory (Politeness.attention)."""
        limit = host_limit(limit)
        now = self._state.clock.seconds()
        politeness = self._state.politeness
        rows = []
        full = politeness.turn_limit and politeness.hosts_in_turn() >= politeness.turn_limit
        for slot in politeness.attention(limit, now):
            configured, crawl_delay = politeness.delays(slot.host)
            rows.append(host_row(slot.host, slot.waiting, slot.inflight, slot.concurrency, configured, crawl_delay,
                                 slot.next_allowed, slot.throttled_until, politeness.adaptive_of(slot.host).on,
                                 self._state.host_errors.of(slot.host), now))
            if full and slot.turn == BENCHED:  # waiting for a place among the hosts taking turns (max_active_hosts)
                rows[-1]["waiting_for_turn"] = True
        return defer.succeed(top_hosts(rows, limit))

    # -- export and import -----------------------------------------------------------

    def export(self, chunk: int = 1000) -> KVExport:
        """A reader of every entry (see :mod:`.records`): waiting and pending URLs, then finished fingerprints."""
        return KVExport(self._kv, chunk)

    def import_states(self, records: Iterable[Any]) -> defer.Deferred[dict[str, Any]]:
        """Re-add exported URLs (waiting again) and restore finished fingerprints the pool has never seen.

        Fires with ``queued``, ``restored``, ``known`` (already in the pool) and
        ``rejected`` (``[index, reason]`` of each bad record).
        """
        found = rec.sort_records(records, FINGERPRINT, self._state.max_url_length)
        codes = {"done": (k.DONE, 2), "failed": (k.FAILED, 3), "batched": (k.BATCHED, 5)}
        batch = self._kv.write_batch()
        restored: set[int] = set()
        for fp, state in found.finals:
            skey = k.state_key(fp)
            if fp not in restored and self._kv.get(skey) is None:
                value, counter = codes[state]
                batch.put(skey, value)
                self._state.counters[counter] += 1
                restored.add(fp)
        if restored:
            self._state.commit(batch, ())
        queued = self._queues.add_urls(found.urls[0], False, False) + self._queues.add_urls(found.urls[1], False, True)
        offered = len(found.urls[0]) + len(found.urls[1])
        return defer.succeed(rec.counts(queued, offered, len(restored), len(found.finals), found.rejected))


def _describe_state(state: bytes | None) -> dict[str, Any]:
    """``why``'s state part, from a URL's state value (None: never seen)."""
    if state is None:
        return {"state": "unknown"}
    if state[:1] == k.DONE:
        return {"state": "done", **({"fetched_at": int.from_bytes(state[2:], "big") / 1000.0} if len(state) > 1 else {})}
    if state == k.FAILED:
        return {"state": "failed"}
    if state[:1] == k.BATCHED:  # (in a crawled set: with its last known fetch time)
        return {"state": "batched", **({"fetched_at": int.from_bytes(state[2:], "big") / 1000.0} if len(state) > 1 else {})}
    failures, prio, number = k.parse_active(state)
    kind = "detail" if prio else "list"
    if state[0] == k.WAITING:
        return {"state": "waiting", "failures": failures, "kind": kind}
    return {"state": "pending", "failures": failures, "kind": kind, "lease_until": number / 1000.0}


def compact(kv: Any) -> None:
    """Compact the store ``kv`` range by range (a blocking call: for maintenance and benchmarks).

    LevelDB keeps deleted queue and lease keys until a compaction reaches
    them; a whole-store ``compact_range()`` leaves many behind, one range at
    a time does not.
    """
    compact_range = getattr(kv, "compact_range", None)
    if compact_range is not None:
        for prefix in (k.QUEUE, k.LEASE, k.STATE, k.HOST, k.HUB, k.CRAWLED, k.FAILURE):
            compact_range(start=prefix, stop=k.prefix_end(prefix))
