"""Seeds and hubs into the pool; hubs added at run time survive a restart."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest

from spiderd.frontier.pool import open_memory_pool
from spiderd.frontier.seeds import SeedService

CONFIGURED = ["http://h.example/news"]


class SeedServiceTests(unittest.TestCase):
    """A SeedService with a state file, restarted on a fresh pool."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.path = os.path.join(tempfile.mkdtemp(prefix="spiderd-seeds-"), "hubs-added.json")

    @defer.inlineCallbacks
    def started(self) -> Any:
        pool = open_memory_pool(self.clock)
        seeds = SeedService(pool, ["http://h.example/"], CONFIGURED, 600.0, state_path=self.path)
        yield seeds.startService()
        self.addCleanup(seeds.stopService)
        return seeds, pool

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
