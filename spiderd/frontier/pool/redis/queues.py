"""RedisPool's queues: adding URLs (``add.lua``), leasing them (``pop.lua``, with the statuses waiting:
``statuspop``), the hubs (``hubs.lua``) and the hop limit of links (``within_hops``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core.urls import host_of, registered_domain
from spiderd.frontier.pool.hops import REJECTED, HopLimits
from spiderd.frontier.pool.redis.channel import RedisChannel, Waiting
from spiderd.frontier.pool.redis.handed import Handed
from spiderd.frontier.pool.redis.keys import add_keys, fingerprint_hex
from spiderd.frontier.pool.shared import URLParser, parsed
from spiderd.frontier.pool.split import RESERVE_SCAN, KindSplit, hub_quota

log = Logger()

DOMAIN_SWEEP_EVERY = 10.0  # seconds between sweeps of spider.website.domains for domains other tools registered
DOMAIN_SWEEP_COUNT = 100  # domains a pop looks at while a sweep is under way (SSCAN's COUNT)


def lease_deadline(now: float, pending_threshold: float) -> str:
    """A lease's deadline, now + pending_threshold rounded up to a whole second: Redis parses a whole number
    faster than a fraction (``P leases`` is a skiplist: KEEP_SKIPLIST), and a lease's end needs no finer time."""
    return str(math.ceil(now + pending_threshold))


