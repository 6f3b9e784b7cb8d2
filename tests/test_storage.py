"""A storage error is not the page's fault (spiderd.core.storage): which errors are storage errors, the gate on a
Clock, writes made again once it tries again, and a crawl whose items file and SQLite store sit on a full tmpfs:
nothing fails, nothing new is fetched while it is full, and every item is there once after space returns."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
import tempfile
from typing import Any

from twisted.internet import defer, reactor, task
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.trial import unittest
from twisted.web import resource, server

from spiderd.core.retry import Backoff
from spiderd.core.stats import CrawlStats
from spiderd.core.storage import StorageBlocked, StorageGate, blame, retried, storage_error
from spiderd.engine.politeness import Politeness
from spiderd.engine.steps import PageSteps
from spiderd.feed.items import ItemWriter
from spiderd.feed.shipper import FeedShipper
from spiderd.fetch.fetcher import FetchConfig, Fetcher
from spiderd.fetch.parsepool import ParsePool
from spiderd.frontier.crawler import CrawlService
from spiderd.frontier.pool import open_memory_pool
from spiderd.ops.web.node import Node, _storage
from spiderd.store import open_store
from spiderd.worker import WorkerService

from .helpers import ClockedReactor, rules_of
from .test_throttle import Base
from .test_worker import WorkerTestBase
from .test_worker_flow import Holding

FULL = OSError(errno.ENOSPC, "No space left on device")


class PyMySQLError(Exception):
    """Stands for pymysql.err.OperationalError (classified by its module and code, without importing pymysql)."""


PyMySQLError.__module__ = "pymysql.err"


def mount_tmpfs(case: unittest.TestCase, size: str) -> str:
    """A tmpfs of ``size`` mounted for the test (unmounted after); skips where it cannot be (root is needed)."""
    path = tempfile.mkdtemp(prefix="spiderd-tmpfs-")
    case.addCleanup(os.rmdir, path)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True)
    if mounted.returncode != 0:
        raise unittest.SkipTest(f"cannot mount a tmpfs (root needed): {mounted.stderr.decode().strip()}")
    case.addCleanup(subprocess.run, ["umount", "-l", path])
    return path


class Filler(str):
    """The path of a file that fills a file system up (remove it to free the space)."""

    def top_up(self) -> None:
        """Fill the file system up again: space a store's background thread freed since (LevelDB deletes a log
        or a torn table once it is done with it) is taken back, as a disk that stays full would."""
        with open(self, "ab", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise


def fill(case: unittest.TestCase, path: str) -> Filler:
    """Fill the file system at ``path`` up; the filler's path (remove it to free the space)."""
    filler = Filler(os.path.join(path, "filler"))
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as e:
            case.assertEqual(e.errno, errno.ENOSPC)
    return filler


@defer.inlineCallbacks
def wait_for(predicate: Any, turns: int = 2000) -> Any:
    """Turn the real reactor until ``predicate()`` (no timer of the test's is waited for)."""
    for _ in range(turns):
        if predicate():
            return
        yield task.deferLater(reactor, 0.005, lambda: None)
    raise AssertionError("timed out waiting")


class ClassifyTests(unittest.SynchronousTestCase):
    """Which failures are the storage's."""

    def test_storage_errors_and_others(self) -> None:
        """A full disk, a read-only database, MySQL refusing writes, and those wrapped by a gatherResults, are
        storage errors; a bad value or a parse error is not."""
        wrapped = defer.FirstError(defer.Failure(sqlite3.OperationalError("database or disk is full")), 0)
        cases = {
            "disk full": [FULL, sqlite3.OperationalError("database or disk is full"), wrapped,
                          OSError("IO error: /x/000005.log: No space left on device")],
            "read-only database": [sqlite3.OperationalError("attempt to write a readonly database")],
            "read-only server": [PyMySQLError(1290, "The MySQL server is running with the --read-only option")],
            "lock wait timeout": [PyMySQLError(1205, "Lock wait timeout exceeded")],
        }
        for words, errors in cases.items():
            for error in errors:
                self.assertEqual(storage_error(error), words, error)
        for other in (ValueError("bad"), KeyError("title"), PyMySQLError(1064, "syntax"), OSError(errno.ENOENT, "x")):
            self.assertIsNone(storage_error(other), other)


