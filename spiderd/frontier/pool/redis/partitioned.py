"""The Redis pool on a Redis Cluster: P partitions, each a whole RedisPool whose keys share one hash tag.

A URL belongs to the partition of its registered domain (:mod:`.partitions`),
so its seen-set entry, its domain's queues, its host's politeness, its lease,
hops, validators and linkbase entry are all in one slot and every script
touches one slot.  This class routes each call by URL (or host, or digest),
splits a batch by partition, and merges the answers: a pop asks a few
partitions at a time, in turn (``SHARE`` URLs or more each), and more while it
has fewer URLs than asked; sizes and stats are sums.  What is one value for the
whole pool lives in partition 0: batch numbers, the cron claims, the seed set,
the partition count itself.  An items checkpoint goes with the statuses it
commits, in their partition when they have one (see ``set_statuses``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generator

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from spiderd.contracts.pool import ExportReader, IURLPool, IURLPoolAdmin
from spiderd.core import conditional as cg
from spiderd.core.recrawls import Recrawl
from spiderd.core.rules import PoliteRules
from spiderd.core.urls import MAX_URL_LENGTH, registered_domain
from spiderd.frontier.pool.options import PoolOptions
from spiderd.frontier.pool.redis.cluster import ClusterLink, SlotLink, key_slot, parse_cluster_url
from spiderd.frontier.pool.redis.durability import NONE, Durability
from spiderd.frontier.pool.redis.known import KnownURLs
from spiderd.frontier.pool.redis.link import RedisPoolError, load_scripts
from spiderd.frontier.pool.redis.partitions import (
    ChainedExport, import_groups, merged_imports, merged_stats, partition_of, partition_tags, spread,
    stride_order, url_partition,
)
from spiderd.frontier.pool.redis.pool import RedisPool
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool.split import hub_quota
from spiderd.frontier.pool.shared import RecentFailures, host_limit, parsed, status_parts, top_hosts

log = Logger()

SHARE = 64  # URLs a pop asks of one partition at least: a pop script call costs about as much for 1 URL as for 64
Gen = Generator[Any, Any, Any]


@implementer(IURLPool, IURLPoolAdmin)
class PartitionedPool:
    """IURLPool over ``parts`` (RedisPools on one cluster, partition p's keys tagged ``{tag p}``, sharing one
    memory of known URLs and of recent failures: see make_cluster_pool)."""

    def __init__(self, cluster: ClusterLink, parts: Sequence[RedisPool], layout_key: str,
                 max_url_length: int = MAX_URL_LENGTH) -> None:
        self._cluster = cluster
        self.layout_key = layout_key  # holds the partition count
        self.parts = list(parts)
        self._count = len(self.parts)
        self._max_url_length = max_url_length
        self._cursor = 0  # where in _order the next pop starts
        self._order = stride_order(self._count)  # neighbours in turn are far apart in slots, so on other masters
        self._hub_parts: set[int] = set()  # partitions given hubs by set_hubs (a pop asks them first for hubs)
        first = self.parts[0]
        self.recent_failures = first.recent_failures  # this node's, shared by every partition (the API reads it)
        self.failure_threshold = first.failure_threshold
        self.max_throttles = first.max_throttles
        self.conditional_get = first.conditional_get
        self.pending_threshold = first.pending_threshold

    @defer.inlineCallbacks
    def start(self) -> Gen:
        """Record the partition count (``<prefix>{partitions}``, whatever the count), or check the one recorded,
        then start every partition."""
        key = self.layout_key
        yield self._cluster.execute(key_slot(key), "SET", key, str(self._count), "NX")
        stored = int((yield self._cluster.execute(key_slot(key), "GET", key)))
        if stored != self._count:
            raise RedisPoolError(f"the Redis Cluster pool {key!r} has {stored} partitions, not "
                                 f"{self._count}: set [pool] redis_partitions = {stored}")
        yield defer.gatherResults([part.start() for part in self.parts], consumeErrors=True)
        return self

    # -- routing ----------------------------------------------------------------------

    def _of(self, url: str) -> RedisPool:
        return self.parts[url_partition(url, self._count, self._max_url_length)]

    def _by_host(self, host: str) -> RedisPool:
        return self.parts[partition_of(registered_domain(host), self._count)]

    def _groups(self, items: Iterable[Any], url: Any = lambda item: item) -> dict[int, list[Any]]:
        groups: dict[int, list[Any]] = {}
        for item in items:
            groups.setdefault(url_partition(url(item), self._count, self._max_url_length), []).append(item)
        return groups

    def _each(self, calls: Iterable[defer.Deferred[Any]]) -> defer.Deferred[list[Any]]:
        d = defer.gatherResults(list(calls), consumeErrors=True)
        return d.addErrback(lambda f: f.value.subFailure if isinstance(f.value, defer.FirstError) else f)

    # -- adding -----------------------------------------------------------------------

    def add(self, url: str, always: bool = False, detail: bool = False) -> defer.Deferred[bool]:
        return self._of(url).add(url, always, detail)

    def addmany(self, urls: Iterable[str], always: bool = False, detail: bool = False,
                parent: str | None = None) -> defer.Deferred[int]:
        if isinstance(urls, str):
            urls = (urls,)
        calls = [self.parts[p].addmany(group, always, detail, parent) for p, group in self._groups(urls).items()]
        return self._each(calls).addCallback(sum)

    def within_hops(self, parent: str, urls: Sequence[str]) -> defer.Deferred[list[str]]:
        return self._of(parent).within_hops(parent, urls)

    # -- popping and statuses ---------------------------------------------------------

    @defer.inlineCallbacks
    def pop(self, count: int, hub_percent: int = 50) -> Gen:
        """Ask partitions in turn, a few at a time (SHARE URLs each or more), those holding hubs first; while short
        of ``count``, ask again those that gave all they were asked, else the next ones, until every partition ran
        dry (or its master is down: it gives none).  The hub budget (``hub_percent`` of ``count``) is shared out."""
        turn = [self._order[(self._cursor + i) % self._count] for i in range(self._count)]
        self._cursor = (self._cursor + max(1, min(self._count, count // SHARE))) % self._count
        hubs_left = hub_quota(count, hub_percent)
        fresh = sorted(turn, key=lambda p: p not in self._hub_parts) if hubs_left else turn
        out: dict[str, bool] = {}
        full: list[int] = []  # partitions that gave all they were asked: they may have more
        while len(out) < count and (fresh or full):
            left = count - len(out)
            if full:
                group, full = full[:left], full[left:]
            else:
                size = max(1, min(left, left // SHARE))
                group, fresh = fresh[:size], fresh[size:]
            shares = spread(left, len(group))
            hubs = [min(n, h) for n, h in zip(shares, spread(hubs_left, len(group)))]
            answers = yield defer.gatherResults([self._pop_one(p, n, h) for p, n, h in zip(group, shares, hubs)],
                                                consumeErrors=True)
            for p, share, answer in zip(group, shares, answers):
                out.update(answer)
                hubs_left -= sum(answer.values())
                if len(answer) >= share:
                    full.append(p)
        return out

    def _pop_one(self, p: int, count: int, hubs: int) -> defer.Deferred[dict[str, bool]]:
        def skipped(failure: Failure) -> dict[str, bool]:
            failure.trap(RedisPoolError)
            log.debug("Pop skips partition {p}: {why}", p=p, why=failure.getErrorMessage())
            return {}

        return self.parts[p].pop(count, hubs=hubs).addErrback(skipped)

    def claim(self, url: str, by: str | None = None) -> defer.Deferred[bool]:
        return self._of(url).claim(url, by)

    def fetched(self, url: str, elapsed: float | None = None) -> defer.Deferred[None]:
        return self._of(url).fetched(url, elapsed)

    def set_status(self, url: str, status_code: int, reason: str | None = None) -> defer.Deferred[None]:
        return self._of(url).set_status(url, status_code, reason)

    def throttle(self, url: str, until: float, status_code: int, reason: str | None = None) -> defer.Deferred[None]:
        return self._of(url).throttle(url, until, status_code, reason)

    @defer.inlineCallbacks
    def set_statuses(self, statuses: Iterable[tuple[Any, ...]], checkpoint: tuple[str, int] | None = None) -> Gen:
        """Outcomes by partition.  A checkpoint goes in one script call with the statuses of one partition: the
        only partition of the statuses (all of one domain, say; none: partition 0), so that a crash cannot come
        between them (exactly once); else partition 0, with its statuses, before the others: a crash in between
        leaves URLs whose items are kept not done yet (fetched again: at least once), never done URLs whose items
        are cut.  A name's checkpoints may so lie in several partitions: the largest is the latest (checkpoint)."""
        groups = self._groups(statuses, lambda entry: status_parts(entry)[0])
        if checkpoint is not None:
            home = next(iter(groups)) if len(groups) == 1 else 0
            yield self.parts[home].set_statuses(groups.pop(home, []), checkpoint)
        yield self._each(self.parts[p].set_statuses(group) for p, group in groups.items())

    def validators(self, url: str) -> defer.Deferred[cg.Validators | None]:
        return self._of(url).validators(url)

    def checkpoint(self, name: str) -> defer.Deferred[int | None]:
        """The latest count recorded under ``name``: the largest of the partitions' (a file only grows)."""
        return self._checkpoints(name).addCallback(_latest)

    @defer.inlineCallbacks
    def drop_checkpoint(self, name: str) -> Gen:
        """Drop ``name`` in every partition, the largest count last: a crash in between leaves the latest."""
        counts = yield self._checkpoints(name)
        latest = _latest(counts)
        if latest is None:
            return
        yield self._each(self.parts[p].drop_checkpoint(name) for p, count in enumerate(counts)
                         if count is not None and count < latest)
        yield self._each(self.parts[p].drop_checkpoint(name) for p, count in enumerate(counts) if count == latest)

    def _checkpoints(self, name: str) -> defer.Deferred[list[int | None]]:
        """Each partition's count under ``name`` (None where it has none), in partition order."""
        return self._each(part.checkpoint(name) for part in self.parts)

    # -- the seen set, batches --------------------------------------------------------

    def seen_filter(self, urls: Iterable[str]) -> defer.Deferred[list[str]]:
        urls = list(urls)
        groups = self._groups(urls)
        d = self._each(self.parts[p].seen_filter(group) for p, group in groups.items())
        return d.addCallback(self._in_order, urls)

    def _in_order(self, answers: list[list[str]], urls: list[str]) -> list[str]:
        """The canonical URLs never seen, in the order of the URLs asked about."""
        fresh = {url for answer in answers for url in answer}
        order: dict[str, None] = {}
        for url in urls:
            u = parsed(url, self._max_url_length)
            if u is not None and u.url in fresh:
                order.setdefault(u.url, None)
        return list(order) + [url for url in fresh if url not in order]

    def seen_add(self, urls: Iterable[str]) -> defer.Deferred[int]:
        groups = self._groups(urls)
        return self._each(self.parts[p].seen_add(group) for p, group in groups.items()).addCallback(sum)

    def next_batch(self, count: int = 1) -> defer.Deferred[int]:
        return self.parts[0].next_batch(count)

    # -- hubs, hosts, seeds -----------------------------------------------------------

    def set_hubs(self, urls: Iterable[str], refresh_span: float) -> defer.Deferred[None]:
        """Every partition's hub set replaced (an empty one where it has none)."""
        groups = self._groups(urls)
        self._hub_parts = set(groups)
        calls = [part.set_hubs(groups.get(p, []), refresh_span) for p, part in enumerate(self.parts)]
        return self._each(calls).addCallback(lambda _: None)

    def set_host_delay(self, host: str, delay: float) -> defer.Deferred[None]:
        return self._by_host(host).set_host_delay(host, delay)

    def set_host_group(self, host: str, group: str) -> defer.Deferred[None]:
        """Recorded in the host's partition (its ``P group``), where its domain's pops would read it."""
        return self._by_host(host).set_host_group(host, group)

    def set_recrawl(self, pairs: Sequence[tuple[str, str]]) -> defer.Deferred[None]:
        return self._each([part.set_recrawl(pairs) for part in self.parts]).addCallback(lambda _: None)

    def set_site_hops(self, by_domain: Mapping[str, int]) -> defer.Deferred[None]:
        return self._each([part.set_site_hops(by_domain) for part in self.parts]).addCallback(lambda _: None)

    def set_politeness(self, rules: PoliteRules) -> defer.Deferred[None]:
        """The partitions' politeness (one object, as make_cluster_pool shares it) changed once; every partition's
        ``P conf`` rewritten."""
        shared = {id(part.politeness): part.politeness for part in self.parts}.values()
        dropped = {host for politeness in shared for host in politeness.configure(rules)}
        return self._each([part.write_conf(dropped) for part in self.parts]).addCallback(lambda _: None)

    def set_seeds(self, urls: Iterable[str]) -> defer.Deferred[int]:
        return self.parts[0].set_seeds(urls)

    def seed_urls(self) -> defer.Deferred[Sequence[str]]:
        return self.parts[0].seed_urls()

    # -- questions --------------------------------------------------------------------

    def size(self) -> defer.Deferred[int]:
        return self._each(part.size() for part in self.parts).addCallback(sum)

    def empty(self) -> defer.Deferred[bool]:
        return self.size().addCallback(lambda waiting: waiting == 0)

    def next_due(self) -> defer.Deferred[float | None]:
        """The soonest of the partitions' (one whose master is down has none)."""
        calls = [part.next_due().addErrback(lambda f: f.trap(RedisPoolError) and None) for part in self.parts]
        return self._each(calls).addCallback(lambda dues: min((d for d in dues if d is not None), default=None))

    def stats(self) -> defer.Deferred[dict[str, Any]]:
        return self._each(part.stats() for part in self.parts).addCallback(merged_stats)

    # -- seed 004 ---------------------------------------------------------------------

    @defer.inlineCallbacks
    def recrawl(self, cutoffs: Iterable[tuple[str, str, float]], limit: int) -> Gen:
        """Each partition's (domain, kind) sets in turn, up to ``limit`` pages in all."""
        groups: dict[int, list[tuple[str, str, float]]] = {}
        for cutoff in cutoffs:
            groups.setdefault(partition_of(cutoff[0], self._count), []).append(cutoff)
        queued = 0
        for p, group in sorted(groups.items()):
            if queued >= limit:
                break
            queued += yield self.parts[p].recrawl(group, limit - queued)
        return queued

    @defer.inlineCallbacks
    def recrawl_batched(self, cutoffs: Iterable[tuple[str, str, float]], limit: int) -> Gen:
        """Each partition's sets of batched pages in turn, up to ``limit`` pages in all."""
        groups: dict[int, list[tuple[str, str, float]]] = {}
        for cutoff in cutoffs:
            groups.setdefault(partition_of(cutoff[0], self._count), []).append(cutoff)
        taken: list[Recrawl] = []
        for p, group in sorted(groups.items()):
            if len(taken) >= limit:
                break
            taken += yield self.parts[p].recrawl_batched(group, limit - len(taken))
        return taken

    def batched_fetched(self, pages: Iterable[Recrawl]) -> defer.Deferred[int]:
        calls = [self.parts[p].batched_fetched(group) for p, group in self._groups(pages, lambda r: r.url).items()]
        return self._each(calls).addCallback(sum)

    def add_links(self, parent: str, urls: Sequence[str], anchors: Sequence[str] = (),
                  xpaths: Sequence[str] = ()) -> defer.Deferred[int]:
        rows = list(zip(urls, list(anchors) + [""] * (len(urls) - len(anchors)),
                        list(xpaths) + [""] * (len(urls) - len(xpaths))))
        calls = [self.parts[p].add_links(parent, [r[0] for r in group], [r[1] for r in group], [r[2] for r in group])
                 for p, group in self._groups(rows, lambda row: row[0]).items()]
        return self._each(calls).addCallback(sum)

    def claim_once(self, name: str, ttl: float) -> defer.Deferred[bool]:
        return self.parts[0].claim_once(name, ttl)

    def claim_content(self, digest: str, url: str) -> defer.Deferred[bool]:
        result: defer.Deferred[bool] = self.parts[partition_of(digest, self._count)].claim_content(digest, url)
        return result

    # -- admin ------------------------------------------------------------------------

    def why(self, url: str) -> defer.Deferred[dict[str, Any]]:
        return self._of(url).why(url)

    def hosts(self, limit: int = 50) -> defer.Deferred[list[dict[str, Any]]]:
        limit = host_limit(limit)
        d = self._each(part.hosts(limit) for part in self.parts)
        return d.addCallback(lambda answers: top_hosts([row for rows in answers for row in rows], limit))

    def export(self, chunk: int = 1000) -> ExportReader:
        return ChainedExport(part.export(chunk) for part in self.parts)

    def import_states(self, records: Iterable[Any]) -> defer.Deferred[dict[str, Any]]:
        records = list(records)
        groups, homeless = import_groups(records, self._count, self._max_url_length)
        calls = [self.parts[p].import_states([records[i] for i in indexes]).addCallback(lambda a, ix: (ix, a), indexes)
                 for p, indexes in groups.items()]
        return self._each(calls).addCallback(merged_imports, homeless, self._count)

    # -- closing ----------------------------------------------------------------------

    @defer.inlineCallbacks
    def close(self) -> Gen:
        """Send every partition's waiting statuses, then close the cluster's connections once they are answered."""
        yield self._each(part.close() for part in self.parts)
        yield self._cluster.close()