class RedisQueues:
    """add, addmany, within_hops, pop and set_hubs over the ``channel``; ``urls`` parses (counting rejections),
    ``hops`` are the link-hop limits, ``split`` the kinds' shares of a pop, ``handed`` keeps the validators a pop
    gives; ``conditional`` is pop.lua's validators switch (see RedisPool), ``per_ip`` whether pops group hosts
    by address."""

    def __init__(self, channel: RedisChannel, clock: IReactorTime, urls: URLParser, hops: HopLimits,
                 split: KindSplit, handed: Handed, *, pending_threshold: float, max_per_host: int,
                 conditional: str, per_ip: bool) -> None:
        self._channel = channel
        self._clock = clock
        self._urls = urls
        self.hops = hops
        self.split = split
        self._handed = handed
        self._pending_threshold = pending_threshold
        self._max_per_host = max_per_host  # 0: no budget (add.lua then leaves the hostseen counts alone)
        self.conditional = conditional  # pop.lua's validators switch (a reload may change it)
        self.per_ip = per_ip  # pops group hosts by address (P group); set by the first set_host_group too

    # -- adding ---------------------------------------------------------------------

    def add(self, url: str, always: bool = False, detail: bool = False) -> defer.Deferred[bool]:
        return self.addmany((url,), always, detail).addCallback(lambda added: added == 1)

    def addmany(self, urls: Iterable[str], always: bool = False, detail: bool = False,
                parent: str | None = None) -> defer.Deferred[int]:
        if isinstance(urls, str):
            urls = (urls,)
        channel = self._channel
        fresh = {u.url: u for u in map(self._urls.parse, urls) if u is not None}
        if not always:  # a known URL's add would change nothing
            fresh = {url: fresh[url] for url in channel.known.unknown(fresh)}
        if not fresh:
            return defer.succeed(0)
        hops = self.hops
        found_on = parsed(parent, self._urls.max_url_length) if parent is not None and hops.tracking else None
        args = ["1" if always else "0", "1" if detail else "0", str(self._max_per_host),
                fingerprint_hex(found_on.url) if found_on is not None else ""]
        for u in fresh.values():
            args += (u.url, u.host, registered_domain(u.host), str(hops.limit(u.host)) if found_on else "0",
                     *add_keys(u.url, channel.prefix, channel.bits))
        return channel.run("add", args).addCallback(self._added, [] if always else list(fresh))

    def _added(self, answer: list[Any], sent: list[str]) -> int:
        """The URLs added; ``sent`` (not re-adds: a large one would push out the links found often) are known to
        the pool now, but those it refused (host-full, past the hop limit)."""
        added, full, far, epoch, refused = answer
        if full:
            self._urls.rejected["host-full"] += full
        if far:
            self._urls.rejected[REJECTED] += far
        if refused:
            out = {int(n) - 1 for n in refused}
            sent = [url for i, url in enumerate(sent) if i not in out]
        self._channel.remember(sent, epoch)
        return int(added)

    def within_hops(self, parent: str, urls: Sequence[str]) -> defer.Deferred[list[str]]:
        """The links ``urls`` of ``parent`` within their hop limit (all of them when none is set): the parent's
        count from its ``P h:<bucket>`` field (one ``HGET``, none without a limit), the rule applied here; the
        others are counted as rejected (``max-hops``)."""
        found_on = parsed(parent, self._urls.max_url_length) if self.hops.tracking else None
        if found_on is None:
            return defer.succeed(list(urls))
        fp = fingerprint_hex(found_on.url)
        d = self._channel.execute("HGET", f"{self._channel.prefix}h:{int(fp[:3], 16)}", fp)
        return d.addCallback(self._within, list(urls))

    def _within(self, parent_hops: str | bytes | None, urls: list[str]) -> list[str]:
        hops = int(parent_hops or 0) + 1
        kept = [url for url in urls if self.hops.within(hops, host_of(url))]
        if len(kept) < len(urls):
            self._urls.rejected[REJECTED] += len(urls) - len(kept)
        return kept

    # -- popping --------------------------------------------------------------------

    def pop(self, count: int, hub_percent: int = 50, hubs: int | None = None) -> defer.Deferred[dict[str, bool]]:
        """``hubs``: due hubs to hand out at most, in place of ``hub_percent`` of ``count`` (a partition's share)."""
        now = self._clock.seconds()
        split = self.split
        args = [self.deadline(now), str(count), str(hub_quota(count, hub_percent) if hubs is None else hubs),
                *map(repr, split.ratios), *map(repr, split.credit), str(RESERVE_SCAN),
                repr(DOMAIN_SWEEP_EVERY), str(DOMAIN_SWEEP_COUNT), self.conditional, "1" if self.per_ip else "0"]
        channel = self._channel
        waiting = channel.take_statuses()
        if not waiting:
            return channel.run("pop", args, now).addCallback(self._popped)
        entries, batch = waiting
        d = channel.script("statuspop", [str(len(entries)), *entries, *args], now)
        return d.addBoth(self._statuses_popped, batch).addCallback(self._popped)

    def deadline(self, now: float) -> str:
        """The deadline of a lease taken ``now`` (see lease_deadline)."""
        return lease_deadline(now, self._pending_threshold)

    def _statuses_popped(self, answer: Any, batch: Waiting) -> Any:
        """The statuses that went out with a pop are recorded (or failed, as the pop did); the pop's answer."""
        self._channel.statuses_sent(answer if isinstance(answer, Failure) else answer[0], batch)
        return answer if isinstance(answer, Failure) else answer[1]

    def _popped(self, answer: list[Any]) -> Any:
        flat, foreign, (wanted, lists, details) = answer
        self.split.settle(int(wanted), (int(lists), int(details)))
        result = {url: bool(int(hub)) for url, hub in zip(flat[::3], flat[1::3])}  # then each one's validators
        self._handed.keep(flat)
        if not foreign:
            return result
        return self._adopt(foreign).addCallback(lambda _: result)

    def _adopt(self, foreign: list[Any]) -> defer.Deferred[None]:
        """Add the entries another tool pushed onto the lists (``url, prio, ...``, taken by a pop) as waiting
        URLs, then drop them from ``P adopting`` (adding twice is harmless: a known URL is not queued again)."""
        log.info("Adding {count} URLs another tool pushed onto the queues", count=len(foreign) // 2)
        by_prio: dict[int, list[str]] = {0: [], 1: []}
        for url, prio in zip(foreign[::2], foreign[1::2]):
            by_prio[int(prio)].append(url)
        adds = [self.addmany(urls, detail=bool(prio)) for prio, urls in by_prio.items() if urls]
        held = [f"{prio} {url}" for prio, urls in by_prio.items() for url in urls]
        d = defer.gatherResults(adds, consumeErrors=True)
        d.addCallback(lambda _: self._channel.execute("ZREM", self._channel.prefix + "adopting", *held))
        return d.addCallback(lambda _: None)

    # -- hubs -----------------------------------------------------------------------

    def set_hubs(self, urls: Iterable[str], refresh_span: float) -> defer.Deferred[None]:
        args = [repr(float(refresh_span))]
        for u in {u.url: u for u in map(self._urls.parse, urls) if u is not None}.values():
            args += (u.url, registered_domain(u.host))
        return self._channel.run("hubs", args).addCallback(lambda _: None)
