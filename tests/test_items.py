"""The in-process item writer: lines durable before their statuses, files cut at the pool's commit points."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.trial import unittest

from spiderd.config.sections import ItemsSection
from spiderd.core.blocking import Blocking, Lane
from spiderd.feed.items import ItemWriter, checkpoint_name
from spiderd.feed.writers import item_writers
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool import open_leveldb_pool, open_memory_pool

from .helpers import result

URLS = [f"http://shop.example/item/{i}.html" for i in range(12)]


class FailingPool:
    """A pool whose ``set_statuses`` fails from the ``fail_from``-th call on (0: never)."""

    def __init__(self, pool: Any, fail_from: int = 0) -> None:
        self.pool = pool
        self.calls = 0
        self.fail_from = fail_from

    def set_statuses(self, statuses: Any, checkpoint: Any = None) -> defer.Deferred[None]:
        self.calls += 1
        if self.fail_from and self.calls >= self.fail_from:
            return defer.fail(ConnectionError("the pool went away"))
        return self.pool.set_statuses(statuses, checkpoint)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.pool, name)


class ItemWriterTests(unittest.TestCase):
    """ItemWriter with a real pool in a temporary directory."""

    timeout = 30

    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="spiderd-items-"))
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.pool = open_leveldb_pool(str(self.dir / "pool"), self.clock, politeness=Politeness(concurrency=100))
        self.addCleanup(lambda: self.pool.close())
        result(self.pool.addmany(URLS, detail=True))
        self.popped = list(result(self.pool.pop(len(URLS))))

    @defer.inlineCallbacks
    def writer(self, pool: Any = None, **options: Any) -> Any:
        """A started writer (its previous-run files settled)."""
        options.setdefault("flush_interval", 0.01)
        self.lane = Lane(reactor, "items-test")  # the writer's; closed at the end whatever the test did
        writer = ItemWriter(reactor, str(self.dir / "items"), pool=pool or self.pool, lane=self.lane, **options)
        writer.startService()
        self.addCleanup(self.lane.close)
        yield writer.ready
        return writer

    def state(self, url: str) -> str:
        return result(self.pool.why(url))["state"]

    def lines(self, pattern: str = "*.jl") -> list[str]:
        return [json.loads(line)["url"] for p in sorted((self.dir / "items").glob(pattern)) for line in p.open()]

    @defer.inlineCallbacks
    def test_line_durable_before_its_status(self) -> Any:
        """When the statuses reach the pool, the lines they depend on are in the file and fsynced."""
        synced: list[int] = []
        seen: list[tuple[int, int]] = []
        real_fsync = os.fsync
        self.patch(os, "fsync", lambda fd: (synced.append(os.fstat(fd).st_size), real_fsync(fd))[1])
        writer = yield self.writer()
        real_set = self.pool.set_statuses

        def set_statuses(statuses: Any, checkpoint: Any = None) -> Any:
            part = Path(writer._path + ".part")
            if statuses:
                seen.append((part.stat().st_size, synced[-1]))
                self.assertEqual(checkpoint, (checkpoint_name(writer._path), part.stat().st_size))
            return real_set(statuses, checkpoint)

        self.patch(self.pool, "set_statuses", set_statuses)
        yield defer.gatherResults([writer.write({"url": u}, [(u, 200)]) for u in self.popped[:3]])
        self.assertEqual([self.state(u) for u in self.popped[:3]], ["done"] * 3)
        self.assertEqual(self.state(self.popped[3]), "pending")
        self.assertTrue(seen and all(size == synced_size > 0 for size, synced_size in seen))
        yield writer.stopService()
        self.assertEqual(self.lines(), self.popped[:3])

    @defer.inlineCallbacks
    def test_lines_past_the_checkpoint_are_cut_at_the_next_start(self) -> Any:
        """A kill after a group's lines are on disk but before the pool recorded them: the next start drops them."""
        writer = yield self.writer()
        yield defer.gatherResults([writer.write({"url": u}, [(u, 200)]) for u in self.popped[:2]])
        part = Path(writer._path + ".part")
        checkpoint = checkpoint_name(writer._path)
        self.assertEqual(result(self.pool.checkpoint(checkpoint)), part.stat().st_size)
        with part.open("ab") as f:  # the next group's lines reached the file; then the process was killed
            f.write(b'{"url":"%s"}\n{"url":"%s"}\n{"url":"torn' % (self.popped[2].encode(), self.popped[3].encode()))
        self.lane.close()  # no stopService: the process is gone
        writer = yield self.writer()
        self.assertFalse(part.exists())
        self.assertEqual(self.lines(), self.popped[:2])
        self.assertEqual(result(self.pool.checkpoint(checkpoint)), None)
        self.assertEqual([self.state(u) for u in self.popped[:4]], ["done", "done", "pending", "pending"])
        yield writer.stopService()

    @defer.inlineCallbacks
    def test_a_file_without_a_checkpoint_keeps_its_whole_lines(self) -> Any:
        """A .part file the pool has no checkpoint for (an older spiderd's) keeps its whole lines, loses a torn one."""
        (self.dir / "items").mkdir()
        old = self.dir / "items" / "items-2020-01-01T00-00-00-123-00001.jl.part"
        old.write_bytes(b'{"url":"a"}\n{"url":"b"}\n{"url":"c')
        empty = self.dir / "items" / "items-2020-01-01T00-00-00-123-00002.jl.part"
        empty.write_bytes(b"")
        writer = yield self.writer()
        self.assertEqual(self.lines(), ["a", "b"])
        self.assertFalse(empty.exists() or old.exists())
        self.assertEqual(writer.files, [str(old)[: -len(".part")]])
        yield writer.stopService()

    @defer.inlineCallbacks
    def test_rotation_at_commit_points(self) -> Any:
        """Files hold rotate_count lines; a complete file's checkpoint is gone; the last file completes at stop."""
        writer = yield self.writer(rotate_count=5, batch_size=3)
        yield defer.gatherResults([writer.write({"url": u}, [(u, 200)]) for u in self.popped])
        yield writer.stopService()
        sizes = [len(Path(p).read_text().splitlines()) for p in writer.files]
        self.assertEqual(sizes, [5, 5, 2])
        self.assertEqual(self.lines(), self.popped)
        self.assertEqual([result(self.pool.checkpoint(checkpoint_name(p))) for p in writer.files], [None] * 3)
        self.assertEqual(list((self.dir / "items").glob("*.part")), [])
        self.assertEqual(result(self.pool.stats())["done"], len(URLS))

    @defer.inlineCallbacks
    def test_a_failed_record_abandons_the_file(self) -> Any:
        """When the pool does not record a group, its items fail and its file waits, cut at its checkpoint."""
        pool = FailingPool(self.pool, fail_from=3)  # the opening checkpoint, one group, then failures
        writer = yield self.writer(pool)
        yield writer.write({"url": self.popped[0]}, [(self.popped[0], 200)])
        first = writer._path
        yield self.assertFailure(writer.write({"url": self.popped[1]}, [(self.popped[1], 200)]), ConnectionError)
        self.assertEqual(len(self.flushLoggedErrors(ConnectionError)), 1)
        self.assertIsNone(writer._file)
        pool.fail_from = 0
        yield writer.write({"url": self.popped[2]}, [(self.popped[2], 200)])
        self.assertNotEqual(writer._path, first)
        yield writer.stopService()  # settles the abandoned file too
        self.assertEqual(sorted(self.lines()), sorted([self.popped[0], self.popped[2]]))
        self.assertEqual([self.state(u) for u in self.popped[:3]], ["done", "pending", "done"])

    @defer.inlineCallbacks
    def test_a_file_the_pool_cannot_open_is_removed(self) -> Any:
        """When the pool cannot record a new file's checkpoint, the items fail and the empty file is gone."""
        writer = yield self.writer(FailingPool(self.pool, fail_from=1))
        yield self.assertFailure(writer.write({"url": self.popped[0]}, [(self.popped[0], 200)]), ConnectionError)
        self.assertEqual(len(self.flushLoggedErrors(ConnectionError)), 1)
        self.assertEqual(list((self.dir / "items").iterdir()), [])
        yield writer.stopService()
        self.assertEqual(self.state(self.popped[0]), "pending")

    @defer.inlineCallbacks
    def test_without_a_pool(self) -> Any:
        """With no pool the lines are written and the torn tail of an old file is cut, as before."""
        lane = Lane(reactor, "items-test")
        writer = ItemWriter(reactor, str(self.dir / "items"), flush_interval=0.01, lane=lane)
        writer.startService()
        self.addCleanup(lane.close)
        yield writer.ready
        yield writer.write({"url": "x"})
        yield writer.stopService()
        self.assertEqual(self.lines(), ["x"])

    @defer.inlineCallbacks
    def test_the_node_writer_works_on_the_nodes_items_lane(self) -> Any:
        """The items writer of ``[items]`` (item_writers) writes on the ``items`` lane of the node's Blocking, which
        runs while the writer does."""
        blocking = Blocking(reactor)
        self.addCleanup(blocking.stopService)
        writer, archive = item_writers(ItemsSection(), str(self.dir / "items"), reactor, self.pool, blocking)
        assert writer is not None and archive is None
        writer.startService()
        yield writer.ready
        self.assertTrue(blocking.lane("items").running)
        yield writer.write({"url": self.popped[0]}, [(self.popped[0], 200)])
        yield writer.stopService()
        self.assertFalse(blocking.lane("items").running)
        self.assertEqual((self.lines("*.jl"), self.state(self.popped[0])), ([self.popped[0]], "done"))

    @defer.inlineCallbacks
    def test_memory_pool(self) -> Any:
        """The memory pool takes statuses and checkpoints the same way."""
        pool = open_memory_pool(self.clock, politeness=Politeness(concurrency=100))
        pool.addmany(URLS[:2], detail=True)
        popped = list(result(pool.pop(2)))
        writer = yield self.writer(pool)
        yield defer.gatherResults([writer.write({"url": u}, [(u, 200)]) for u in popped])
        self.assertEqual(result(pool.checkpoint(checkpoint_name(writer._path))),
                         os.path.getsize(writer._path + ".part"))
        yield writer.stopService()
        self.assertEqual(result(pool.stats())["done"], 2)


