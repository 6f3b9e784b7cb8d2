"""The sites changed at run time, shared by every frontier node of a Redis fleet.

On a Redis pool, a change made through the sites API of any node is kept in Redis beside the pool: the hash
``<prefix>sites:overlay`` (a site's name -> its table as JSON, or ``null``: removed), the counter
``<prefix>sites:version`` (one more at each change) and a list per site, ``<prefix>sites:history:NAME`` (the site's
changes, newest last, at most HISTORY_PER_SITE entries).  Every node reads the counter every ``interval`` seconds; when it moved, the node
reads the overlay and, if it differs from its own, takes it (validated with its own file, as at a reload), so each
node's batches carry the same rules.  A change is written one site at a time (HSET), so two nodes changing two sites
at once lose neither.  A node that cannot reach Redis keeps its rules and tries again at the next turn.
On a ``redis+cluster://`` pool the same keys carry the hash tag ``{sites}`` (``<prefix>{sites}:overlay`` ...), so
that they share one slot, and go to its master through the cluster's routing client.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from spiderd.config.overlay import HISTORY_PER_SITE
from spiderd.config.sections import PoolSection

if TYPE_CHECKING:
    from spiderd.frontier.pool.redis.cluster import ClusterLink
    from spiderd.frontier.pool.redis.link import Link

log = Logger()

Overlay = dict[str, "dict[str, Any] | None"]


class SharedSites(Service):
    """Publishes this node's site changes to Redis and takes the fleet's (see the module's docstring)."""

    name = "shared-sites"  # type: ignore[assignment]  # Service declares it None

    def __init__(self, redis_url: str, prefix: str, clock: IReactorTime, interval: float = 2.0) -> None:
        self._link, self._cluster, base = _link(redis_url, prefix, clock)
        self._overlay, self._version, self._history = base + ":overlay", base + ":version", base + ":history"
        self._seen: Any = None  # the counter as last read
        self.take: Callable[[dict[str, dict[str, Any] | None]], Deferred[Any]] | None = None  # applies the fleet's
        self.current: Callable[[], Mapping[str, Any]] = dict  # this node's overlay
        self._turns = defer.DeferredLock()
        self._loop = LoopingCall(self.poll)
        self._loop.clock = clock
        self._interval = interval

    def startService(self) -> None:
        super().startService()
        self._loop.start(self._interval, now=True).addErrback(lambda f: log.failure("Shared sites", f))

    def stopService(self) -> Deferred[None]:
        super().stopService()
        if self._loop.running:
            self._loop.stop()
        return (self._cluster or self._link).close()

    def publish(self, name: str, table: dict[str, Any] | None) -> Deferred[None]:
        """Keep this node's change of ``name`` (None: removed) in Redis, for the other nodes' next turn."""
        d = self._link.execute("HSET", self._overlay, name, json.dumps(table))
        d.addCallback(lambda _: self._link.execute("INCR", self._version))
        return d.addCallback(lambda _: None)

    @defer.inlineCallbacks
    def record(self, entries: list[dict[str, Any]]) -> Any:
        """Append history entries (a reload's changes, or the API's), each to its site's list, trimmed to the newest
        HISTORY_PER_SITE."""
        for entry in entries:
            key = f"{self._history}:{entry.get('site')}"
            yield self._link.execute("RPUSH", key, json.dumps(entry, sort_keys=True))
            yield self._link.execute("LTRIM", key, -HISTORY_PER_SITE, -1)

    def history(self, name: str) -> Deferred[list[dict[str, Any]]]:
        """The fleet's changes of ``name``, oldest first."""
        d = self._link.execute("LRANGE", self._history + ":" + name, 0, -1)
        return d.addCallback(lambda lines: [e for e in map(_entry, lines) if e is not None and e.get("site") == name])

    def poll(self) -> Deferred[Any]:
        """One turn: read the counter; if it moved, read the overlay and take it when it differs from this node's.
        Turns go one after the other: a turn asked for while one is under way runs once that one has taken what it
        read (a caller then finds the fleet's sites in force)."""
        return self._turns.run(self._poll)

    @defer.inlineCallbacks
    def _poll(self) -> Any:
        try:
            version = yield self._link.execute("GET", self._version)
            if version is None or version == self._seen:
                return
            raw = yield self._link.execute("HGETALL", self._overlay)
            overlay = {_text(k): json.loads(_text(v)) for k, v in _pairs(raw)}
            self._seen = version
            if overlay != dict(self.current()) and self.take is not None:
                yield self.take(overlay)
        except Exception:  # a periodic call must not die of its own error (Redis away, a bad value)
            log.failure("Shared sites: reading the fleet's sites from Redis failed; trying again in {s}s",
                        s=self._interval)


def _link(redis_url: str, prefix: str, clock: IReactorTime) -> tuple[Link, ClusterLink | None, str]:
    """The link the keys go through, the cluster's client (None: one Redis) and the keys' common part (the Redis
    modules imported only when sites are shared)."""
    from spiderd.frontier.pool.redis.cluster import ClusterLink, SlotLink, is_cluster_url, parse_cluster_url
    from spiderd.frontier.pool.redis.link import RedisLink, parse_redis_url

    if not is_cluster_url(redis_url):
        return RedisLink(parse_redis_url(redis_url)), None, prefix + "sites"
    base = prefix + "{sites}"
    cluster = ClusterLink(parse_cluster_url(redis_url), (), clock)
    return SlotLink(cluster, base), cluster, base


def _pairs(raw: Any) -> list[tuple[Any, Any]]:
    """HGETALL's answer as pairs (txredisapi gives a dict, or a flat list)."""
    if isinstance(raw, dict):
        return list(raw.items())
    return list(zip(raw[::2], raw[1::2]))


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _entry(line: Any) -> dict[str, Any] | None:
    try:
        entry = json.loads(_text(line))
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


def shared_sites(pool: PoolSection, clock: IReactorTime) -> SharedSites | None:
    """The fleet's store of the sites for a ``[pool]`` section: on a Redis pool (one Redis or a cluster), else None."""
    if pool.backend != "redis":
        return None
    return SharedSites(pool.redis_url, pool.redis_prefix, clock)
