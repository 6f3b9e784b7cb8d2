"""RedisPool: the IURLPool contract over the shared Redis layout (see the package docstring); the admin part
(IURLPoolAdmin: why, export, import) is :mod:`.admin`'s."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from spiderd.core import conditional as cg
from spiderd.core import status as st
from spiderd.core.urls import URL, registered_domain
from spiderd.frontier.interfaces import IURLPool, IURLPoolAdmin
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool.split import hub_quota
from spiderd.frontier.pool.content import RedisContent
from spiderd.frontier.pool.crawled import KINDS, link_value, parallel, recrawl_pairs
from spiderd.frontier.pool.hops import REJECTED, HopLimits, RedisHops
from spiderd.frontier.pool.options import PoolOptions
from spiderd.frontier.pool.redis.admin import RedisAdmin
from spiderd.frontier.pool.redis.handed import LEAVE, Handed
from spiderd.frontier.pool.redis.keys import KEEP_HASHTABLE, KEEP_SKIPLIST, add_keys, fingerprint_hex, status_keys
from spiderd.frontier.pool.redis.known import KnownURLs
from spiderd.frontier.pool.redis.link import Link, Script
from spiderd.frontier.pool.shared import HostErrors, RecentFailures, URLParsing, parsed, stats_answer, status_parts
from spiderd.frontier.pool.split import RESERVE_SCAN, KindSplit

log = Logger()

DOMAIN_SWEEP_EVERY = 10.0  # seconds between sweeps of spider.website.domains for domains other tools registered
DOMAIN_SWEEP_COUNT = 100  # domains a pop looks at while a sweep is under way (SSCAN's COUNT)
STATUS_BATCH = 1000  # status entries (and fetched ones) waiting that go out at once, whatever status_wait says


@implementer(IURLPool, IURLPoolAdmin)
class RedisPool(RedisAdmin, RedisContent, RedisHops, URLParsing):
    """A polite URL pool shared by every node that opens the same Redis keys; every step is one Lua script."""

    def __init__(self, link: Link, scripts: dict[str, Script], clock: IReactorTime,
                 options: PoolOptions = PoolOptions(), *, prefix: str = "spiderd:", namespace: str = "",
                 seen_bucket_bits: int = 16, politeness: Politeness | None = None, status_wait: float = 0.0,
                 known: KnownURLs | None = None) -> None:
        """``options``: the same as the embedded pool's; ``prefix``, ``namespace`` and ``seen_bucket_bits``: the
        key space (``[pool] redis_prefix``, ``redis_namespace``, ``redis_seen_bucket_bits``); ``status_wait``:
        seconds a status waits for others to go out with (``[pool] redis_status_wait``; 0: at once); ``known``:
        the URLs this node knows the pool knows (shared by a cluster's partitions; else one of ``[pool]
        redis_known_urls`` entries)."""
        config = options.config
        self._link = link
        self.hops = HopLimits(config.max_hops, options.site_hops)  # link-hop limits (hops.py): counts in P h:<bucket>
        self._scripts = scripts
        self._clock = clock
        self.prefix = prefix
        self.namespace = namespace
        self.politeness = politeness or Politeness()
        self.failure_threshold = config.failure_threshold
        self.max_throttles = options.max_throttles
        self.conditional_get = options.conditional_get
        self.per_ip = options.per_ip  # pops group hosts by address (P group); set by the first set_host_group too
        self.pending_threshold = config.pending_threshold
        self._done_codes = options.done_codes
        self._final_codes = options.final_codes
        self._max_url_length = config.max_url_length
        self._max_per_host = config.max_urls_per_host  # 0: no budget (add.lua then leaves the hostseen counts alone)
        self.split = KindSplit(config.list_ratio, config.detail_ratio)
        self._bits = seen_bucket_bits
        self.known = known if known is not None else KnownURLs(config.redis_known_urls)
        self.rejected: Counter[str] = Counter()
        self.recent_failures = RecentFailures()
        self.host_errors = HostErrors()  # this node's failed fetches per host (hosts())
        self._statuses: list[tuple[list[str], defer.Deferred[None]]] = []  # waiting to go out together
        self._statuses_in_flight = 0
        self._status_wait = status_wait
        self._status_timer: IDelayedCall | None = None
        self._fetched_waiting: dict[str, list[str]] = {}  # url -> its 'fetched' entry, not sent yet
        self._kept = {domain: "".join(str(p) for p in sorted(prios))
                      for domain, prios in recrawl_pairs(options.recrawl).items()}
        self._linkbase = config.linkbase
        self._linkbase_max = config.linkbase_max
        self._handed = Handed(lambda *args: self._execute(*args), prefix, config.max_url_length,
                              options.conditional_get)

    def start(self) -> defer.Deferred[RedisPool]:
        """Record the bucket layout (or adopt the one already there) and this node's host overrides; deletes nothing."""
        meta = self.prefix + "meta"
        d = self._link.execute("HSETNX", meta, "seen_bucket_bits", str(self._bits))
        d.addCallback(lambda _: self._link.execute("HGET", meta, "seen_bucket_bits"))
        d.addCallback(self._adopt_bits)
        for host, value in self._host_conf().items():
            d.addCallback(lambda _, h, v: self._link.execute("HSET", self.prefix + "conf", h, v), host, value)
        if self.hops.tracking:  # hop counts (perhaps kept by an older version, which set no mark) go at final statuses
            d.addCallback(lambda _: self._link.execute("HSET", meta, "hops", "1"))
        d.addCallback(lambda _: self._keep_encodings())
        return d.addCallback(lambda _: self)

    def _keep_encodings(self) -> defer.Deferred[Any]:
        """Write the entries that keep the small keys out of listpacks (KEEP_HASHTABLE, KEEP_SKIPLIST)."""
        writes = [self._link.execute("HSETNX", self.prefix + key, *KEEP_HASHTABLE) for key in ("inflight", "lease")]
        for key, score in (("leases", "+inf"), ("ready", "+inf"), ("waiting", "0"), ("next", "+inf")):
            writes.append(self._link.execute("ZADD", self.prefix + key, "NX", score, KEEP_SKIPLIST))
        return defer.gatherResults(writes, consumeErrors=True)

    def _remember(self, urls: Iterable[str], epoch: str) -> None:
        """URLs an add or seen call found known in the pool's ``epoch`` (self.known); a new epoch (the pool lost its
        data: a Redis restarted empty, a flush) lost the small keys' entries too, which are written again."""
        if self.known.remember(urls, self.prefix, epoch):
            log.info("Redis pool {prefix} lost its data (a new epoch): its small keys' entries are written again",
                     prefix=self.prefix)
            self._keep_encodings().addErrback(lambda f: log.failure("Writing the small keys' entries", f))

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
        if int(stored) != self._bits:
            log.info("Redis pool {prefix} uses {bits}-bit seen buckets (asked for {asked})", prefix=self.prefix,
                     bits=stored, asked=self._bits)
        self._bits = int(stored)

    # -- adding ---------------------------------------------------------------------

    def add(self, url: str, always: bool = False, detail: bool = False) -> defer.Deferred[bool]:
        return self.addmany((url,), always, detail).addCallback(lambda added: added == 1)

    def addmany(self, urls: Iterable[str], always: bool = False, detail: bool = False,
                parent: str | None = None) -> defer.Deferred[int]:
        if isinstance(urls, str):
            urls = (urls,)
        fresh = {u.url: u for u in map(self._parse, urls) if u is not None}
        if not always:  # a known URL's add would change nothing
            fresh = {url: fresh[url] for url in self.known.unknown(fresh)}
        if not fresh:
            return defer.succeed(0)
        hops = self.hops
        found_on = parsed(parent, self._max_url_length) if parent is not None and hops.tracking else None
        args = ["1" if always else "0", "1" if detail else "0", str(self._max_per_host),
                fingerprint_hex(found_on.url) if found_on is not None else ""]
        for u in fresh.values():
            args += (u.url, u.host, registered_domain(u.host), str(hops.limit(u.host)) if found_on else "0",
                     *add_keys(u.url, self.prefix, self._bits))
        return self._run("add", args).addCallback(self._added, [] if always else list(fresh))

    def _added(self, answer: list[Any], sent: list[str]) -> int:
        """The URLs added; ``sent`` (not re-adds: a large one would push out the links found often) are known to
        the pool now, but those it refused (host-full, past the hop limit)."""
        added, full, far, epoch, refused = answer
        if full:
            self.rejected["host-full"] += full
        if far:
            self.rejected[REJECTED] += far
        if refused:
            out = {int(n) - 1 for n in refused}
            sent = [url for i, url in enumerate(sent) if i not in out]
        self._remember(sent, epoch)
        return int(added)

    # -- popping and statuses -------------------------------------------------------

    def pop(self, count: int, hub_percent: int = 50, hubs: int | None = None) -> defer.Deferred[dict[str, bool]]:
        """``hubs``: due hubs to hand out at most, in place of ``hub_percent`` of ``count`` (a partition's share)."""
        now = self._clock.seconds()
        split = self.split
        args = [self._deadline(now), str(count), str(hub_quota(count, hub_percent) if hubs is None else hubs),
                *map(repr, split.ratios), *map(repr, split.credit), str(RESERVE_SCAN),
                repr(DOMAIN_SWEEP_EVERY), str(DOMAIN_SWEEP_COUNT), self._conditional_arg(), "1" if self.per_ip else "0"]
        waiting = self._take_statuses()
        if not waiting:
            return self._run("pop", args, now).addCallback(self._popped)
        entries, batch = waiting
        d = self._script("statuspop", [str(len(entries)), *entries, *args], now)
        return d.addBoth(self._statuses_popped, batch).addCallback(self._popped)

    def _statuses_popped(self, answer: Any, batch: list[tuple[list[str], defer.Deferred[None]]]) -> Any:
        """The statuses that went out with a pop are recorded (or failed, as the pop did); the pop's answer."""
        self._statuses_sent(answer if isinstance(answer, Failure) else answer[0], batch)
        return answer if isinstance(answer, Failure) else answer[1]

    def _deadline(self, now: float) -> str:
        """A lease's deadline, now + pending_threshold rounded up to a whole second: Redis parses a whole number
        faster than a fraction (``P leases`` is a skiplist: KEEP_SKIPLIST), and a lease's end needs no finer time."""
        return str(math.ceil(now + self.pending_threshold))

    def _conditional_arg(self) -> str:
        """pop.lua's validators switch: every URL's, hubs' only (no recrawled kind: all nodes share it), none."""
        return "0" if not self.conditional_get else "1" if self._kept else "h"

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
        d.addCallback(lambda _: self._execute("ZREM", self.prefix + "adopting", *held))
        return d.addCallback(lambda _: None)

    def validators(self, url: str) -> defer.Deferred[cg.Validators | None]:
        """The validators kept for ``url``: for a URL this node popped, from the pop's answer; else asked of Redis."""
        return self._handed.get(url)

    def claim(self, url: str, by: str | None = None) -> defer.Deferred[bool]:
        """Lease ``url`` (a redirect target) unless it is done, failed or leased already; fires True if leased.

        A claim that ``by`` (the redirecting URL) holds already is renewed: its
        next fetch, after a crash or a failed processing, takes the target again.
        """
        u = self._parse(url)
        if u is None:
            return defer.succeed(False)
        owner = parsed(by, self._max_url_length)
        now = self._clock.seconds()
        args = [self._deadline(now), *self._located(u), owner.url if owner is not None else ""]
        return self._run("claim", args, now).addCallback(bool)

    def fetched(self, url: str, elapsed: float | None = None) -> defer.Deferred[None]:
        """The request for a handed-out URL is over (it took ``elapsed`` seconds, if given: adaptive politeness
        paces its host by it, for every node): free its host slot (the lease stays until set_status).  Goes out
        with the statuses, in status.lua's call (a 'fetched' entry)."""
        took = "" if elapsed is None else repr(float(elapsed))
        entry = ["fetched", url, took, *self.politeness.adaptive.args(), "", fingerprint_hex(url), "", ""]
        if self._status_wait > 0:
            self._fetched_waiting[url] = entry
        return self._queue_statuses(entry)

    def _drop_fetched(self, url: str, host: str) -> None:
        """A status given while the URL's 'fetched' entry still waits frees the host slot itself: the entry is
        left out (emptied), unless it paces the host (adaptive politeness: its duration counts)."""
        entry = self._fetched_waiting.pop(url, None)
        if entry is not None and not self.politeness.adaptive_of(host).on:
            entry.clear()

    def set_status(self, url: str, status_code: int, reason: str | None = None) -> defer.Deferred[None]:
        """Record a fetch outcome; statuses given while one is on its way go out together, in one script call."""
        return self.set_statuses(((url, status_code, reason),))

    def throttle(self, url: str, until: float, status_code: int, reason: str | None = None) -> defer.Deferred[None]:
        """A throttling answer: the host's ``P next`` becomes ``until`` for every node, the URL queued again
        without a failure up to ``max_throttles`` times (``P throttles``); in line with the other statuses."""
        u = self._parse(url)
        if u is None:
            return defer.succeed(None)
        url, host, domain = self._located(u)
        self._handed.forget(url)
        self.host_errors.add(host)
        outcome = f"throttle {self._outcome(status_code)} {float(until)!r}"
        return self._queue_statuses([outcome, url, host, domain, self._kept.get(domain, "-"),
                                     st.recorded(status_code, reason), LEAVE, *status_keys(url, self.prefix, self._bits)])

    def set_statuses(
        self, statuses: Iterable[tuple[Any, ...]], checkpoint: tuple[str, int] | None = None
    ) -> defer.Deferred[None]:
        """Record several outcomes (``(url, code)``, ``(url, code, reason)`` or ``(url, code, reason,
        validators)``) and ``checkpoint`` (a name and a count) in one script call (atomic)."""
        args: list[str] = []
        for url, code, reason, validators in map(status_parts, statuses):
            u = self._parse(url)
            if u is not None:
                url, host, domain = self._located(u)
                if self._fetched_waiting:
                    self._drop_fetched(url, host)
                outcome = self._outcome(code)
                why = "" if outcome == "done" else st.recorded(code, reason)
                if outcome != "done":
                    self.host_errors.add(host)
                args += (outcome, url, host, domain, self._kept.get(domain, "-"), why, self._handed.arg(validators),
                         *status_keys(url, self.prefix, self._bits))
                self._handed.forget(url)
        if checkpoint is not None:
            args += ("checkpoint", checkpoint[0], str(int(checkpoint[1])), "", "", "", "", "", "", "")
        return self._queue_statuses(args)

    def _queue_statuses(self, args: list[str]) -> defer.Deferred[None]:
        """Send status entries (ten arguments each) with the others given meanwhile, in one script call: at once
        if none is on its way (no ``status_wait``), else with the next pop or after ``status_wait`` seconds."""
        if not args:
            return defer.succeed(None)
        d: defer.Deferred[None] = defer.Deferred()
        self._statuses.append((args, d))
        if self._status_wait <= 0:
            if not self._statuses_in_flight:
                self._send_statuses()
        elif len(self._statuses) >= STATUS_BATCH:
            self._send_statuses()
        elif self._status_timer is None:
            self._status_timer = self._clock.callLater(self._status_wait, self._send_statuses)
        return d

    def _outcome(self, status_code: int) -> str:
        if status_code in self._done_codes:
            return "done"
        if status_code in self._final_codes:
            return "final"
        return "retry"

    def checkpoint(self, name: str) -> defer.Deferred[int | None]:
        """The count last recorded under ``name`` by ``set_statuses``, or None."""
        d = self._execute("HGET", self.prefix + "checkpoints", name)
        return d.addCallback(lambda value: None if value is None else int(value))

    def drop_checkpoint(self, name: str) -> defer.Deferred[None]:
        return self._execute("HDEL", self.prefix + "checkpoints", name).addCallback(lambda _: None)

    def _send_statuses(self) -> None:
        waiting = self._take_statuses()
        if waiting:
            entries, batch = waiting
            self._script("status", entries).addBoth(self._statuses_sent, batch)

    def _take_statuses(self) -> tuple[list[str], list[tuple[list[str], defer.Deferred[None]]]] | None:
        """The status script's arguments for the entries waiting, and those entries (now on their way)."""
        timer, self._status_timer = self._status_timer, None
        if timer is not None and timer.active():
            timer.cancel()
        batch, self._statuses = self._statuses, []
        self._fetched_waiting.clear()
        if not batch:
            return None
        self._statuses_in_flight += 1
        entries = [str(self.failure_threshold), str(self.max_throttles)] + [arg for entry, _ in batch for arg in entry]
        return entries, batch

    def _statuses_sent(self, result: Any, batch: list[tuple[list[str], defer.Deferred[None]]]) -> None:
        if not isinstance(result, Failure):
            for url, why in zip(result[::2], result[1::2]):
                log.debug("{url} failed for good: {reason}", url=url, reason=why)
                self.recent_failures.add(url, why, self._clock.seconds())
        self._statuses_in_flight -= 1
        if not self._statuses_in_flight and self._status_wait <= 0:
            self._send_statuses()
        for _, d in batch:
            d.errback(result) if isinstance(result, Failure) else d.callback(None)

    # -- the seen set ---------------------------------------------------------------

    def seen_filter(self, urls: Iterable[str]) -> defer.Deferred[list[str]]:
        """The canonical forms of ``urls`` the pool has never seen (in any state), without duplicates."""
        return self._seen(urls, mark=False)

    def seen_add(self, urls: Iterable[str]) -> defer.Deferred[int]:
        """Record ``urls`` as sent in a batch (a final state here); fires with the number newly recorded."""
        return self._seen(urls, mark=True).addCallback(len)

    def _seen(self, urls: Iterable[str], mark: bool) -> defer.Deferred[list[str]]:
        canonical = self.known.unknown(dict.fromkeys(u.url for u in map(self._parse, urls) if u is not None))
        if not canonical:
            return defer.succeed([])
        args = ["1" if mark else "0"]
        for url in canonical:
            args += add_keys(url, self.prefix, self._bits)
        return self._run("seen", args).addCallback(self._seen_answer, canonical, mark)

    def _seen_answer(self, answer: list[Any], urls: list[str], mark: bool) -> list[str]:
        """The fresh ones of ``urls``; the others (all of them, marked) are known to the pool now."""
        *flags, epoch = answer
        self._remember(urls if mark else [url for url, fresh in zip(urls, flags) if not fresh], epoch)
        return [url for url, fresh in zip(urls, flags) if fresh]

    def next_batch(self, count: int = 1) -> defer.Deferred[int]:
        """Reserve ``count`` batch numbers, unique across nodes and restarts; fires with the first."""
        d = self._execute("INCRBY", self.prefix + "batch", str(count))
        return d.addCallback(lambda last: int(last) - count + 1)

    # -- hubs, hosts, seeds ---------------------------------------------------------

    def set_hubs(self, urls: Iterable[str], refresh_span: float) -> defer.Deferred[None]:
        args = [repr(float(refresh_span))]
        for u in {u.url: u for u in map(self._parse, urls) if u is not None}.values():
            args += (u.url, registered_domain(u.host))
        return self._run("hubs", args).addCallback(lambda _: None)

    def set_host_delay(self, host: str, delay: float) -> defer.Deferred[None]:
        """Raise a host's delay to its robots.txt Crawl-delay, for every node."""
        return self._execute("HSET", self.prefix + "robots", host, repr(float(delay))).addCallback(lambda _: None)

    def set_host_group(self, host: str, group: str) -> defer.Deferred[None]:
        """Put ``host`` in the politeness group ``group`` (its address; ``host``: on its own again) for every node,
        with its requests in flight (``group.lua``); from now on this node's pops group hosts by address."""
        self.per_ip = True
        args = [host, "" if group == host else group, registered_domain(host)]
        return self._run("group", args).addCallback(lambda _: None)

    def set_seeds(self, urls: Iterable[str]) -> defer.Deferred[int]:
        """Add the canonical ``urls`` to the seed-002 set ``spider.seed.urls`` (deleting nothing: other tools
        and other nodes add to it too); fires with its size."""
        canonical = list(dict.fromkeys(u.url for u in map(self._parse, urls) if u is not None))
        return self._run("seeds", canonical).addCallback(int)

    def seed_urls(self) -> defer.Deferred[list[str]]:
        """Every member of ``spider.seed.urls`` (whoever added it), sorted: what the seed timer injects."""
        return self._execute("SMEMBERS", self.namespace + "spider.seed.urls").addCallback(sorted)

    # -- questions ------------------------------------------------------------------

    def size(self) -> defer.Deferred[int]:
        d = self._execute("HGET", self.prefix + "counters", "waiting")
        return d.addCallback(lambda waiting: int(waiting or 0))

    def empty(self) -> defer.Deferred[bool]:
        return self.size().addCallback(lambda waiting: waiting == 0)

    def next_due(self) -> defer.Deferred[float | None]:
        now = self._clock.seconds()
        return self._run("next_due", [], now).addCallback(lambda t: None if t is None else max(0.0, float(t) - now))

    def stats(self) -> defer.Deferred[dict[str, Any]]:
        return self._run("stats", []).addCallback(self._stats)

    def _stats(self, answer: list[Any]) -> dict[str, Any]:
        flat, hosts, top, hubs = answer
        counters = {name: int(value) for name, value in zip(flat[::2], flat[1::2])}
        largest = [[host, int(float(count))] for host, count in zip(top[::2], top[1::2]) if int(float(count))]
        return stats_answer(counters, int(hosts), largest, int(hubs), self.rejected, self.known.skipped)

    # -- seed 004: crawled sets, linkbase; one node per cron firing -----------------

    def recrawl(self, cutoffs: Iterable[tuple[str, str, float]], limit: int) -> defer.Deferred[int]:
        """Queue again up to ``limit`` pages of each (domain, kind) crawled set fetched at or before its cut-off."""
        args = [str(limit)]
        for domain, kind, cutoff in cutoffs:
            args += (domain, str(KINDS[kind]), repr(float(cutoff)))
        return self._run("recrawl", args).addCallback(int)

    def add_links(self, parent: str, urls: Sequence[str], anchors: Sequence[str] = (),
                  xpaths: Sequence[str] = ()) -> defer.Deferred[int]:
        """Record how ``urls`` were first found (``parent``, anchor text, link path); fires with the number recorded."""
        if not self._linkbase:
            return defer.succeed(0)
        args = [str(self._linkbase_max)]
        for url, anchor, xpath in zip(urls, parallel(anchors, len(urls)), parallel(xpaths, len(urls))):
            u = parsed(url, self._max_url_length)
            if u is not None:
                args += (u.url, link_value(u.url, parent, anchor, xpath))
        return self._run("links", args).addCallback(int) if len(args) > 1 else defer.succeed(0)

    def claim_once(self, name: str, ttl: float) -> defer.Deferred[bool]:
        """True for the one caller, over all nodes, that first claims ``name`` within ``ttl`` seconds (SET NX PX)."""
        d = self._execute("SET", self.prefix + name, "1", "NX", "PX", str(max(1, int(ttl * 1000))))
        return d.addCallback(lambda answer: answer is not None)

    # -- closing --------------------------------------------------------------------

    def close(self) -> defer.Deferred[None]:
        self._send_statuses()
        return self._link.close()

    # -- internals ------------------------------------------------------------------

    @staticmethod
    def _located(u: URL) -> tuple[str, str, str]:
        return u.url, u.host, registered_domain(u.host)

    def _run(self, name: str, args: list[str], now: float | None = None) -> defer.Deferred[Any]:
        """Run a script after the statuses given before it (so the pool sees calls in the order they were made)."""
        self._send_statuses()
        return self._script(name, args, now)

    def _execute(self, *args: str) -> defer.Deferred[Any]:
        self._send_statuses()
        return self._link.execute(*args)

    def _script(self, name: str, args: list[str], now: float | None = None) -> defer.Deferred[Any]:
        """Run a script with the common arguments: prefix, namespace, bucket bits, default delay and concurrency, now."""
        if now is None:
            now = self._clock.seconds()
        politeness = self.politeness
        common = [self.prefix, self.namespace, str(self._bits), repr(float(politeness.delay)),
                  str(politeness.concurrency), repr(float(now))]
        return self._link.run(self._scripts[name], common + args)

