"""The batcher's spool on a full disk (issue 35.1): a line of the open batch the disk took only in part is cut back,
and a seal the disk refused is made again at the next flush, so the batch goes out once space returns."""

from __future__ import annotations

import errno
import os
from typing import Any

from twisted.internet import defer, reactor, task
from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.trial import unittest

from spiderd.frontier.batchspool import append_lines, open_path, read_spool

from . import test_batcher
from .test_storage import fill, mount_tmpfs


class BatchSpoolDiskTests(unittest.TestCase):
    """The batcher's spool is a 1 MB tmpfs (targets, batchers and settling as in test_batcher)."""

    _base = test_batcher.BatcherTests
    target, _close, batcher, settle = _base.target, _base._close, _base.batcher, _base.settle

    def setUp(self) -> None:
        self.clock = Clock()
        self.nodes: list[Any] = []
        self.ports: list[Any] = []
        self.spool = mount_tmpfs(self, "1m")

    def test_a_line_the_disk_took_in_part_is_cut_back(self) -> None:
        """The open batch's file holds whole lines only after an append the full disk refused part of, so the
        next append and a recovery read the URLs as they were given."""
        path = open_path(self.spool)
        append_lines(path, ["http://shop.example/item/0.html"])
        filler = fill(self, self.spool)  # the file's last page has room for a few of the next lines
        urls = [f"http://shop.example/item/{i}.html" for i in range(1, 500)]
        with self.assertRaises(OSError) as raised:
            append_lines(path, urls)
        self.assertEqual(raised.exception.errno, errno.ENOSPC)
        os.unlink(filler)
        append_lines(path, ["http://shop.example/item/500.html"])
        _, found = read_spool(self.spool)
        self.assertEqual(found, ["http://shop.example/item/0.html", "http://shop.example/item/500.html"])

    @defer.inlineCallbacks
    def test_a_seal_the_disk_refused_is_made_at_the_next_flush(self) -> Any:
        """The flush timer's seal fails on the full disk (no traceback); it is tried again a flush interval later
        and, once space returns, the batch goes out."""
        b = self.batcher([self.target()], flush_interval=5)
        yield b.add([f"http://shop.example/item/{i}.html" for i in range(3)])
        filler = fill(self, self.spool)
        with capturedLogs() as events:
            self.clock.advance(5)
            yield self.settle(b)
            yield task.deferLater(reactor, 0, lambda: None)  # the seal's errback runs after the lock is free
        self.assertEqual(self.nodes[0].batches, [])
        self.assertFalse([e for e in events if e.get("log_failure") is not None])
        os.unlink(filler)
        self.clock.advance(5)
        yield self.settle(b)
        self.assertEqual(len(self.nodes[0].batches[0]["urls"]), 3)
