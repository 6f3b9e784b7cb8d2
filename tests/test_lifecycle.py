"""OrderedMultiService: start in order (waiting for a child's ready), stop in reverse, one at a time; waiting
for in-flight work and for idleness."""

from __future__ import annotations

from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock

from spiderd.core.lifecycle import InFlight, OrderedMultiService, wait_idle


class Recorder(Service):
    def __init__(self, name: str, log: list[str], ready: Deferred[None] | None = None) -> None:
        self.setName(name)
        self.log = log
        self.stopped: Deferred[None] = Deferred()
        if ready is not None:
            self.ready = ready

    def startService(self) -> None:
        super().startService()
        self.log.append("start " + self.name)

    def stopService(self) -> Deferred[None]:
        super().stopService()
        self.log.append("stop " + self.name)
        return self.stopped


def test_start_waits_for_ready_and_stop_is_reversed_and_sequential() -> None:
    """b's ready holds c back; stop goes c, b, a, each after the previous one finished."""
    log: list[str] = []
    ready: Deferred[None] = Deferred()
    top = OrderedMultiService()
    a, b, c = Recorder("a", log), Recorder("b", log, ready), Recorder("c", log)
    for s in (a, b, c):
        s.setServiceParent(top)
    top.startService()
    assert log == ["start a", "start b"]
    ready.callback(None)
    assert log == ["start a", "start b", "start c"]
    done: list[Any] = []
    top.stopService().addCallback(done.append)
    assert log[-1] == "stop c"
    c.stopped.callback(None)
    assert log[-1] == "stop b"
    b.stopped.callback(None)
    assert log[-1] == "stop a" and not done
    a.stopped.callback(None)
    assert done


def test_children_never_started_are_not_stopped() -> None:
    """Stopping while a child's ready has not fired stops only the started ones."""
    log: list[str] = []
    top = OrderedMultiService()
    a, b = Recorder("a", log, Deferred()), Recorder("b", log)
    a.stopped.callback(None)
    for s in (a, b):
        s.setServiceParent(top)
    top.startService()
    top.stopService()
    assert log == ["start a", "stop a"]


def test_inflight_waits_for_everything() -> None:
    """InFlight.wait fires once every tracked Deferred, including ones added meanwhile, has fired."""
    tracker = InFlight()
    first: Deferred[None] = Deferred()
    second: Deferred[None] = Deferred()
    tracker.track(first)
    waited: list[Any] = []
    tracker.wait().addCallback(waited.append)
    tracker.track(second)
    first.callback(None)
    assert not waited
    second.callback(None)
    assert waited and len(tracker) == 0


class _Work:
    """Pieces of work that end one at a time; idle once all have."""

    def __init__(self, count: int) -> None:
        self.tracker = InFlight()
        self.pieces = [self.tracker.track(Deferred()) for _ in range(count)]

    def idle(self) -> bool:
        return len(self.tracker) == 0


def test_wait_idle_ends_with_the_last_piece_of_work_not_a_timer() -> None:
    """wait_idle fires as the last piece of work ends: no clock time passes and no timer is left behind."""
    clock = Clock()
    work = _Work(3)
    done: list[Any] = []
    wait_idle(clock, work.idle, work.tracker.wait, interval=0.5).addCallback(done.append)
    for piece in work.pieces[:2]:
        piece.callback(None)
        assert not done
    work.pieces[2].callback("a result the waiter must not take")
    assert done and clock.seconds() == 0 and not clock.getDelayedCalls()
    assert work.pieces[2].result == "a result the waiter must not take"


def test_wait_idle_falls_back_to_the_interval_only_when_nothing_is_under_way() -> None:
    """Not idle with nothing in flight (a retry timer pending): checked again after ``interval``, and never
    by looping on Deferreds that fired long ago (that once spun the reactor)."""
    clock = Clock()
    busy = [True]
    done: list[Any] = []
    wait_idle(clock, lambda: not busy[0], lambda: succeed(None), interval=0.5).addCallback(done.append)
    assert not done and len(clock.getDelayedCalls()) == 1
    clock.advance(0.5)
    assert not done
    busy[0] = False
    clock.advance(0.5)
    assert done


def test_a_child_that_fails_to_get_ready_is_a_start_failure() -> None:
    """A ``ready`` that fails (a spool that cannot be read) stops the start as a failing startService does:
    on_start_failure hears of it and the children after it never start."""
    log: list[str] = []
    failures: list[tuple[str, str]] = []
    ready: Deferred[None] = Deferred()
    top = OrderedMultiService(lambda child, error: failures.append((child.name, str(error))))
    for s in (Recorder("spool", log, ready), Recorder("after", log)):
        s.setServiceParent(top)
    top.startService()
    ready.errback(OSError("queue: permission denied"))
    assert log == ["start spool"]
    assert failures == [("spool", "queue: permission denied")]
