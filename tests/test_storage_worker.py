"""The worker's own files on a full disk (issue 35.1): its feed spool and its ledger of what was itemized when a job
ships, and its job files and ledger of accepted jobs when a batch is scheduled.  A job whose feed cannot be handed
over waits for the storage gate and ships once (it never ends with its items lost); a batch that cannot be made
durable is refused with 503 and no traceback, and taken once space returns."""

from __future__ import annotations

import json
import os
from typing import Any

from twisted.internet import defer, reactor, task
from twisted.internet.task import Clock
from twisted.logger import capturedLogs

from spiderd.core.storage import StorageGate
from spiderd.core.urls import fingerprint
from spiderd.engine.steps import PageSteps
from spiderd.feed.shipper import FeedShipper
from spiderd.worker import WorkerService

from .test_storage import fill, mount_tmpfs
from .test_worker import WorkerTestBase



class WorkerFilesTests(WorkerTestBase):
    """A worker whose spool queue, itemized ledger or whole worker directory is a small tmpfs."""

    def setUp(self) -> None:
        super().setUp()
        self.urls_ok = sorted(self.spec.expected().details_ok)[:6]  # pages that make an item
        self.gate.open()
        self.clock = Clock()  # the storage gate's
        self.storage = StorageGate(self.clock)

    def start(self, shipper: FeedShipper | None = None) -> WorkerService:
        parser = self.parser()
        service = WorkerService(reactor, self.config(), self.fetcher, parser, self.store, shipper or self.shipper,
                                clock=self.clock, steps=PageSteps(reactor, parser, self.store, gate=self.storage))
        service.startService()
        self.addCleanup(lambda: service.stopService() if service.running else None)
        self.api = "http://%s:%d" % service.address
        return service

    @defer.inlineCallbacks
    def started(self, shipper: FeedShipper | None = None) -> Any:
        """A worker, once its ledgers are open and its jobs loaded."""
        service = self.start(shipper)
        yield service.ready
        return service

    def job(self, batch: str) -> Any:
        return self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                             ("batch", batch), ("setting", self.urls(*self.urls_ok)))

    @defer.inlineCallbacks
    def until(self, predicate: Any, turns: int = 3000) -> Any:
        """Turn the real reactor, the gate's clock a second a turn, until ``predicate()``."""
        for _ in range(turns):
            if predicate():
                return
            self.clock.advance(1.0)
            yield task.deferLater(reactor, 0.01, lambda: None)
        raise AssertionError("timed out waiting")

    def tmpfs_at(self, path: str, size: str = "1m") -> str:
        """A tmpfs of ``size`` where ``path`` is (a link to it); its mount point."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        mount = mount_tmpfs(self, size)
        os.symlink(mount, path)
        return mount

    @defer.inlineCallbacks
    def held_job(self, service: WorkerService, mount: str, batch: str, sink: str) -> Any:
        """Fill ``mount``, schedule a job; once ``sink`` is blocked the job is still running; free the space: the
        job as it ended."""
        filler = fill(self, mount)
        job = yield self.job(batch)
        yield self.until(lambda: sink in self.storage.blocks)
        self.assertEqual(service.runner.jobs[job].state, "running")
        os.unlink(filler)
        done = service.runner.when_done(job)
        yield self.until(lambda: done.called)
        finished = yield done
        yield service.runner._execution._shipper.settled()
        self.assertEqual((finished.state, finished.error), ("finished", None))
        return finished

    @defer.inlineCallbacks
    def test_a_full_spool_holds_the_job_until_it_ships(self) -> Any:
        """The spool's queue is full when the job's feed is handed over: the job stays running (not finished
        with its items lost), the gate says why, few lines are logged; once space returns the feed ships once."""
        spool = os.path.join(self.tmp, "spool")
        mount = self.tmpfs_at(os.path.join(spool, "queue"))
        shipper = FeedShipper(reactor, spool, stop_timeout=5.0)
        shipper.startService()
        self.addCleanup(shipper.stopService)
        service = yield self.started(shipper)
        with capturedLogs() as events:
            yield self.held_job(service, mount, "1", "spool")
        self.assertEqual(sorted(i["url"] for i in self.feed_items("1")), sorted(self.root + u for u in self.urls_ok))
        self.assertEqual(self.storage.blocks, {})
        ours = [e["log_format"] for e in events if e.get("log_namespace", "").startswith("spiderd")
                and e["log_level"].name in ("warn", "error", "critical")]
        self.assertLess(len(ours), 5, ours)

    @defer.inlineCallbacks
    def test_a_full_ledger_holds_the_job_until_its_pages_are_recorded(self) -> Any:
        """The ledger of itemized pages cannot take the job's records when it ships: the job waits (it does not
        end with an error), and once space returns its pages are recorded (a redirect to one of them makes no
        second item) and it finishes."""
        mount = self.tmpfs_at(os.path.join(self.data, "worker", "itemized"))
        service = yield self.started()
        yield self.held_job(service, mount, "2", "worker")
        self.assertEqual(len(self.feed_items("2")), len(self.urls_ok))
        for url in self.urls_ok:
            self.assertIsNotNone(service.runner._itemized._recent(fingerprint(self.root + url)), url)

    @defer.inlineCallbacks
    def test_a_batch_on_a_full_disk_is_refused_then_taken(self) -> Any:
        """schedule.json on a full disk answers 503 saying so (no traceback) and blocks the storage gate; once
        space returns the same batch is accepted, runs and ships, and the gate is open again."""
        worker_dir = os.path.join(self.data, "worker")
        mount = self.tmpfs_at(worker_dir, "2m")
        service = yield self.started()
        filler = fill(self, mount)
        pairs = [("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()), ("batch", "3"),
                 ("setting", self.urls(*self.urls_ok)), ("jobid", "batch-3")]
        with capturedLogs() as events:
            code, answer, _ = yield self.call("POST", "/schedule.json", pairs)
        self.assertEqual((code, answer["status"]), (503, "error"))
        self.assertIn("cannot write its files now (disk full)", answer["message"])
        self.assertIn("worker", self.storage.blocks)
        self.assertFalse([e for e in events if e.get("log_failure") is not None])
        os.unlink(filler)
        code, answer, _ = yield self.call("POST", "/schedule.json", pairs)
        self.assertEqual((code, answer["status"]), (200, "ok"), answer)
        done = service.runner.when_done("batch-3")
        yield self.until(lambda: done.called)
        finished = yield done
        yield self.shipper.settled()
        self.assertEqual((finished.state, len(self.feed_items("3"))), ("finished", len(self.urls_ok)))
        self.assertEqual(self.storage.blocks, {})
        with open(os.path.join(worker_dir, "jobs", "batch-3.json")) as f:
            self.assertEqual(json.load(f)["state"], "finished")
