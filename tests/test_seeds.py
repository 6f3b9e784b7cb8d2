"""Seeds and hubs into the pool; hubs added at run time survive a restart."""

from __future__ import annotations

import os
import tempfile
import threading
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.trial import unittest

from spiderd.core.blocking import Lane
from spiderd.frontier import seeds as seeds_module
from spiderd.frontier.pool import open_memory_pool
from spiderd.frontier.seeds import SeedService
from tests.helpers import TurnClock

CONFIGURED = ["http://h.example/news"]


class SeedServiceTests(unittest.TestCase):
    """A SeedService with a state file, restarted on a fresh pool."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.path = os.path.join(tempfile.mkdtemp(prefix="spiderd-seeds-"), "hubs-added.json")

    @defer.inlineCallbacks
    def started(self) -> Any:
        pool = open_memory_pool(self.clock)
        self.lane = Lane(reactor, "seeds-test")  # the service's; closed at the end whatever the test did
        self.addCleanup(self.lane.close)
        seeds = SeedService(pool, ["http://h.example/"], CONFIGURED, 600.0, state_path=self.path, lane=self.lane)
        yield seeds.startService()
        self.addCleanup(seeds.stopService)
        return seeds, pool

    @defer.inlineCallbacks
    def test_the_state_file_is_read_and_written_on_the_lane_given(self) -> Any:
        """The added hubs' file is read at start and written by add_hubs on the lane the service is given (the
        node's), not on the reactor's thread pool, and the lane stops with the service."""
        threads: list[str] = []

        def spy(real: Any) -> Any:
            def call(*args: Any) -> Any:
                threads.append(threading.current_thread().name)
                return real(*args)
            return call

        for name in ("_read_hubs", "write_atomically"):
            self.patch(seeds_module, name, spy(getattr(seeds_module, name)))
        seeds, _ = yield self.started()
        yield seeds.add_hubs(["http://h.example/sale"])
        self.assertEqual(len(threads), 2)
        self.assertTrue(all("spiderd-seeds-test" in t for t in threads), threads)
        yield seeds.stopService()
        self.assertFalse(self.lane.running)

    def test_a_state_file_needs_a_lane(self) -> None:
        """A SeedService with a state file and no lane to write it on is refused when it is made."""
        with self.assertRaises(ValueError):
            SeedService(open_memory_pool(self.clock), [], [], 600.0, state_path=self.path)

    @defer.inlineCallbacks
    def test_added_hubs_survive_a_restart(self) -> Any:
        """Hubs added through add_hubs are saved before it fires, and a restart hands them to the pool again."""
        seeds, _ = yield self.started()
        self.assertEqual((yield seeds.add_hubs(["http://h.example/sale", "http://h.example/sale"])), 1)
        self.assertEqual((yield seeds.add_hubs(CONFIGURED)), 0)
        again, pool = yield self.started()
        self.assertEqual(again.hubs, CONFIGURED + ["http://h.example/sale"])
        self.assertEqual((yield pool.stats())["hubs"], 2)

    @defer.inlineCallbacks
    def test_damaged_state_is_set_aside(self) -> Any:
        """An unreadable state file is logged, moved aside, and the node starts with the configured hubs."""
        with open(self.path, "w") as f:
            f.write('{"added_hubs": "not a list"}')
        seeds, pool = yield self.started()
        self.assertEqual(seeds.hubs, CONFIGURED)
        self.assertTrue(os.path.exists(self.path + ".bad"))
        self.assertEqual((yield pool.stats())["hubs"], 1)


class SlicedSeedsTests(unittest.TestCase):
    """Hundreds of thousands of seeds go into the pool a slice (seeds.SLICE) per reactor turn: the node answers
    and fetches meanwhile (one addmany of every seed held the reactor 1.2 s at 50,000 seeds, bench/hosts.py)."""

    def setUp(self) -> None:
        self.clock = TurnClock()
        self.pool = open_memory_pool(self.clock)
        self.urls = [f"http://h{i}.example/" for i in range(2 * seeds_module.SLICE + 7)]

    def waiting(self) -> int:
        return int(self.successResultOf(self.pool.stats())["waiting"])

    def test_the_seeds_go_in_a_slice_a_turn(self) -> None:
        """The first slice at the start, each next one a reactor turn later; ready fires with all of them in."""
        seeds = SeedService(self.pool, self.urls, [], 600.0, clock=self.clock)
        ready = seeds.startService()
        self.assertEqual(self.waiting(), seeds_module.SLICE)
        self.assertNoResult(ready)
        self.clock.advance(0)
        self.assertEqual(self.waiting(), 2 * seeds_module.SLICE)
        self.clock.advance(0)
        self.assertEqual(self.waiting(), len(self.urls))
        self.successResultOf(ready)

    def test_loaded_hooks_run_once_every_seed_is_in(self) -> None:
        """``loaded`` hooks (the daemon's calm_gc) run after the last slice, not before."""
        seeds = SeedService(self.pool, self.urls, [], 600.0, clock=self.clock)
        told: list[int] = []
        seeds.loaded.append(lambda: told.append(self.waiting()))
        seeds.startService()
        self.clock.advance(0)
        self.assertEqual(told, [])
        self.clock.advance(0)
        self.assertEqual(told, [len(self.urls)])

    def test_the_seed_timer_injects_a_slice_a_turn(self) -> None:
        """The cron firing queues the seeds again (always) the same way."""
        from datetime import timezone

        from spiderd.core.cron import parse
        from spiderd.frontier.scheduler import SeedTimer

        self.successResultOf(self.pool.set_seeds(self.urls))
        timer = SeedTimer(self.clock, self.pool, parse("*/10 * * * * ?", timezone.utc))
        timer.startService()
        self.addCleanup(timer.stopService)
        self.clock.advance(10)
        self.assertEqual(self.waiting(), seeds_module.SLICE)
        self.assertNoResult(timer.settled())
        self.clock.advance(0)
        self.assertEqual(self.waiting(), 2 * seeds_module.SLICE)
        self.clock.advance(0)
        self.assertEqual(self.waiting(), len(self.urls))
        self.successResultOf(timer.settled())
