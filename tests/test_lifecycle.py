"""OrderedMultiService: start in order (waiting for a child's ready), stop in reverse, one at a time."""

from __future__ import annotations

from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred

from spiderd.core.lifecycle import InFlight, OrderedMultiService


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
