"""RedisPool: the pool's contracts over the shared Redis layout (see the package docstring).

It is made of parts that all send through one :class:`~.channel.RedisChannel` (the calls in the order they were
made, the statuses waiting to go out together, the URLs known): ``queues`` (:mod:`.queues`: adding, popping,
hubs, hop limits), ``statuses`` (:mod:`.statuses`: outcomes, redirect claims, validators, checkpoints),
``ledger`` (:mod:`.ledger`: the seen set, batch numbers), ``crawled`` (:mod:`.crawled`: recrawl, linkbase,
claim_once), ``content`` (content digests) and ``admin`` (:mod:`.admin`: why, hosts, export, import).
:class:`~..parts.PartsPool` passes each call of the contracts to its part; this class answers the rest: opening,
counts, seeds, host policy, closing.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from spiderd.contracts.pool import IURLPool, IURLPoolAdmin
from spiderd.core.rules import PoliteRules
from spiderd.core.urls import registered_domain
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool.content import RedisContent
from spiderd.frontier.pool.crawled import recrawl_pairs
from spiderd.frontier.pool.hops import HopLimits
from spiderd.frontier.pool.options import PoolOptions
from spiderd.frontier.pool.parts import PartsPool
from spiderd.frontier.pool.redis.admin import RedisAdmin
from spiderd.frontier.pool.redis.channel import RedisChannel
from spiderd.frontier.pool.redis.crawled import RedisCrawled
from spiderd.frontier.pool.redis.handed import Handed
from spiderd.frontier.pool.redis.known import KnownURLs
from spiderd.frontier.pool.redis.ledger import RedisLedger
from spiderd.frontier.pool.redis.link import Link, Script
from spiderd.frontier.pool.redis.queues import RedisQueues
from spiderd.frontier.pool.redis.statuses import RedisStatuses
from spiderd.frontier.pool.shared import HostErrors, RecentFailures, URLParser, stats_answer
from spiderd.frontier.pool.split import KindSplit

log = Logger()


@implementer(IURLPool, IURLPoolAdmin)
class RedisPool(PartsPool):
    """A polite URL pool shared by every node that opens the same Redis keys; every step is one Lua script."""

    def __init__(self, link: Link, scripts: dict[str, Script], clock: IReactorTime,
                 options: PoolOptions = PoolOptions(), *, prefix: str = "spiderd:", namespace: str = "",
                 seen_bucket_bits: int = 16, politeness: Politeness | None = None, status_wait: float = 0.0,
                 known: KnownURLs | None = None, recent_failures: RecentFailures | None = None,
                 turn_limit: int | None = None) -> None:
        """``options``: the same as the embedded pool's; ``prefix``, ``namespace`` and ``seen_bucket_bits``: the
        key space (``[pool] redis_prefix``, ``redis_namespace``, ``redis_seen_bucket_bits``); ``status_wait``:
        seconds a status waits for others to go out with (``[pool] redis_status_wait``; 0: at once); ``known``
        (the URLs this node knows the pool knows) and ``recent_failures`` (its last final failures): shared by a
        cluster's partitions, else this pool's own (``known`` of ``[pool] redis_known_urls`` entries);
        ``turn_limit``: the domains taking turns at once (None: ``[pool] max_active_hosts``; a cluster gives each
        partition its share)."""
        config = options.config
        self._clock = clock
        self.politeness = politeness = politeness or Politeness()
        self.failure_threshold = config.failure_threshold
        self.max_throttles = options.max_throttles
        self.conditional_get = options.conditional_get
        self.pending_threshold = config.pending_threshold
        self.known = known if known is not None else KnownURLs(config.redis_known_urls)
        self.recent_failures = recent_failures if recent_failures is not None else RecentFailures()
        self.rejected: Counter[str] = Counter()
        self.channel = channel = RedisChannel(
            link, scripts, clock, politeness, prefix=prefix, namespace=namespace, bits=seen_bucket_bits,
            failure_threshold=config.failure_threshold, max_throttles=options.max_throttles, status_wait=status_wait,
            known=self.known, recent_failures=self.recent_failures,
            turn_limit=config.max_active_hosts if turn_limit is None else turn_limit)
        self._urls = urls = URLParser(config.max_url_length, self.rejected)
        self.host_errors = HostErrors()  # this node's failed fetches per host (hosts())
        self._kept = kept = _kept(options.recrawl)  # (one dict: the statuses read it, set_recrawl changes it)
        handed = Handed(lambda *args: channel.execute(*args), prefix, config.max_url_length, options.conditional_get)
        conditional = _conditional(options.conditional_get, kept)
        self.hops = HopLimits(config.max_hops, options.site_hops)  # link-hop limits (hops.py): counts in P h:<bucket>
        self.split = KindSplit(config.list_ratio, config.detail_ratio)
        self._queues = queues = RedisQueues(
            channel, clock, urls, self.hops, self.split, handed, pending_threshold=config.pending_threshold,
            max_per_host=config.max_urls_per_host, conditional=conditional, per_ip=options.per_ip)
        self._ledger = RedisLedger(channel, urls, kept)
        super().__init__(queues, RedisStatuses(channel, clock, urls, politeness, options, kept, handed, self.host_errors),
                         self._ledger,
                         RedisCrawled(channel, config.linkbase, config.linkbase_max, config.max_url_length,
                                      options.conditional_get),
                         RedisContent(channel, config.max_url_length),
                         RedisAdmin(channel, clock, queues, politeness, self.host_errors, config.max_url_length))

    def start(self) -> defer.Deferred[RedisPool]:
        """Record the bucket layout (or adopt the one already there) and this node's host overrides; deletes nothing."""
        link, meta = self.channel.link, self.channel.prefix + "meta"
        d = link.execute("HSETNX", meta, "seen_bucket_bits", str(self.channel.bits))
        d.addCallback(lambda _: link.execute("HGET", meta, "seen_bucket_bits"))
        d.addCallback(self._adopt_bits)
        d.addCallback(lambda _: self.write_conf())
        if self.hops.tracking:  # hop counts (perhaps kept by an older version, which set no mark) go at final statuses
            d.addCallback(lambda _: link.execute("HSET", meta, "hops", "1"))
        d.addCallback(lambda _: self.channel.keep_encodings())
        return d.addCallback(lambda _: self)

    def write_conf(self, dropped: Iterable[str] = ()) -> defer.Deferred[None]:
        """Write this node's host overrides into ``P conf`` (for every node), and delete those of ``dropped``."""
        link, key, conf = self.channel.link, self.channel.prefix + "conf", self._host_conf()
        d = link.execute("HSET", key, *itertools.chain(*conf.items())) if conf else defer.succeed(None)
        gone = [host for host in dropped if host not in conf]
        if gone:
            d.addCallback(lambda _: link.execute("HDEL", key, *gone))
        return d.addCallback(lambda _: None)

    def _host_conf(self) -> dict[str, str]:
        """This node's ``P conf`` entries: host -> "delay concurrency", then its adaptive rule if it has its own."""
        politeness = self.politeness
        conf = {}
        for host in {**politeness.overrides, **politeness.adaptive_overrides}:
            delay, concurrency = politeness.overrides.get(host, (politeness.delay, politeness.concurrency))
            words = [repr(float(delay)), str(concurrency)]
            if host in politeness.adaptive_overrides:
                words += politeness.adaptive_overrides[host].args()
            conf[host] = " ".join(words)
        return conf

    def _adopt_bits(self, stored: str) -> None:
        if int(stored) != self.channel.bits:
            log.info("Redis pool {prefix} uses {bits}-bit seen buckets (asked for {asked})", prefix=self.channel.prefix,
                     bits=stored, asked=self.channel.bits)
        self.channel.bits = int(stored)

    # -- counts (IURLQueue) ---------------------------------------------------------

    def size(self) -> defer.Deferred[int]:
        d = self.channel.execute("HGET", self.channel.prefix + "counters", "waiting")
        return d.addCallback(lambda waiting: int(waiting or 0))

    def empty(self) -> defer.Deferred[bool]:
        return self.size().addCallback(lambda waiting: waiting == 0)

    def stats(self) -> defer.Deferred[dict[str, Any]]:
        return self.channel.run("stats", []).addCallback(self._stats)

    def _stats(self, answer: list[Any]) -> dict[str, Any]:
        """``hosts_in_turn``: the domains in turn when turns are limited (``P turns``), else the hosts waiting."""
        flat, hosts, top, hubs, in_turn, limit = answer
        counters = {name: int(value) for name, value in zip(flat[::2], flat[1::2])}
        largest = [[host, int(float(count))] for host, count in zip(top[::2], top[1::2]) if int(float(count))]
        return stats_answer(counters, int(hosts), largest, int(hubs), self.rejected, self.known.skipped,
                            in_turn=int(in_turn) if int(limit) > 0 else int(hosts))

    # -- pops (ILeases) -------------------------------------------------------------

    def pop(self, count: int, hub_percent: int = 50, hubs: int | None = None) -> defer.Deferred[dict[str, bool]]:
        """``hubs``: due hubs to hand out at most, in place of ``hub_percent`` of ``count`` (a partition's share)."""
        return self._queues.pop(count, hub_percent, hubs)

    def next_due(self) -> defer.Deferred[float | None]:
        now = self._clock.seconds()
        d = self.channel.run("next_due", [], now)
        return d.addCallback(lambda t: None if t is None else max(0.0, float(t) - now))

    # -- seeds (ISeedLists) ---------------------------------------------------------

    def set_seeds(self, urls: Iterable[str]) -> defer.Deferred[int]:
        """Add the canonical ``urls`` to the seed-002 set ``spider.seed.urls`` (deleting nothing: other tools
        and other nodes add to it too); fires with its size."""
        canonical = list(dict.fromkeys(u.url for u in map(self._urls.parse, urls) if u is not None))
        return self.channel.run("seeds", canonical).addCallback(int)

    def seed_urls(self) -> defer.Deferred[Sequence[str]]:
        """Every member of ``spider.seed.urls`` (whoever added it), sorted: what the seed timer injects."""
        return self.channel.execute("SMEMBERS", self.channel.namespace + "spider.seed.urls").addCallback(sorted)

    # -- host policy (IHostPolicy) ---------------------------------------------------

    def set_host_delay(self, host: str, delay: float) -> defer.Deferred[None]:
        """Raise a host's delay to its robots.txt Crawl-delay, for every node."""
        d = self.channel.execute("HSET", self.channel.prefix + "robots", host, repr(float(delay)))
        return d.addCallback(lambda _: None)

    def set_recrawl(self, pairs: Sequence[tuple[str, str]]) -> defer.Deferred[None]:
        """This node's statuses keep the done pages of ``pairs`` (their sets are shared: see the package)."""
        kept = _kept(pairs)
        self._kept.clear()
        self._kept.update(kept)
        self._ledger.set_kept(kept)
        self._queues.conditional = _conditional(self.conditional_get, kept)
        return defer.succeed(None)

    def set_site_hops(self, by_domain: Mapping[str, int]) -> defer.Deferred[None]:
        """This node's limits; the mark that hop counts are kept (they go at final statuses), once any limit is."""
        self.hops.set_sites(by_domain)
        if not self.hops.tracking:
            return defer.succeed(None)
        d = self.channel.link.execute("HSET", self.channel.prefix + "meta", "hops", "1")
        return d.addCallback(lambda _: None)

    def set_politeness(self, rules: PoliteRules) -> defer.Deferred[None]:
        """This node's politeness (its defaults go with each of its calls) and ``P conf``, rewritten: the hosts'
        tables it had and has no more are deleted there, for every node."""
        return self.write_conf(self.politeness.configure(rules))

    def set_host_group(self, host: str, group: str) -> defer.Deferred[None]:
        """Put ``host`` in the politeness group ``group`` (its address; ``host``: on its own again) for every node,
        with its requests in flight (``group.lua``); from now on this node's pops group hosts by address."""
        self._queues.per_ip = True
        args = [host, "" if group == host else group, registered_domain(host)]
        return self.channel.run("group", args).addCallback(lambda _: None)

    # -- closing --------------------------------------------------------------------

    def close(self) -> defer.Deferred[None]:
        return self.channel.close()


def _kept(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The statuses' argument of each recrawled domain: its kept prios as digits."""
    return {domain: "".join(str(p) for p in sorted(prios)) for domain, prios in recrawl_pairs(pairs).items()}


def _conditional(conditional_get: bool, kept: dict[str, str]) -> str:
    """pop.lua's validators switch: "0" none, "1" every URL's, "h" hubs' only (no page recrawled)."""
    return "0" if not conditional_get else "1" if kept else "h"
