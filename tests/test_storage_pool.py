"""The LevelDB pool's own disk full (issue 35.1): every call fails with a storage error (none raises, none leaves
memory ahead of the store), the pool mends itself once the disk takes writes again (LevelDB opened again: a failed
compaction makes it refuse every write until then), and a crawl whose pool sits on a full tmpfs loses no URL."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.trial import unittest

from spiderd.core import leveldb
from spiderd.core import status as st
from spiderd.core.storage import sink_of, storage_error
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool import KVPool, PoolOptions, open_leveldb_pool

from .test_storage import StorageCrawl, fill, few_lines, mount_tmpfs

COUNTS = ("waiting", "pending", "done", "failed")


def counts(pool: KVPool) -> dict[str, int]:
    answer: dict[str, Any] = {}
    pool.stats().addCallback(answer.update)
    return {name: answer[name] for name in COUNTS}


def small_pool(path: str, clock: Clock) -> KVPool:
    """The LevelDB pool with a small write buffer, so that its tables are written (and can fail) often."""
    kv = leveldb.Reopening(path, create_if_missing=True, write_buffer_size=16 << 10)
    return KVPool(kv, clock, PoolOptions.of(failure_threshold=1, pending_threshold=60),
                  politeness=Politeness(0.0, 1000))


class PoolDiskTests(unittest.SynchronousTestCase):
    """A LevelDB pool on a 1 MB tmpfs that fills up."""

    def setUp(self) -> None:
        self.mnt = mount_tmpfs(self, "1m")
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.pool = small_pool(os.path.join(self.mnt, "pool"), self.clock)
        self.addCleanup(self.pool.close)

    def urls(self, start: int, count: int) -> list[str]:
        return [f"http://h{n % 7}.example/page/{n}?{'x' * 200}" for n in range(start, start + count)]

    def test_a_full_disk_fails_calls_and_the_pool_mends_after(self) -> None:
        """While the disk is full, adds, pops, claims and statuses fail with a storage error (no call raises) and
        the counts stay as the store has them; once space returns the pool works again, its counts match the
        store's (opened afresh), and every URL added before and after ends done, none twice or lost."""
        self.successResultOf(self.pool.addmany(self.urls(0, 300)))
        popped = self.successResultOf(self.pool.pop(40))
        self.assertEqual(len(popped), 40)
        self.successResultOf(self.pool.set_statuses([(url, 200) for url in list(popped)[:20]]))
        before = counts(self.pool)
        self.pool.compact()  # (no background compaction left to free space once the disk is full)
        filler = fill(self, self.mnt)
        calls = [
            lambda: self.pool.addmany(self.urls(300, 300)),
            lambda: self.pool.pop(40),
            lambda: self.pool.set_statuses([(url, 200) for url in list(popped)[20:]]),
            lambda: self.pool.claim("http://h1.example/elsewhere"),
            lambda: self.pool.set_status(list(popped)[25], 500),
        ] + [lambda: self.pool.pop(10)] * 3  # the store cannot be opened again yet: it keeps failing
        for call in calls:
            filler.top_up()  # (a table torn by a failed write was deleted, its space freed)
            failure = self.failureResultOf(call())
            self.assertEqual(storage_error(failure), "disk full")
            self.assertEqual(sink_of(failure), "pool")
        self.assertEqual(counts(self.pool), before)
        os.unlink(filler)
        self.successResultOf(self.pool.set_statuses([(url, 200) for url in list(popped)[20:]]))
        self.successResultOf(self.pool.addmany(self.urls(300, 300)))
        done = set(popped)
        while True:
            urls = self.successResultOf(self.pool.pop(100))
            if not urls:
                break
            self.assertFalse(done & set(urls))
            done |= set(urls)
            self.successResultOf(self.pool.set_statuses([(url, 200) for url in urls]))
        self.assertEqual(done, set(self.urls(0, 600)))
        self.assertEqual(counts(self.pool), {"waiting": 0, "pending": 0, "done": 600, "failed": 0})
        self.pool.close()
        again = small_pool(os.path.join(self.mnt, "pool"), self.clock)
        self.addCleanup(again.close)
        self.assertEqual(counts(again), {"waiting": 0, "pending": 0, "done": 600, "failed": 0})

    def test_a_full_disk_is_not_opened_again_until_it_has_room(self) -> None:
        """While the disk stays full, the calls fail without opening the store again (each try wrote a new log,
        manifest and info log on the full disk); once it has room, the next call opens it again and works."""
        path = os.path.join(self.mnt, "pool")
        self.successResultOf(self.pool.addmany(self.urls(0, 300)))
        self.pool.compact()
        filler = fill(self, self.mnt)
        failure = self.failureResultOf(self.pool.addmany(self.urls(300, 300)))  # the write the disk refuses
        self.assertEqual(storage_error(failure), "disk full")
        files = sorted(os.listdir(path))
        for _ in range(5):
            filler.top_up()
            failure = self.failureResultOf(self.pool.pop(10))
            self.assertEqual((storage_error(failure), sink_of(failure)), ("disk full", "pool"))
        self.assertEqual(sorted(os.listdir(path)), files)
        os.unlink(filler)
        self.assertEqual(len(self.successResultOf(self.pool.pop(10))), 10)
        self.assertNotEqual(sorted(os.listdir(path)), files)  # (opened again: a new log)


class CrawlPoolDiskTests(StorageCrawl):
    """A crawl whose LevelDB pool alone sits on a 1 MB tmpfs that is filled up (its items elsewhere)."""

    def setUp(self) -> None:
        self.mnt = mount_tmpfs(self, "1m")

    @defer.inlineCallbacks
    def test_a_full_pool_disk_holds_the_crawl_and_loses_nothing(self) -> Any:
        """While the pool's disk is full the crawler pops nothing and fails no URL, the status says the pool is
        blocked and few lines are logged; once space returns (the gate's next try) the crawl goes on and every
        page's item is written once."""
        path = os.path.join(self.mnt, "pool")
        crawler = yield self.crawl(lambda clock: open_leveldb_pool(path, clock, politeness=Politeness(concurrency=4),
                                                                   failure_threshold=1), None, tempfile.mkdtemp())
        self.addCleanup(self.pool.close)
        filler = fill(self, self.mnt)
        with capturedLogs() as events:
            yield self.held(crawler, "pool", filler)
            self.assertEqual(crawler.pull_failures, 0)
            os.unlink(filler)
            yield self.to_the_end(crawler)
        few_lines(self, events)
        self.assertNotIn(st.name(st.PROCESSING_ERROR), crawler.stats.errors)