class RotationByTimeTests(unittest.TestCase):
    """Items files complete by age and when idle, whatever their count, on an injected clock."""

    timeout = 30

    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="spiderd-items-time-"))
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.clock = Clock()
        self.clock.advance(1_000_000)

    @defer.inlineCallbacks
    def writer(self, **options: Any) -> Any:
        lane = Lane(reactor, "items-time")
        self.addCleanup(lane.close)
        writer = ItemWriter(self.clock, str(self.dir / "items"), batch_size=1, lane=lane,  # type: ignore[arg-type]
                            **options)
        writer.startService()
        self.addCleanup(lambda: writer.stopService() if writer.running else None)
        yield writer.ready
        return writer

    def names(self) -> list[str]:
        return sorted(os.listdir(self.dir / "items"))

    @defer.inlineCallbacks
    def step(self, writer: ItemWriter, seconds: float) -> Any:
        yield writer.settled()  # the group written, its file's timers armed
        self.clock.advance(seconds)
        yield writer.settled()

    @defer.inlineCallbacks
    def test_complete_by_age(self) -> Any:
        """A file is complete rotate_seconds after its first line though lines keep coming; the next line opens
        a new file."""
        writer = yield self.writer(rotate_seconds=300.0, rotate_idle=1000.0)
        yield writer.write({"url": "http://a/1"})
        yield self.step(writer, 200)
        yield writer.write({"url": "http://a/2"})
        yield self.step(writer, 99)
        [part] = self.names()
        self.assertTrue(part.endswith(".jl.part"))
        yield self.step(writer, 1)
        [done] = self.names()
        self.assertTrue(done.endswith(".jl"))
        self.assertEqual(len((self.dir / "items" / done).read_text().splitlines()), 2)
        self.assertEqual(writer.files, [str(self.dir / "items" / done)])
        yield writer.write({"url": "http://a/3"})
        self.assertEqual(len(self.names()), 2)
        self.assertEqual(len([n for n in self.names() if n.endswith(".part")]), 1)

    @defer.inlineCallbacks
    def test_complete_when_idle(self) -> Any:
        """A file no line came into for rotate_idle seconds is complete (an idle crawl); each line restarts it."""
        writer = yield self.writer(rotate_seconds=3600.0, rotate_idle=60.0)
        yield writer.write({"url": "http://a/1"})
        yield self.step(writer, 59)
        yield writer.write({"url": "http://a/2"})
        yield self.step(writer, 59)
        self.assertTrue(self.names()[0].endswith(".part"))
        yield self.step(writer, 1)
        [done] = self.names()
        self.assertTrue(done.endswith(".jl"))
        yield self.step(writer, 3600)  # nothing more happens without lines
        self.assertEqual(self.names(), [done])

    @defer.inlineCallbacks
    def test_rotate_when_the_crawl_finished(self) -> Any:
        """rotate() (the crawl finished) completes the open file at once, queued lines included."""
        writer = yield self.writer(rotate_seconds=3600.0, rotate_idle=3600.0, flush_interval=10.0)
        writer._batch_size = 100
        queued = writer.write({"url": "http://a/1"})
        yield writer.rotate()
        yield queued
        [done] = self.names()
        self.assertTrue(done.endswith(".jl"))
        self.assertEqual(len((self.dir / "items" / done).read_text().splitlines()), 1)

    @defer.inlineCallbacks
    def test_settings(self) -> Any:
        """[items] rotate_seconds and rotate_idle reach the writers (defaults 300 and 60)."""
        self.assertEqual((ItemsSection().rotate_seconds, ItemsSection().rotate_idle), (300.0, 60.0))
        blocking = Blocking(reactor)
        items, _ = item_writers(ItemsSection(rotate_seconds=5.0, rotate_idle=2.0), str(self.dir / "i"), reactor,
                                None, blocking)  # type: ignore[arg-type]
        assert items is not None
        self.assertEqual((items._rotate_seconds, items._rotate_idle), (5.0, 2.0))
        yield defer.succeed(None)
