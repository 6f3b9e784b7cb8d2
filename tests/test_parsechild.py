"""Tests for spiderd.fetch.parsechild: a child's answers are read in large reads, not Twisted's 8 KiB."""

from __future__ import annotations

import sys
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

from spiderd.fetch.parsechild import widen_reads

SIZE = 60000  # less than a pipe holds (64 KiB): the child's one write is in the pipe whole when the parent reads
WRITER = f"import os, sys; os.write(1, b'x' * {SIZE}); sys.stdin.read()"


class Reads(ProcessProtocol):
    """Counts the reads of the child's stdout until SIZE bytes came, then closes its stdin."""

    def __init__(self) -> None:
        self.reads = 0
        self.received = 0
        self.ended: Deferred[int] = Deferred()

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        if childFD == 1:
            self.reads += 1
            self.received += len(data)
            if self.received >= SIZE:
                self.transport.closeStdin()

    def processEnded(self, reason: Failure) -> None:
        self.ended.callback(self.reads)


class WideReadsTests(TestCase):
    """widen_reads on real child processes."""

    timeout = 30

    def spawn(self, widen: bool) -> Reads:
        protocol = Reads()
        transport = reactor.spawnProcess(protocol, sys.executable, [sys.executable, "-c", WRITER])
        if widen:
            self.assertTrue(widen_reads(transport))
        return protocol

    @defer.inlineCallbacks
    def test_one_write_is_one_read(self) -> Any:
        """60,000 bytes written at once are read at once (Twisted's own reader takes 8 reads of 8 KiB)."""
        protocol = self.spawn(widen=True)
        reads = yield protocol.ended
        self.assertEqual(protocol.received, SIZE)
        self.assertLessEqual(reads, 2)

    @defer.inlineCallbacks
    def test_end_of_output_still_ends_the_process(self) -> Any:
        """The widened reader still sees the end of the child's output (its exit is reported once)."""
        protocol = self.spawn(widen=True)
        yield protocol.ended
        self.assertEqual(protocol.received, SIZE)

    def test_other_transports_are_left_alone(self) -> None:
        """A transport without POSIX pipes (a test double, another platform's) is not touched."""
        self.assertFalse(widen_reads(object()))