def make_cluster_pool(
    url: str, clock: IReactorTime, options: PoolOptions = PoolOptions(), *, prefix: str, namespace: str = "",
    seen_bucket_bits: int = 16, politeness: Politeness | None = None, connect_timeout: float = 10.0,
    reply_timeout: float = 30.0, status_wait: float = 0.0, durability: Durability = NONE,
) -> tuple[PartitionedPool, Callable[[], defer.Deferred[PartitionedPool]]]:
    """A pool on the Redis Cluster of ``redis+cluster://`` ``url``, not connected yet, and the call that connects it:
    ``options.config.redis_partitions`` partitions, each a RedisPool of ``options`` (as the single Redis pool's).

    Partition p's keys are ``prefix{tag}:...`` and its seed-002 names ``namespace{tag}:...`` (so neither may hold
    a ``{``)."""
    if "{" in prefix or "{" in namespace:
        raise ValueError("a Redis Cluster pool's prefix and namespace may not hold '{' (its hash tags follow them)")
    scripts = load_scripts()
    cluster = ClusterLink(parse_cluster_url(url), list(scripts.values()), clock, connect_timeout=connect_timeout,
                          reply_timeout=reply_timeout, durability=durability)
    known = KnownURLs(options.config.redis_known_urls)  # one for every partition
    failures = RecentFailures()  # the same
    share = turn_share(options.config.max_active_hosts, options.config.redis_partitions)
    parts = [RedisPool(SlotLink(cluster, f"{prefix}{{{tag}}}:"), scripts, clock, options, prefix=f"{prefix}{{{tag}}}:",
                       namespace=f"{namespace}{{{tag}}}:", seen_bucket_bits=seen_bucket_bits, politeness=politeness,
                       status_wait=status_wait, known=known, recent_failures=failures, turn_limit=share)
             for tag in partition_tags(options.config.redis_partitions)]
    pool = PartitionedPool(cluster, parts, prefix + "{partitions}", options.config.max_url_length)

    def opener() -> defer.Deferred[PartitionedPool]:
        def failed(failure: Failure) -> defer.Deferred[Any]:
            return cluster.drop_connections().addCallback(lambda _: failure)

        return cluster.open().addCallback(lambda _: pool.start()).addErrback(failed)

    return pool, opener


def turn_share(limit: int, partitions: int) -> int:
    """A partition's share of ``[pool] max_active_hosts`` (each partition benches and admits its own domains): the
    limit divided by the partitions, at least 1 (0: no limit)."""
    return max(1, limit // partitions) if limit > 0 else 0


def _latest(counts: list[int | None]) -> int | None:
    """The largest of the partitions' counts under one checkpoint name, or None if none has one."""
    return max((count for count in counts if count is not None), default=None)
