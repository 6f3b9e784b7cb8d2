"""A frontier and a remote worker in two processes: the worker extracts with the frontier's rules (not its own, stale
copy), and a job keeps the version it was sent with while the frontier's rules change."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import shutil
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor, task
from twisted.trial import unittest
from twisted.web import server

from spiderd import tap
from spiderd.config import settings as cfg

from .helpers import node_toml
from .test_sites_live import Shop, call
from .test_twistd import ROOT, TWISTD

DEADLINE = 60.0  # seconds the other process may take to start or to ship a feed


def worker_toml(data_dir: Path) -> str:
    """A worker whose own copy of the site is stale: its title is the <h1>."""
    return node_toml({
        "spiderd": {"role": "worker", "data_dir": str(data_dir)}, "worker": {"port": 0}, "fetch": {"robots": False},
        "parse": {"workers": 1}, "store": {"url": "none"}, "api": {"port": 0}},
        [{"name": "shop", "allowed_hosts": ["127.0.0.1"], "detail_urls": [r"/item/\d+$"],
          "fields": {"title": "//h1/text()"}}])


def frontier_settings(data_dir: Path, root: str, worker: str) -> cfg.Settings:
    return cfg.from_dict({
        "spiderd": {"role": "frontier", "data_dir": str(data_dir), "log_interval": 3600},
        "pool": {"seeds": [root + "list"], "pending_threshold": 60},
        "fetch": {"robots": False, "timeout": 10},
        "parse": {"workers": 0},
        "store": {"url": "none"},
        "batch": {"targets": [worker], "size": 2, "flush_interval": 3600},
        "api": {"port": 0},
        "sites": [{"name": "shop", "allowed_hosts": ["127.0.0.1"], "list_urls": ["/list$"],
                   "detail_urls": [r"/item/\d+$"], "fields": {"title": "//h2/text()"}}],
    }, "<frontier>")


class FrontierAndWorkerTests(unittest.TestCase):
    timeout = 120

    def setUp(self) -> None:
        self.shop = Shop(items=2, held=(2,))
        self.port = reactor.listenTCP(0, server.Site(self.shop), interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.root = f"http://127.0.0.1:{self.port.getHost().port}/"
        self.dir = Path(tempfile.mkdtemp(prefix="spiderd-workers-"))
        self.addCleanup(shutil.rmtree, self.dir, True)

    def start_worker(self) -> None:
        config = self.dir / "worker.toml"
        config.write_text(worker_toml(self.dir / "worker"))
        self.log = self.dir / "worker.log"
        command = [sys.executable, "-c", TWISTD, "-n", "--pidfile=", "spiderd", "--config", str(config)]
        with open(self.log, "ab") as out:
            child = subprocess.Popen(command, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.addCleanup(self._stop, child)
        self.child = child

    def _stop(self, child: subprocess.Popen[bytes]) -> None:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGTERM)
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()

    @defer.inlineCallbacks
    def until(self, found: Any, what: str) -> Any:
        """Poll what the worker process writes (no timer of ours is waited for) until ``found()`` is true."""
        waited = 0.0
        while not (value := found()):
            self.assertIsNone(self.child.poll(), f"the worker exited: {self.log.read_text()[-3000:]}")
            self.assertLess(waited, DEADLINE, f"timed out waiting for {what}: {self.log.read_text()[-3000:]}")
            yield task.deferLater(reactor, 0.05, lambda: None)
            waited += 0.05
        return value

    def items(self) -> dict[str, str]:
        found = {}
        for path in (self.dir / "worker" / "feeds").glob("*.jl"):
            for line in path.read_text().splitlines():
                item = json.loads(line)
                found[item["url"].rpartition("/")[2]] = item["title"]
        return found

    @defer.inlineCallbacks
    def test_the_worker_extracts_with_the_frontiers_rules_and_a_job_keeps_its_version(self) -> Any:
        """Batch 1 (items 1, 2) carries the rules of the <h2>; item 2 is in flight when the frontier's title becomes
        the price: item 2 keeps the <h2> (its job's version), batch 2 (items 3, 4) takes the price."""
        self.start_worker()
        url = yield self.until(lambda: _worker_url(self.log), "the worker's API")
        settings = frontier_settings(self.dir / "frontier", self.root, url)
        cfg.check_data_dir(settings)
        top = tap.build(settings, reactor)
        top.startService()
        self.addCleanup(top.stopService)
        api = top.getServiceNamed("api")
        yield self.shop.arrived[2]  # the worker runs batch 1's job: item 2's fetch is in flight
        table = {"allowed_hosts": ["127.0.0.1"], "list_urls": ["/list$"], "detail_urls": [r"/item/\d+$"],
                 "fields": {"title": {"css": "p.price::text"}}}
        code, got = yield call(api, "PUT", "/api/sites/shop", table)
        self.assertEqual(code, 200, got)
        code, got = yield call(api, "POST", "/api/urls", {"urls": [self.root + "item/4", self.root + "item/5"],
                                                          "kind": "detail"})
        self.assertEqual((code, got["added"]), (200, 2), got)
        self.shop.release(2)
        items = yield self.until(lambda: (lambda i: i if len(i) == 4 else None)(self.items()), "four items")
        self.assertEqual(items, {"1": "Subtitle 1", "2": "Subtitle 2", "4": "4 EUR", "5": "5 EUR"})


def _worker_url(log: Path) -> str | None:
    if not log.exists():
        return None
    found = re.search(r"Worker API \(Scrapyd-compatible\) on (http://[^\s:]+:\d+/)", log.read_text(errors="replace"))
    return found.group(1) if found else None
