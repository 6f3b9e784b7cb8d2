"""The pool as a service: opened before the rest starts (connecting, for Redis, with retries), closed last."""

from __future__ import annotations

from typing import Any, Callable

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.logger import Logger

log = Logger()


class PoolService(Service):
    """Holds the pool; ``ready`` fires once it can be used (at once for LevelDB; when Redis answers)."""

    name = "pool"

    def __init__(self, pool: Any, clock: Any, opener: Callable[[], Deferred[Any]] | None = None,
                 where: str = "", retry_max: float = 30.0) -> None:
        self.pool = pool
        self.ready: Deferred[None] = Deferred()
        self._clock = clock
        self._opener = opener
        self._where = where
        self._retry_max = retry_max
        self._delay = 1.0
        self._retry: Any = None

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

    def _failed(self, failure: Any) -> None:
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
