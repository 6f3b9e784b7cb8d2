"""A job's parts on disk (spiderd.worker.parts): the names, the cut, and what each crash point leaves is read back
unambiguously."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from twisted.internet.task import Clock
from twisted.trial import unittest

from spiderd.core.urls import fingerprint
from spiderd.worker.parts import JobParts, PartClock, part_path, part_uri


def lines(*urls: str) -> bytes:
    return b"".join(json.dumps({"url": u}).encode() + b"\n" for u in urls)


class JobPartsTests(unittest.SynchronousTestCase):
    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="spiderd-parts-"))
        self.addCleanup(shutil.rmtree, self.root, True)
        (self.root / "incoming").mkdir()
        self.items = str(self.root / "incoming" / "job1.jl")
        self.parts = JobParts(self.items, str(self.root / "jobs" / "job1.parts"))

    def test_names(self) -> None:
        """Parts are named with -p00001 before the extension; their local files with .p00001."""
        self.assertEqual(part_uri("ftps://h/in/dt=x/5_shop_t.jl", 1), "ftps://h/in/dt=x/5_shop_t-p00001.jl")
        self.assertEqual(part_uri("file:///f/name", 12), "file:///f/name-p00012")
        self.assertEqual(part_path(self.items, 3), str(self.root / "incoming" / "job1.p00003.jl"))

    def test_cut_then_recover(self) -> None:
        """A cut renames the file and enters its pages; a fresh start finds it not shipped yet, its pages sealed."""
        Path(self.items).write_bytes(lines("http://a/1", "http://a/2"))
        path = self.parts.cut(1, {fingerprint("http://a/1"), fingerprint("http://a/2")})
        self.assertFalse(os.path.exists(self.items))
        found = self.parts.recover()
        self.assertEqual(found.unshipped, [(1, path)])
        self.assertEqual(found.sealed, {fingerprint("http://a/1"), fingerprint("http://a/2")})
        self.assertEqual(found.next, 2)
        os.unlink(path)  # shipped: the spool took it
        found = self.parts.recover()
        self.assertEqual((found.unshipped, found.next), ([], 2))
        self.assertEqual(len(found.sealed), 2)

    def test_crash_between_rename_and_ledger(self) -> None:
        """A part file the ledger does not name (cut just before a crash): its pages are read from it and entered;
        a torn last ledger line is dropped."""
        Path(part_path(self.items, 1)).write_bytes(lines("http://a/1"))
        os.makedirs(self.root / "jobs")
        (self.root / "jobs" / "job1.parts").write_text('{"part": 1, "fps": [')
        found = self.parts.recover()
        self.assertEqual(found.sealed, {fingerprint("http://a/1")})
        self.assertEqual(found.unshipped, [(1, part_path(self.items, 1))])
        self.assertEqual(self.parts.recover().sealed, {fingerprint("http://a/1")})  # entered: read again alike

    def test_forget(self) -> None:
        """A cancelled job: its unshipped parts and its ledger go."""
        Path(self.items).write_bytes(lines("http://a/1"))
        self.parts.cut(1, {1})
        self.parts.discard_parts()
        self.parts.remove()
        self.assertEqual((self.parts.recover().next, os.listdir(self.root / "incoming")), (1, []))


class PartClockTests(unittest.SynchronousTestCase):
    def test_age_and_idle(self) -> None:
        """Due ``age`` after the first item whatever comes after, or ``idle`` after the last; nothing without items."""
        clock, due = Clock(), []
        parts = PartClock(clock, 300.0, 60.0, lambda: due.append(clock.seconds()))
        clock.advance(1000)
        self.assertEqual(due, [])
        for _ in range(6):
            parts.wrote()
            clock.advance(50)
        self.assertEqual(due, [1300.0])
        parts.wrote()
        clock.advance(60)
        self.assertEqual(due, [1300.0, 1360.0])
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_one_idle_timer_per_part(self) -> None:
        """Items written one after the other move the part's idle timer, not a timer each (a page's item cost a
        new timer and a cancelled one): the clock holds two calls, the age's and the idle's."""
        clock, due = Clock(), []
        parts = PartClock(clock, 300.0, 60.0, lambda: due.append(clock.seconds()))
        created: list[float] = []
        real = clock.callLater
        self.patch(clock, "callLater", lambda delay, f, *a, **kw: created.append(delay) or real(delay, f, *a, **kw))
        for _ in range(100):
            parts.wrote()
            clock.advance(0.5)
        self.assertEqual((created, len(clock.getDelayedCalls())), ([300.0, 60.0], 2))
        clock.advance(59.5)
        self.assertEqual(due, [109.5])
