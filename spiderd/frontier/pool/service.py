"""The pool as a service: opened before the rest starts (connecting, for Redis, with retries), closed last.

:func:`pool_service` opens the backend that the ``[pool]`` section names (``backend``). The Redis backend's
package is imported only when that backend is asked for (about 9 ms of a node's start otherwise); it imports
txredisapi (which installs the default reactor) only when a connection is opened (see
:mod:`spiderd.frontier.pool.redis.link`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.config.convert import ConfigError
from spiderd.config.sections import FetchSection, PoolSection
from spiderd.contracts.pool import IURLPool
from spiderd.core.rules import Site
from spiderd.core.secrets import redact
from spiderd.core.retry import Backoff
from spiderd.engine.politeness import Politeness
from spiderd.engine.subrequests import HostTurns
from spiderd.frontier.pool import open_leveldb_pool, open_memory_pool
from spiderd.frontier.pool.hops import HopLimits
from spiderd.frontier.pool.options import PoolOptions
from spiderd.frontier.scheduler import RecrawlPolicy

log = Logger()


class PoolService(Service):
    """Holds the pool; ``ready`` fires once it can be used (at once for LevelDB; when Redis answers)."""

    name = "pool"  # type: ignore[assignment]  # Service declares it None

    def __init__(self, pool: IURLPool, clock: IReactorTime, opener: Callable[[], Deferred[Any]] | None = None,
                 where: str = "", retry_max: float = 30.0, turns: HostTurns | None = None) -> None:
        """``turns``: the pool's politeness, where rendered pages' sub-requests take their turns."""
        self.pool = pool
        self.turns = turns
        self.ready: Deferred[None] = Deferred()
        self._clock = clock
        self._opener = opener
        self._where = where
        self._backoff = Backoff(1.0, retry_max)
        self._failures = 0
        self._retry: IDelayedCall | None = None

    def startService(self) -> None:
        super().startService()
        if self._opener is None:
            self.ready.callback(None)
        else:
            self._open()

    def _open(self) -> None:
        assert self._opener is not None
        self._opener().addCallbacks(self._opened, self._failed)

    def _opened(self, _: Any) -> None:
        log.info("Pool ready: {where}", where=self._where)
        if not self.ready.called:
            self.ready.callback(None)

    def _failed(self, failure: Failure) -> None:
        if not self.running:
            return
        self._failures += 1
        delay = self._backoff.delay(self._failures)
        log.error("Cannot open the pool at {where}: {why}; retrying in {delay:.0f}s",
                  where=self._where, why=failure.getErrorMessage(), delay=delay)
        self._retry = self._clock.callLater(delay, self._open)

    def stopService(self) -> Any:
        super().stopService()
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        return defer.maybeDeferred(self.pool.close)


def pool_service(config: PoolSection, fetching: FetchSection, sites: tuple[Site, ...], reactor: IReactorTime, *,
                 path: str, source: str = "<config>") -> PoolService:
    """The pool that ``[pool] backend`` names, as a service (LevelDB's at ``path``: a LevelDB pool that cannot open
    is a ConfigError naming ``spiderd.data_dir`` of ``source``), with its politeness's turns for sub-requests: the
    host slots the embedded pools pop through; with Redis, whose host slots live in Redis, this node's own count."""
    options, politeness = pool_options(config, fetching, sites), pool_politeness(fetching)
    if config.backend == "redis":
        from spiderd.frontier.pool.redis import make_redis_pool

        pool, opener = make_redis_pool(config.redis_url, reactor, prefix=config.redis_prefix,
                                       namespace=config.redis_namespace, seen_bucket_bits=config.redis_seen_bucket_bits,
                                       options=options, politeness=politeness, status_wait=config.redis_status_wait,
                                       durability=config.redis_durability)
        return PoolService(pool, reactor, opener, where=redact(config.redis_url), turns=HostTurns(reactor, politeness))
    if config.backend == "memory":
        kv = open_memory_pool(reactor, options, politeness=politeness)
        return PoolService(kv, reactor, where="memory", turns=HostTurns(reactor, politeness, kv.state.slot))
    try:
        kv = open_leveldb_pool(path, reactor, options, politeness=politeness)
    except Exception as e:  # noqa: BLE001  # leveldb.IOError when another spiderd holds the lock
        raise ConfigError(f"{source}: spiderd.data_dir: cannot open the pool: {e}") from None
    return PoolService(kv, reactor, where=path, turns=HostTurns(reactor, politeness, kv.state.slot))


def pool_options(config: PoolSection, fetching: FetchSection, sites: tuple[Site, ...] = ()) -> PoolOptions:
    """Every backend's options: ``[pool]``; the throttling and conditional GET of ``[fetch]``; the recrawl
    intervals and hop limits of the sites."""
    return PoolOptions(config, max_throttles=fetching.max_throttles, conditional_get=fetching.conditional_get,
                       per_ip=fetching.politeness == "ip", recrawl=tuple(RecrawlPolicy.from_sites(sites).pairs()),
                       site_hops=site_hops(sites))


def site_hops(sites: tuple[Site, ...]) -> dict[str, int]:
    """The sites' own hop limits (``max_hops`` > 0) by the registered domains of their allowed hosts."""
    return HopLimits.from_sites(0, sites).by_domain


def pool_politeness(fetching: FetchSection) -> Politeness:
    """The per-host turns of ``[fetch]``: delay, concurrency, the adaptive rule, and each ``[fetch.hosts]`` table's."""
    return Politeness.of(fetching.polite)
