"""Service helpers: ordered start/stop, and tracking of in-flight Deferreds."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol, TypeVar

from twisted.application.service import IService, MultiService, Service
from twisted.internet import defer, task
from twisted.internet.defer import Deferred
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core.reactors import INodeReactor

log = Logger()
S = TypeVar("S", bound="Service | None")  # a service, or None


EXPECTED_START_ERRORS = (OSError, CannotListenError, ValueError)  # a port in use, a directory that cannot open


class OrderedMultiService(MultiService):
    """Starts children in the order added and stops them one at a time, in reverse.

    Twisted's MultiService stops children concurrently; spiderd's shutdown
    contract needs the crawler drained before the stores it writes to close.
    A child with a ``ready`` Deferred (the Redis pool, connecting) holds back
    the children after it until it fires; children never started are not stopped.
    """

    on_start_failure: Callable[[Any, BaseException], object] | None = None  # (service, exception): a child cannot start
    _failed = False

    def __init__(self, on_start_failure: Callable[[Any, BaseException], object] | None = None) -> None:
        super().__init__()
        self.on_start_failure = on_start_failure

    def add(self, service: S) -> S:
        """``service`` (unless None: a part the configuration has not) as the next child; returns it."""
        if service is not None:
            service.setServiceParent(self)
        return service

    def privilegedStartService(self) -> None:
        """Children that bind their ports early (twistd calls this first) fail the same way as at start."""
        Service.privilegedStartService(self)
        for child in self:
            try:
                child.privilegedStartService()
            except Exception as e:
                self._start_failed(child, e)
                return

    def startService(self) -> None:
        Service.startService(self)
        if not self._failed:
            self._start_from(0)

    def _start_failed(self, child: IService, error: BaseException, failure: Failure | None = None) -> None:
        self._failed = True
        if isinstance(error, EXPECTED_START_ERRORS) and self.on_start_failure is not None:
            log.debug("{service} could not start: {error}", service=child.name or child, error=error)
        else:  # a bug, or no one to say it in one line: the whole traceback
            log.failure("{service} could not start", failure, service=child.name or child)
        if self.on_start_failure is not None:
            self.on_start_failure(child, error)

    def _ready(self, _: object, index: int) -> None:
        """Service ``index`` is ready: start the ones after it."""
        self._start_from(index + 1)

    def _not_ready(self, failure: Failure, child: IService) -> None:
        """``child`` failed to get ready (a spool it cannot read): as if it could not start."""
        self._start_failed(child, failure.value, failure)

    def _start_from(self, first: int) -> None:
        children = list(self)
        for index in range(first, len(children)):
            if not self.running:
                return
            child = children[index]
            try:
                child.startService()
            except Exception as e:  # a port in use, a store that cannot open: nothing more starts
                self._start_failed(child, e)
                return
            ready = getattr(child, "ready", None)
            if isinstance(ready, Deferred) and not ready.called:
                ready.addCallbacks(self._ready, self._not_ready, callbackArgs=(index,), errbackArgs=(child,))
                return

    @defer.inlineCallbacks
    def stopService(self) -> Any:
        self.running = 0
        for service in reversed(list(self)):
            if not service.running:
                continue
            try:
                yield defer.maybeDeferred(service.stopService)
            except Exception:
                log.failure("Error stopping {service}", service=service)


class InFlight:
    """Tracks Deferreds so a stop can wait for every one of them (buildbot's DeferWaiter)."""

    def __init__(self) -> None:
        self._waiting: set[Deferred[Any]] = set()

    def __len__(self) -> int:
        return len(self._waiting)

    def track(self, d: Deferred[Any]) -> Deferred[Any]:
        """Remember ``d`` until it fires; returns ``d``."""
        self._waiting.add(d)

        def forget(result: Any) -> Any:
            self._waiting.discard(d)
            return result

        d.addBoth(forget)
        return d

    def wait(self) -> Deferred[None]:
        """Fires when everything tracked now (and added meanwhile) has fired."""
        if not self._waiting:
            return defer.succeed(None)
        d = defer.DeferredList([_shadow(x) for x in self._waiting])
        return d.addCallback(lambda _: self.wait())

    def cancel_all(self) -> None:
        """Cancel everything still in flight."""
        for d in list(self._waiting):
            d.cancel()


def _shadow(d: Deferred[Any]) -> Deferred[None]:
    """A Deferred that fires when ``d`` does, without touching ``d``'s result."""
    shadow: Deferred[None] = Deferred()

    def fire(result: Any) -> Any:
        if not shadow.called:
            shadow.callback(None)
        return result

    d.addBoth(fire)
    return shadow


def calm_repeated_stop_signals(reactor: INodeReactor) -> None:
    """Once the shutdown began, a second SIGTERM or Ctrl-C says so in one line instead of a CRITICAL
    ``ReactorNotRunning`` traceback (the reactor's own handler calls ``stop`` again)."""

    def again(signum: int, frame: FrameType | None) -> None:
        reactor.callFromThread(log.info, "Signal {signal} again: already stopping, waiting for the drain to finish",
                               signal=signal.Signals(signum).name)

    def install() -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, again)

    reactor.addSystemEventTrigger("before", "shutdown", install)


