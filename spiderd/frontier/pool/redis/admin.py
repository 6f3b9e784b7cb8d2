"""RedisPool's admin part (IURLPoolAdmin): why, hosts, export and import, over the shared Redis layout."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from spiderd.contracts.pool import IURLPoolAdmin
from spiderd.core.conditional import from_text
from spiderd.core.urls import URL, registered_domain
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool.crawled import link_info
from spiderd.frontier.pool.records import counts, sort_records
from spiderd.frontier.pool.redis.channel import RedisChannel
from spiderd.frontier.pool.redis.export import FINGERPRINT, RedisExport, parse_failure
from spiderd.frontier.pool.redis.queues import RedisQueues
from spiderd.frontier.pool.shared import HostErrors, host_limit, host_row, top_hosts, why_head, why_host, why_parse

STATES = {"0": "list", "1": "detail"}


@implementer(IURLPoolAdmin)
class RedisAdmin:
    """RedisPool's answers for operators and tools over the ``channel``: why and hosts (one script each), export
    (a reader), import_states (into the ``queues``); ``politeness``: this node's defaults; ``host_errors``: its
    failed fetches per host."""

    def __init__(self, channel: RedisChannel, clock: IReactorTime, queues: RedisQueues, politeness: Politeness,
                 host_errors: HostErrors, max_url_length: int) -> None:
        self._channel = channel
        self._clock = clock
        self._queues = queues
        self._politeness = politeness
        self._host_errors = host_errors
        self._max_url_length = max_url_length

    # -- why ------------------------------------------------------------------------

    def why(self, url: str) -> defer.Deferred[dict[str, Any]]:
        """The URL's state (kind, failures, lease), its host, last failure and linkbase entry (see IURLPoolAdmin)."""
        u = why_parse(url, self._max_url_length)
        if isinstance(u, dict):
            return defer.succeed(u)
        return self._channel.run("why", [u.url, u.host]).addCallback(self._why, u)

    def _why(self, answer: list[Any], u: URL) -> dict[str, Any]:
        (state, kind, lease_until, failures, hub, waiting, inflight, delay, next_allowed, link, again, failed,
         validators) = answer
        info = why_head(u, bool(int(hub)))
        info.update(domain=registered_domain(u.host), state=state)
        if state in ("waiting", "pending"):
            info.update(failures=int(failures), kind=STATES[kind])
        if state == "pending":
            info["lease_until"] = float(lease_until)
            if int(again):
                info["queued_again"] = True
        info.update(why_host(int(float(waiting)), int(inflight), float(delay), float(next_allowed)))
        if link:
            info.update(link_info(link))
        if failed:
            info["last_failure"] = parse_failure(failed)
        kept = from_text(validators)
        if kept is not None:
            info["validators"] = kept.described()
        return info

    # -- hosts ----------------------------------------------------------------------

    def hosts(self, limit: int = 50) -> defer.Deferred[list[dict[str, Any]]]:
        """The hosts to look at first (see IURLPoolAdmin): one script reading ``P throttled`` and ``P waiting``
        (at most ``limit`` of each) and those hosts' slots; the failed fetches are this node's own; a host whose
        domain is on the bench while every place in turn is taken is ``waiting_for_turn``."""
        limit = host_limit(limit)
        now = self._clock.seconds()
        d = self._channel.run("hosts", [str(limit)], now).addCallback(self._hosts, limit, now)
        return d.addCallback(self._mark_benched)

    def _mark_benched(self, rows: list[dict[str, Any]]) -> defer.Deferred[list[dict[str, Any]]]:
        """Mark the rows of hosts whose domain waits for a place among those taking turns (all of them taken):
        ``P meta``'s turn_limit, ``P turns``' size and the domains' places on ``P bench``, read in one pipeline."""
        if not rows:
            return defer.succeed(rows)
        prefix, execute = self._channel.prefix, self._channel.execute
        domains = [registered_domain(row["host"]) for row in rows]
        reads = [execute("HGET", prefix + "meta", "turn_limit"), execute("HLEN", prefix + "turns"),
                 execute("ZMSCORE", prefix + "bench", *domains)]

        def marked(answers: list[Any]) -> list[dict[str, Any]]:
            limit, in_turn, benched = answers
            if int(limit or 0) > 0 and int(in_turn) >= int(limit or 0):
                for row, place in zip(rows, benched):
                    if place is not None:
                        row["waiting_for_turn"] = True
            return rows

        return defer.gatherResults(reads, consumeErrors=True).addCallback(marked)

    def _hosts(self, flat: list[Any], limit: int, now: float) -> list[dict[str, Any]]:
        default = bool(self._politeness.adaptive.on)
        rows = []
        for i in range(0, len(flat), 9):
            host, waiting, inflight, concurrency, configured, crawl_delay, next_allowed, until, factor = flat[i:i + 9]
            adaptive = float(factor) > 0 if factor else default
            rows.append(host_row(host, int(float(waiting)), int(float(inflight)), int(float(concurrency)),
                                 float(configured), float(crawl_delay), float(next_allowed), float(until or 0),
                                 adaptive, self._host_errors.of(host), now))
        return top_hosts(rows, limit)

    # -- export and import -----------------------------------------------------------

    def export(self, chunk: int = 1000) -> RedisExport:
        """A reader of every entry (see :mod:`..records`): waiting and pending URLs, then finished fingerprints."""
        channel = self._channel
        return RedisExport(channel.execute, channel.prefix, channel.namespace, channel.bits, chunk)

    def import_states(self, records: Iterable[Any]) -> defer.Deferred[dict[str, Any]]:
        """Re-add exported URLs (waiting again) and restore finished fingerprints the pool has never seen.

        Fires with ``queued``, ``restored``, ``known`` and ``rejected`` (``[index, reason]``).
        """
        found = sort_records(records, FINGERPRINT, self._max_url_length)
        codes = {"done": "1", "failed": "2", "batched": "3"}
        args = [arg for fp, state in found.finals for arg in (f"{fp:016x}", codes[state])]
        restoring = self._channel.run("restore", args).addCallback(int) if args else defer.succeed(0)
        adds = [restoring, self._queues.addmany(found.urls[0]), self._queues.addmany(found.urls[1], detail=True)]

        def answer(results: list[int]) -> dict[str, Any]:
            restored, lists, details = results
            offered = len(found.urls[0]) + len(found.urls[1])
            return counts(lists + details, offered, restored, len(found.finals), found.rejected)

        d = defer.gatherResults(adds, consumeErrors=True).addCallback(answer)
        return d.addErrback(lambda f: f.value.subFailure if isinstance(f.value, defer.FirstError) else f)

