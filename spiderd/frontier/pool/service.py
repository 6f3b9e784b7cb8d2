"""The pool as a service: opened before the rest starts (connecting, for Redis, with retries), closed last.

:func:`pool_service` opens the backend that the settings name (``pool.backend``). The Redis backend's
package is imported here at import time: it imports txredisapi (which installs the default reactor) only
when a connection is opened (see :mod:`spiderd.frontier.pool.redis.link`).
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

from spiderd.config.settings import ConfigError, Settings
from spiderd.core.rules import host_adaptive
from spiderd.core.secrets import redact
from spiderd.frontier.interfaces import IURLPool
from spiderd.frontier.politeness import Politeness
from spiderd.frontier.pool import open_leveldb_pool, open_memory_pool
from spiderd.frontier.pool.hops import HopLimits
from spiderd.frontier.pool.redis import make_redis_pool
from spiderd.frontier.scheduler import RecrawlPolicy

log = Logger()


class PoolService(Service):
    """Holds the pool; ``ready`` fires once it can be used (at once for LevelDB; when Redis answers)."""

    name = "pool"  # type: ignore[assignment]  # Service declares it None

    def __init__(self, pool: IURLPool, clock: IReactorTime, opener: Callable[[], Deferred[Any]] | None = None,
                 where: str = "", retry_max: float = 30.0) -> None:
        self.pool = pool
        self.ready: Deferred[None] = Deferred()
        self._clock = clock
        self._opener = opener
        self._where = where
        self._retry_max = retry_max
        self._delay = 1.0
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
        log.error("Cannot open the pool at {where}: {why}; retrying in {delay:.0f}s",
                  where=self._where, why=failure.getErrorMessage(), delay=self._delay)
        self._retry = self._clock.callLater(self._delay, self._open)
        self._delay = min(self._delay * 2, self._retry_max)

    def stopService(self) -> Any:
        super().stopService()
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        return defer.maybeDeferred(self.pool.close)


def pool_service(settings: Settings, reactor: IReactorTime) -> PoolService:
    """The pool that ``pool.backend`` names, as a service (a LevelDB pool that cannot open is a ConfigError)."""
    options = pool_options(settings)
    if settings.pool_backend == "redis":
        pool, opener = make_redis_pool(settings.redis_url, reactor, prefix=settings.redis_prefix,
                                       namespace=settings.redis_namespace,
                                       seen_bucket_bits=settings.redis_seen_bucket_bits,
                                       partitions=settings.redis_partitions, **options)
        return PoolService(pool, reactor, opener, where=redact(settings.redis_url))
    if settings.pool_backend == "memory":
        return PoolService(open_memory_pool(reactor, **options), reactor, where="memory")
    try:
        return PoolService(open_leveldb_pool(settings.path("pool"), reactor, **options), reactor,
                           where=settings.path("pool"))
    except Exception as e:  # noqa: BLE001  # leveldb.IOError when another spiderd holds the lock
        raise ConfigError(f"{settings.source}: spiderd.data_dir: cannot open the pool: {e}") from None


def pool_options(settings: Settings) -> dict[str, Any]:
    """Every backend's options (KVPool's): politeness, thresholds, limits, recrawl intervals, the linkbase, splits."""
    overrides = {host: (rule.delay, rule.concurrency) for host, rule in settings.host_rules.items()}
    adaptive = host_adaptive(settings.host_rules, settings.adaptive)
    return {
        "politeness": Politeness(settings.per_host_delay, settings.per_host_concurrency, overrides,
                                 settings.adaptive, adaptive),
        "failure_threshold": settings.failure_threshold,
        "pending_threshold": settings.pending_threshold,
        "max_url_length": settings.max_url_length,
        "max_urls_per_host": settings.max_urls_per_host,
        "recrawl": RecrawlPolicy.from_sites(settings.sites).pairs(),
        "linkbase": settings.linkbase,
        "linkbase_max": settings.linkbase_max,
        "list_ratio": settings.list_ratio,
        "detail_ratio": settings.detail_ratio,
        "max_throttles": settings.max_throttles,
        "conditional_get": settings.conditional_get,
        "max_hops": settings.max_hops,
        "site_hops": HopLimits.from_sites(0, settings.sites).by_domain,
    }