def exit_on_start_failure(reactor: INodeReactor) -> Callable[[Any, BaseException], None]:
    """An ``on_start_failure`` for a daemon: one critical line naming the service, stop what started, exit 1."""

    def fatal(service: Any, error: BaseException) -> None:
        log.critical("spiderd cannot start: {service}: {error}; stopping", service=service.name, error=error)
        reactor.addSystemEventTrigger("after", "shutdown", _exit_1)
        reactor.callLater(0, reactor.stop)

    return fatal


def _exit_1() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def wait_until(clock: IReactorTime, predicate: Callable[[], object], interval: float = 0.5) -> Deferred[None]:
    """Fires once ``predicate()`` is true, checking every ``interval`` seconds on ``clock``."""
    d: Deferred[None] = Deferred()

    def check() -> None:
        if predicate():
            d.callback(None)
        else:
            clock.callLater(interval, check)

    check()
    return d


def settled(ds: list[Deferred[Any]]) -> Deferred[None]:
    """Fires once every one of ``ds`` has fired, leaving their results alone."""
    return defer.DeferredList([_shadow(d) for d in ds]).addCallback(lambda _: None)


@defer.inlineCallbacks
def wait_idle(clock: IReactorTime, idle: Callable[[], bool], *activity: Callable[[], Deferred[Any]],
              interval: float = 0.5) -> Any:
    """Fires once ``idle()`` is true, checked again each time the work under way settles.

    Each of ``activity`` returns a Deferred that fires when the work it runs now
    is over; ``idle()`` is checked as soon as all of them have, so the wait
    ends with the last piece of work, not at the next tick of a timer.  Only
    when nothing is under way and yet ``idle()`` is false (a retry timer is
    pending) is it checked again after ``interval`` seconds.
    """
    while not idle():
        waits = [d for d in (start() for start in activity) if not d.called]
        yield settled(waits) if waits else task.deferLater(clock, interval, lambda: None)


class Settles(Protocol):
    """Work that can say whether it is idle, and when what it runs now is over."""

    def idle(self) -> bool: ...

    def settled(self) -> Deferred[None]: ...


class Flushes(Settles, Protocol):
    """Work that holds a part of what it sends until flushed (the batcher)."""

    def flush(self) -> Deferred[None]: ...


def stop_when_idle(reactor: INodeReactor, sender: Flushes | None, *others: Settles | None) -> Any:
    """Stop the reactor, after ``sender`` (if any) flushed and it and ``others`` (those not None) are idle."""
    if sender is None:
        return reactor.stop()
    parts = [sender, *(part for part in others if part is not None)]
    d = sender.flush().addCallback(lambda _: wait_idle(reactor, lambda: all(part.idle() for part in parts),
                                                       *(part.settled for part in parts)))
    return d.addCallback(lambda _: reactor.stop())


class Closer(Service):
    """Calls ``close()`` (which may return a Deferred) when stopped: for things opened by the wiring."""

    def __init__(self, name: str, close: Callable[[], object]) -> None:
        self.setName(name)
        self._close = close

    def stopService(self) -> Any:
        super().stopService()
        return defer.maybeDeferred(self._close)
