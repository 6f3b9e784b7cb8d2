"""Blocking work off the reactor: one registry of thread lanes, injected into whatever needs threads.

A :class:`Lane` runs blocking calls on ``width`` threads of its own (width 1: one after the other, in
the order given, which the spools and the job store rely on).  Components call ``start`` when they
start and ``stop`` when they stop; a lane shared by several components runs while any of them does.
:class:`Blocking` (a service, first to start and last to stop) hands out the node's lanes by name and,
at its stop, stops any lane a component left running.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.threadpool import ThreadPool

log = Logger()
T = TypeVar("T")


class LaneStopped(RuntimeError):
    """Blocking work was asked of a lane that is not running."""


class Lane:
    """``width`` threads for blocking calls (1: in order); started and stopped by the components using it."""

    def __init__(self, reactor: IReactorFromThreads, name: str, width: int = 1) -> None:
        self._reactor = reactor
        self.name = name
        self.width = width
        self._pool: ThreadPool | None = None
        self._users = 0

    @property
    def running(self) -> bool:
        return self._pool is not None

    def start(self) -> None:
        """One more user: the threads run from the first ``start`` to the last ``stop``."""
        self._users += 1
        if self._pool is None:
            self._pool = ThreadPool(0, self.width, name=f"spiderd-{self.name}")
            self._pool.start()

    def stop(self) -> None:
        """One user fewer; the last one stops the threads (work already queued runs first)."""
        self._users = max(0, self._users - 1)
        if self._users == 0:
            self.close()

    def close(self) -> None:
        """Stop the threads whoever still uses them."""
        self._users = 0
        if self._pool is not None:
            pool, self._pool = self._pool, None
            pool.stop()

    def run(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> Deferred[T]:
        """Call ``function`` on the lane's threads; fires with its result (or fails with its error)."""
        if self._pool is None:
            return defer.fail(LaneStopped(f"the {self.name} lane is not running"))
        return deferToThreadPool(self._reactor, self._pool, function, *args, **kwargs)


class Blocking(Service):
    """The node's lanes by name (its name: ``blocking``)."""

    name = "blocking"  # type: ignore[assignment]  # Service declares it None

    def __init__(self, reactor: IReactorFromThreads) -> None:
        self._reactor = reactor
        self._lanes: dict[str, Lane] = {}

    def lane(self, name: str, width: int = 1) -> Lane:
        """The lane called ``name`` (made on first use; a later call gets the same lane)."""
        lane = self._lanes.get(name)
        if lane is None:
            lane = self._lanes[name] = Lane(self._reactor, name, width)
        return lane

    def stopService(self) -> None:
        super().stopService()
        for lane in self._lanes.values():
            if lane.running:
                log.warn("Blocking work: the {name} lane was still running at the stop; stopped now", name=lane.name)
                lane.close()