class GateTests(unittest.SynchronousTestCase):
    """The gate on a Clock: blocks, tries again after a growing wait, opens on a success, logs little."""

    def test_block_try_again_and_resume(self) -> None:
        """A storage error blocks at once (one line); errors meanwhile add no line; the try after 1 s fails and
        waits 2 s; a success opens the gate (one line); the listener is told at each try."""
        clock = Clock()
        gate = StorageGate(clock, Backoff(1.0, 60.0))
        tried: list[float] = []
        gate.add_listener(lambda: tried.append(clock.seconds()))
        with capturedLogs() as events:
            self.assertFalse(gate.failed("store", ValueError("not storage")))
            self.assertFalse(gate.blocked())
            self.assertTrue(gate.failed("store", FULL))
            for _ in range(50):
                gate.failed("store", FULL)
            self.assertTrue(gate.blocked())
            self.assertEqual(gate.status()["store"]["error"], "disk full")
            clock.advance(1)
            self.assertFalse(gate.blocked())  # the try: work may go
            gate.failed("store", FULL)
            self.assertTrue(gate.blocked())
            clock.advance(1.9)
            self.assertTrue(gate.blocked())
            clock.advance(0.1)
            gate.succeeded("store")
            self.assertEqual((gate.blocked(), gate.blocks), (False, {}))
        self.assertEqual([e["log_format"].split(":")[0] for e in events], ["Storage blocked", "Storage resumed"])
        self.assertEqual(tried, [1.0, 3.0, 3.0])

    def test_a_long_block_logs_a_summary_a_minute(self) -> None:
        """Writes refused for ten minutes, one a second: about one line a minute, not one a write."""
        clock = Clock()
        gate = StorageGate(clock, Backoff(1.0, 60.0))
        with capturedLogs() as events:
            for _ in range(600):
                gate.failed("items", FULL)
                clock.advance(1)
        self.assertLessEqual(len(events), 12)
        self.assertGreaterEqual(len(events), 9)

    def test_a_sink_whose_try_passed_wakes_nobody_at_once(self) -> None:
        """A sink blocked once, whose try came with no write since (the crawler held by another sink pops
        nothing), does not wake the other sink's waiting writes at once: they are made again at that sink's own
        tries only (the gate woke them without end, a batch of pages refused 60 times a second)."""
        clock = Clock()
        gate = StorageGate(clock, Backoff(1.0, 60.0))
        gate.failed("pool", FULL)
        attempts: list[float] = []

        def write() -> Deferred[None]:
            attempts.append(clock.seconds())
            return defer.fail(FULL)

        d = retried(gate, "store", write)
        for _ in range(40):
            clock.advance(0.25)
        self.assertNoResult(d)
        self.assertEqual(attempts, [0.0, 1.0, 3.0, 7.0])
        d.cancel()
        self.failureResultOf(d)

    def test_a_write_refused_by_another_sinks_disk_blocks_that_sink(self) -> None:
        """An items write whose pool checkpoint the pool's disk refused (the error blamed on "pool") blocks "pool",
        the disk that is full, not "items"; once the write goes through, neither is blocked."""
        clock = Clock()
        gate = StorageGate(clock)

        def refused() -> OSError:
            error = OSError(errno.ENOSPC, "No space left on device")
            blame(error, "pool")
            return error

        answers: list[Any] = [refused(), "done"]

        def write() -> Deferred[str]:
            answer = answers.pop(0)
            return defer.fail(answer) if isinstance(answer, Exception) else defer.succeed(answer)

        d = retried(gate, "items", write)
        self.assertEqual(set(gate.blocks), {"pool"})
        self.assertEqual(gate.failed("items", refused()), "pool")
        self.assertIsNone(gate.failed("items", KeyError("x")))
        clock.advance(1)
        self.assertEqual(self.successResultOf(d), "done")
        self.assertEqual(gate.blocks, {})

    def test_retried_waits_for_the_gate(self) -> None:
        """A write refused twice is made again at each try and fires with its result; one refused past
        ``give_up`` fails with StorageBlocked; another error fails at once."""
        clock = Clock()
        gate = StorageGate(clock)
        answers: list[Any] = [FULL, FULL, "done"]

        def write() -> Deferred[str]:
            answer = answers.pop(0)
            return defer.fail(answer) if isinstance(answer, Exception) else defer.succeed(answer)

        d = retried(gate, "store", write)
        self.assertNoResult(d)
        clock.advance(1)
        self.assertNoResult(d)
        clock.advance(2)
        self.assertEqual(self.successResultOf(d), "done")
        self.assertEqual(gate.blocks, {})
        gone = retried(gate, "store", lambda: defer.fail(FULL), lambda: True)
        self.failureResultOf(gone, StorageBlocked)
        self.failureResultOf(retried(gate, "pool", lambda: defer.fail(KeyError("x"))), KeyError)


