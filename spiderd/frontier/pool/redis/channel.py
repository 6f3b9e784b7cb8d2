"""One node's calls to a Redis pool's keys, in the order they were made: what every part of RedisPool sends through.

A script goes with the common arguments (prefix, namespace, bucket bits, the
node's default delay and concurrency, now).  Statuses (and ``fetched``
entries) wait here to go out together in one ``status.lua`` call: at once if
none is on its way (``status_wait`` 0), else with the next pop or after
``status_wait`` seconds, or at STATUS_BATCH entries; every other script or
command is sent after the statuses given before it, so the pool sees calls in
the order they were made.  The URLs this node knows the pool knows
(:mod:`.known`) are remembered through here too, since an answer's epoch can
tell that the pool lost its data.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool.redis.keys import KEEP_HASHTABLE, KEEP_SKIPLIST
from spiderd.frontier.pool.redis.known import KnownURLs
from spiderd.frontier.pool.redis.link import Link, Script
from spiderd.frontier.pool.shared import RecentFailures

log = Logger()

STATUS_BATCH = 1000  # status entries (and fetched ones) waiting that go out at once, whatever status_wait says

Waiting = list[tuple[list[str], defer.Deferred[None]]]  # status entries given together, and the Deferred of each


class RedisChannel:
    """Calls to the keys of ``prefix`` (seed 002's names under ``namespace``) over ``link``, with ``scripts``.

    ``bits`` (the seen buckets' size) is the one recorded in the pool once it
    is started; ``failure_threshold`` and ``max_throttles`` go with every
    status call; final failures the status script reports are added to
    ``recent_failures``; ``known``: the URLs this node knows the pool knows; ``turn_limit``: the domains that take
    turns at once (``[pool] max_active_hosts``, a partition's share of it on a cluster; 0: all), written into ``P
    meta`` with the small keys' entries.
    """

    def __init__(self, link: Link, scripts: dict[str, Script], clock: IReactorTime, politeness: Politeness, *,
                 prefix: str, namespace: str, bits: int, failure_threshold: int, max_throttles: int,
                 status_wait: float, known: KnownURLs, recent_failures: RecentFailures, turn_limit: int = 0) -> None:
        self.link = link
        self._scripts = scripts
        self._clock = clock
        self._politeness = politeness
        self.prefix = prefix
        self.namespace = namespace
        self.bits = bits
        self._header = [str(failure_threshold), str(max_throttles)]
        self.known = known
        self.recent_failures = recent_failures
        self._statuses: Waiting = []  # waiting to go out together
        self._statuses_in_flight = 0
        self.status_wait = status_wait
        self._status_timer: IDelayedCall | None = None
        self.fetched_waiting: dict[str, list[str]] = {}  # url -> its 'fetched' entry, not sent yet
        self.turn_limit = max(0, turn_limit)

    # -- calls ----------------------------------------------------------------------

    def run(self, name: str, args: list[str], now: float | None = None) -> defer.Deferred[Any]:
        """Run a script after the statuses given before it (so the pool sees calls in the order they were made)."""
        self.send_statuses()
        return self.script(name, args, now)

    def execute(self, *args: str) -> defer.Deferred[Any]:
        """Send a command after the statuses given before it."""
        self.send_statuses()
        return self.link.execute(*args)

    def script(self, name: str, args: list[str], now: float | None = None) -> defer.Deferred[Any]:
        """Run a script with the common arguments: prefix, namespace, bucket bits, default delay and concurrency, now."""
        if now is None:
            now = self._clock.seconds()
        politeness = self._politeness
        common = [self.prefix, self.namespace, str(self.bits), repr(float(politeness.delay)),
                  str(politeness.concurrency), repr(float(now))]
        return self.link.run(self._scripts[name], common + args)

    def close(self) -> defer.Deferred[None]:
        """Send the statuses waiting, then close the link (once they are answered)."""
        self.send_statuses()
        return self.link.close()

    # -- the small keys' encodings; the URLs known --------------------------------------

    def keep_encodings(self) -> defer.Deferred[Any]:
        """Write the entries that keep the small keys out of listpacks (KEEP_HASHTABLE, KEEP_SKIPLIST), and this
        node's turn limit (``P meta``'s ``turn_limit``, which every script reads: see TURNS in common.lua)."""
        writes = [self.link.execute("HSETNX", self.prefix + key, *KEEP_HASHTABLE) for key in ("inflight", "lease")]
        writes.append(self.link.execute("HSET", self.prefix + "meta", "turn_limit", str(self.turn_limit)))
        for key, score in (("leases", "+inf"), ("ready", "+inf"), ("waiting", "0"), ("next", "+inf")):
            writes.append(self.link.execute("ZADD", self.prefix + key, "NX", score, KEEP_SKIPLIST))
        return defer.gatherResults(writes, consumeErrors=True)

    def remember(self, urls: Iterable[str], epoch: str) -> None:
        """URLs an add or seen call found known in the pool's ``epoch`` (``known``); a new epoch (the pool lost its
        data: a Redis restarted empty, a flush) lost the small keys' entries too, which are written again."""
        if self.known.remember(urls, self.prefix, epoch):
            log.info("Redis pool {prefix} lost its data (a new epoch): its small keys' entries are written again",
                     prefix=self.prefix)
            self.keep_encodings().addErrback(lambda f: log.failure("Writing the small keys' entries", f))

    # -- statuses waiting to go out together ----------------------------------------

    def queue_statuses(self, args: list[str]) -> defer.Deferred[None]:
        """Send status entries (ten arguments each) with the others given meanwhile, in one script call: at once
        if none is on its way (no ``status_wait``), else with the next pop or after ``status_wait`` seconds."""
        if not args:
            return defer.succeed(None)
        d: defer.Deferred[None] = defer.Deferred()
        self._statuses.append((args, d))
        if self.status_wait <= 0:
            if not self._statuses_in_flight:
                self.send_statuses()
        elif len(self._statuses) >= STATUS_BATCH:
            self.send_statuses()
        elif self._status_timer is None:
            self._status_timer = self._clock.callLater(self.status_wait, self.send_statuses)
        return d

    def send_statuses(self) -> None:
        """Send the statuses waiting, if any, in one ``status.lua`` call."""
        waiting = self.take_statuses()
        if waiting:
            entries, batch = waiting
            self.script("status", entries).addBoth(self.statuses_sent, batch)

    def take_statuses(self) -> tuple[list[str], Waiting] | None:
        """The status script's arguments for the entries waiting, and those entries (now on their way); a caller
        that sends them itself (a pop, with ``statuspop``) hands its answer to ``statuses_sent``."""
        timer, self._status_timer = self._status_timer, None
        if timer is not None and timer.active():
            timer.cancel()
        batch, self._statuses = self._statuses, []
        self.fetched_waiting.clear()
        if not batch:
            return None
        self._statuses_in_flight += 1
        entries = self._header + [arg for entry, _ in batch for arg in entry]
        return entries, batch

    def statuses_sent(self, result: Any, batch: Waiting) -> None:
        """The answer to the statuses of ``batch``: the final failures it reports, then each status's Deferred."""
        if not isinstance(result, Failure):
            for url, why in zip(result[::2], result[1::2]):
                log.debug("{url} failed for good: {reason}", url=url, reason=why)
                self.recent_failures.add(url, why, self._clock.seconds())
        self._statuses_in_flight -= 1
        if not self._statuses_in_flight and self.status_wait <= 0:
            self.send_statuses()
        for _, d in batch:
            d.errback(result) if isinstance(result, Failure) else d.callback(None)
