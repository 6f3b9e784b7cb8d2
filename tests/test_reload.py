"""SIGHUP reload: the file read and checked on a lane of its own, seeds and hubs applied, a bad file refused."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.logger import capturedLogs
from twisted.trial import unittest

from spiderd.config import settings as cfg
from spiderd.core.blocking import Lane
from spiderd.ops import reload as reload_module
from spiderd.fetch.extract import Rules
from spiderd.ops.liveconfig import LiveConfig
from spiderd.ops.reload import ReloadService


class Seeds:
    def __init__(self) -> None:
        self.loaded: list[tuple[list[str], list[str], float]] = []

    def load(self, seeds: list[str], hubs: list[str], span: float) -> None:
        self.loaded.append((list(seeds), list(hubs), span))


def write(path: Path, data_dir: Path, seeds: list[str], hubs: list[str]) -> None:
    path.write_text(f'[spiderd]\ndata_dir = "{data_dir}"\n[pool]\nseeds = {seeds!r}\nhubs = {hubs!r}\n'
                    .replace("'", '"'))


class ReloadTests(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = Path(self.mktemp())
        self.dir.mkdir()
        self.file = self.dir / "spiderd.toml"
        write(self.file, self.dir, ["http://a.example/"], [])
        self.seeds = Seeds()
        settings = cfg.load(str(self.file))
        self.live = LiveConfig(settings, reactor, Lane(reactor, "reload"), Rules(settings.sites),
                               seeds=self.seeds)  # type: ignore[arg-type]  # what SeedService gives a reload
        self.service = ReloadService(reactor, self.live, install=False)
        self.live.startService()
        self.addCleanup(self.live.stopService)
        self.service.startService()
        self.addCleanup(self.service.stopService)

    @defer.inlineCallbacks
    def test_new_seeds_and_hubs_are_applied_and_the_file_is_read_off_the_reactor(self) -> Any:
        threads: list[str] = []
        read = reload_module._read

        def spy(*args: Any) -> Any:
            threads.append(threading.current_thread().name)
            return read(*args)

        self.patch(reload_module, "_read", spy)
        write(self.file, self.dir, ["http://a.example/", "http://b.example/"], ["http://hub.example/"])
        ok = yield self.service.reload()
        self.assertTrue(ok)
        self.assertEqual(self.seeds.loaded[-1][:2], (["http://a.example/", "http://b.example/"],
                                                      ["http://hub.example/"]))
        self.assertEqual(len(threads), 1)
        self.assertNotEqual(threads[0], threading.main_thread().name)

    @defer.inlineCallbacks
    def test_a_bad_file_is_refused_and_nothing_changes(self) -> Any:
        self.file.write_text("[pool]\nseeds = 'not a list'\n")
        with capturedLogs() as events:
            ok = yield self.service.reload()
        self.assertFalse(ok)
        self.assertEqual(self.seeds.loaded, [])
        self.assertTrue(any("refused" in str(e.get("log_format", "")) for e in events))
        self.assertIn("seeds: expected", self.live.status()["error"])

    @defer.inlineCallbacks
    def test_no_file_is_no_change(self) -> Any:
        self.file.unlink()
        ok = yield self.service.reload()
        self.assertTrue(ok)
        self.assertEqual(self.seeds.loaded, [])