SITES = [{"name": "full", "allowed_hosts": ["127.0.0.1"], "list_urls": [r"/$"], "detail_urls": [r"/p/"],
          "fields": {"title": "//h1/text()"}}]
DETAILS = 30


class Pages(resource.Resource):
    """A list page linking DETAILS detail pages of about 2 KB each; counts the requests per path."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.requests: dict[str, int] = {}

    def render_GET(self, request: Any) -> bytes:
        path = request.path.decode()
        self.requests[path] = self.requests.get(path, 0) + 1
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        if path == "/":
            return b"<html><body>" + b"".join(b'<a href="/p/%d">%d</a>' % (i, i) for i in range(DETAILS)) + b"</body>"
        return b"<html><body><h1>%s</h1><p>%s</p></body></html>" % (path.encode(), os.urandom(1000).hex().encode())


class StorageCrawl(Base):
    """A crawl of :class:`Pages` by the real fetcher and parser, its time on a Clock, with a storage gate: the parts
    are made by :meth:`crawl`, the crawl held by a refusing sink is checked by :meth:`held`, then run to its end."""

    timeout = 60

    @defer.inlineCallbacks
    def crawl(self, pool: Any, store: Any, items_dir: str) -> Any:
        """The crawler (not started) over ``pool``, ``store`` (None: none) and an items writer in ``items_dir``;
        ``self.root``, ``self.site``, ``self.gate``, ``self.items`` are set, the pool holds the site's root."""
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.site = Pages()
        port = reactor.listenTCP(0, server.Site(self.site), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.root = f"http://127.0.0.1:{port.getHost().port}/"
        clocked = ClockedReactor(reactor, self.clock)
        fetcher = Fetcher(clocked, FetchConfig(timeout=10))
        self.addCleanup(fetcher.close)
        parser = ParsePool(reactor, rules_of({"sites": SITES}), 0)
        parser.startService()
        self.addCleanup(parser.stopService)
        self.pool = pool = pool(self.clock)
        if store is not None:
            store = store(clocked)
            store.startService()
            self.addCleanup(store.stopService)
            self.assertEqual((yield store.count()), 0)  # (open before the storage refuses writes)
        self.store, self.items_dir = store, items_dir
        self.items = ItemWriter(clocked, items_dir, pool=pool, flush_interval=0.5, batch_size=5)
        self.items.startService()
        self.addCleanup(self.items.stopService)
        yield self.settle(lambda: self.items.ready.called)
        self.gate = StorageGate(self.clock)
        steps = PageSteps(clocked, parser, store, gate=self.gate)
        yield pool.add(self.root)
        return CrawlService(clocked, pool, fetcher, steps, parser.rules, CrawlStats(self.clock), items=self.items,
                            concurrency=4)

    @defer.inlineCallbacks
    def held(self, crawler: CrawlService, sink: str | None = None, filler: Filler | None = None) -> Any:
        """Start the crawl; once ``sink`` (None: any) is blocked: nothing new is fetched, no URL failed, the status
        says so.  ``filler`` is topped up while the crawl runs (the disk stays full)."""
        crawler.startService()
        self.addCleanup(crawler.stopService)
        blocked = (lambda: sink in self.gate.blocks) if sink is not None else self.gate.blocked

        def held() -> bool:
            if filler is not None:
                filler.top_up()
            return blocked() and crawler.fetching == 0

        yield self.settle(held, real_seconds=30)
        fetched = sum(self.site.requests.values())
        yield self.advance(0.5, step=0.1)  # the gate holds: nothing new is fetched
        self.assertEqual(sum(self.site.requests.values()), fetched)
        self.assertEqual((yield self.pool.stats())["failed"], 0)
        self.assertTrue(_storage(Node("all", self.clock, storage=self.gate))["blocked"])

    @defer.inlineCallbacks
    def to_the_end(self, crawler: CrawlService) -> Any:
        """Run the crawl (the storage takes writes again) to its end: every URL done, none failed, every page's
        item written once (and every page stored), the gate open."""
        for _ in range(60):
            yield self.advance(2.0, step=0.5)
            state = yield self.pool.stats()
            if state["done"] == DETAILS + 1:
                break
        yield self.settle(lambda: crawler.processing == 0)
        self.assertEqual((state["done"], state["failed"]), (DETAILS + 1, 0))
        yield self.items.stopService()
        lines = [json.loads(line) for name in sorted(os.listdir(self.items_dir))
                 if name.endswith(".jl") for line in open(os.path.join(self.items_dir, name))]
        self.assertEqual(sorted(i["url"] for i in lines), sorted(f"{self.root}p/{i}" for i in range(DETAILS)))
        if self.store is not None:
            self.assertEqual((yield self.store.count()), DETAILS)
        self.assertEqual(self.gate.blocks, {})


def few_lines(case: unittest.TestCase, events: list[dict[str, Any]], most: int = 10) -> None:
    """Fewer than ``most`` events of spiderd's were logged."""
    ours = [e["log_format"] for e in events if e.get("log_namespace", "").startswith("spiderd")]
    case.assertLess(len(ours), most, ours)


class FullDiskTests(StorageCrawl):
    """The crawler with its items file and SQLite page store on a 1 MB tmpfs that is filled up."""

    def setUp(self) -> None:
        self.mnt = mount_tmpfs(self, "1m")

    @defer.inlineCallbacks
    def test_a_full_disk_fails_no_url_and_loses_no_item(self) -> Any:
        """While the disk is full no URL fails, the crawler takes no new URL, the status says the sink is blocked
        and few lines are logged; once space returns (and the gate's wait is over) every page's item is written
        once and every page stored."""
        crawler = yield self.crawl(lambda clock: open_memory_pool(clock, politeness=Politeness(concurrency=4),
                                                                  failure_threshold=1),
                                   lambda clocked: open_store("sqlite:///pages.sqlite3", self.mnt, clocked,
                                                              batch_size=5), os.path.join(self.mnt, "items"))
        filler = fill(self, self.mnt)
        with capturedLogs() as events:
            yield self.held(crawler)
            os.unlink(filler)
            yield self.to_the_end(crawler)
        few_lines(self, events)


class WorkerFullDiskTests(WorkerTestBase):
    """The worker with its data directory (jobs, items files, spool) and SQLite store on a 2 MB tmpfs that fills up
    while a job's pages are held by the site."""

    def setUp(self) -> None:
        super().setUp()
        self.gate.open()
        self.mnt = mount_tmpfs(self, "2m")
        self.holding = Holding(self.spec)
        port = reactor.listenTCP(0, server.Site(self.holding), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.hold_root = f"http://127.0.0.1:{port.getHost().port}"

    @defer.inlineCallbacks
    def test_a_full_disk_loses_no_item_of_a_job(self) -> Any:
        """Pages answered while the disk is full are neither failed nor lost: the worker starts nothing new while
        the storage gate holds, and once space returns the job ships every item once and stores every page."""
        clock = Clock()
        data = os.path.join(self.mnt, "data")
        store = open_store("sqlite:///pages.sqlite3", data, reactor, batch_size=2)
        store.startService()
        self.addCleanup(store.stopService)
        shipper = FeedShipper(reactor, os.path.join(data, "spool"), stop_timeout=5.0)
        shipper.startService()
        self.addCleanup(shipper.stopService)
        self.assertEqual((yield store.count()), 0)  # (open before the disk fills)
        gate = StorageGate(clock)
        parser = self.parser()
        service = WorkerService(reactor, self.config(data_dir=data, job_concurrency=0, per_host_concurrency=8),
                                self.fetcher, parser, store, shipper, clock=clock,
                                steps=PageSteps(reactor, parser, store, gate=gate))
        service.startService()
        self.addCleanup(lambda: service.stopService() if service.running else None)
        self.api = "http://%s:%d" % service.address
        urls = [f"{self.hold_root}/item/{n}.html" for n in range(1000, 1008)]
        job = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                  ("batch", "1"), ("setting", "DISTRIBUTED_START_URLS=" + json.dumps(urls)))
        yield self.holding.holding(8)
        filler = fill(self, self.mnt)
        with capturedLogs() as events:
            self.holding.release()
            yield wait_for(lambda: gate.blocked() and service.runner._pipeline.in_flight == 0)
            self.assertEqual(service.runner.jobs[job].state, "running")
            os.unlink(filler)
            done = service.runner.when_done(job)
            while not done.called:
                clock.advance(1.0)
                yield task.deferLater(reactor, 0.01, lambda: None)
        finished = yield done
        yield shipper.settled()
        self.assertEqual((finished.state, finished.stats.get("failed", 0)), ("finished", 0))
        items = self.feed_items("1")
        self.assertEqual(len(items), len({i["url"] for i in items}))
        self.assertEqual(len(items), 8)
        self.assertEqual((yield store.count()), 8)
        ours = [e["log_format"] for e in events if e.get("log_namespace", "").startswith("spiderd")]
        self.assertLess(len(ours), 10, ours)
