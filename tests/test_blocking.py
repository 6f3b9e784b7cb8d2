"""Lanes of blocking work (spiderd.core.blocking): in order, shared, refused once stopped."""

from __future__ import annotations

import threading
from typing import Any

from twisted.internet import defer, reactor
from twisted.trial import unittest

from spiderd.core.blocking import Blocking, Lane, LaneStopped


class LaneTests(unittest.TestCase):
    """Real threads, the real reactor."""

    @defer.inlineCallbacks
    def test_one_thread_in_order_off_the_reactor(self) -> Any:
        """A lane of width 1 runs calls one after the other, in the order given, never on the reactor thread."""
        lane = Lane(reactor, "test")
        lane.start()
        self.addCleanup(lane.stop)
        seen: list[tuple[int, bool]] = []
        main = threading.current_thread()
        yield defer.gatherResults([lane.run(lambda i=i: seen.append((i, threading.current_thread() is main)))
                                   for i in range(50)])
        self.assertEqual(seen, [(i, False) for i in range(50)])

    @defer.inlineCallbacks
    def test_shared_lane_runs_while_any_user_does(self) -> Any:
        """Two components start the same lane: it stops with the last one; then work is refused."""
        blocking = Blocking(reactor)
        lane = blocking.lane("spool")
        self.assertIs(blocking.lane("spool"), lane)
        lane.start()
        lane.start()
        lane.stop()
        self.assertEqual((yield lane.run(lambda: 7)), 7)
        lane.stop()
        self.assertFalse(lane.running)
        yield self.assertFailure(lane.run(lambda: 7), LaneStopped)

    def test_blocking_stops_what_was_left_running(self) -> None:
        """The registry's stop closes a lane a component forgot."""
        blocking = Blocking(reactor)
        blocking.startService()
        lane = blocking.lane("forgotten", 2)
        lane.start()
        blocking.stopService()
        self.assertFalse(lane.running)
