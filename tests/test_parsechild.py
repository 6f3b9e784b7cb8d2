"""Tests for spiderd.fetch.parsechild: a child's answers are read in large reads, not Twisted's 8 KiB."""

from __future__ import annotations

import sys
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.defer import Deferred
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure
from twisted.trial.unittest import TestCase

from spiderd.fetch.parsechild import widen_reads, write_now

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


ECHO = "import sys; data = sys.stdin.buffer.read(); sys.stdout.buffer.write(data)"


class Echo(ProcessProtocol):
    """Keeps what the child echoes of its stdin, until the child ends."""

    def __init__(self) -> None:
        self.received = b""
        self.ended: Deferred[bytes] = Deferred()

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        if childFD == 1:
            self.received += data

    def processEnded(self, reason: Failure) -> None:
        self.ended.callback(self.received)


class WriteNowTests(TestCase):
    """write_now on real child processes."""

    timeout = 30

    @defer.inlineCallbacks
    def test_written_into_the_pipe_at_once(self) -> Any:
        """A write with nothing waiting before it is in the pipe when write_now returns: the transport holds
        none of it and does not watch for the pipe to take it (no reactor turn, no epoll_ctl for it)."""
        protocol = Echo()
        transport = reactor.spawnProcess(protocol, sys.executable, [sys.executable, "-c", ECHO])
        writer = transport.pipes[0]
        write_now(transport, b"a" * 30000)
        write_now(transport, b"b" * 100)
        self.assertEqual((writer._tempDataBuffer, writer.dataBuffer[writer.offset:]), ([], b""))
        self.assertNotIn(writer, reactor.getWriters())
        transport.closeStdin()
        echoed = yield protocol.ended
        self.assertEqual(echoed, b"a" * 30000 + b"b" * 100)

    @defer.inlineCallbacks
    def test_order_kept_past_a_full_pipe(self) -> Any:
        """What the pipe cannot take waits in the transport, and every write after it waits behind it: 4 MB in
        writes of 100 KB (more than the pipe holds) come out whole and in order."""
        protocol = Echo()
        transport = reactor.spawnProcess(protocol, sys.executable, [sys.executable, "-c", ECHO])
        chunks = [bytes([65 + i % 26]) * 100_000 for i in range(40)]
        for chunk in chunks:
            write_now(transport, chunk)
        self.assertTrue(transport.pipes[0]._tempDataBuffer or transport.pipes[0].dataBuffer)
        transport.closeStdin()
        echoed = yield protocol.ended
        self.assertEqual(echoed, b"".join(chunks))

    @defer.inlineCallbacks
    def test_buffers_of_a_frame_written_together(self) -> Any:
        """A frame given as buffers goes into the pipe at once, whole (one writev), and past a full pipe the rest
        waits in the transport in order: a frame of 30 KB, then 39 of 100 KB, come out whole and in order."""
        protocol = Echo()
        transport = reactor.spawnProcess(protocol, sys.executable, [sys.executable, "-c", ECHO])
        writer = transport.pipes[0]
        frames = [[b"%04d" % i, b"head", bytes([65 + i % 26]) * (30_000 if i == 0 else 100_000)] for i in range(40)]
        write_now(transport, frames[0])
        self.assertEqual((writer._tempDataBuffer, writer.dataBuffer[writer.offset:]), ([], b""))
        for parts in frames[1:]:
            write_now(transport, parts)
        transport.closeStdin()
        echoed = yield protocol.ended
        self.assertEqual(echoed, b"".join(b"".join(parts) for parts in frames))

    def test_other_transports_write_their_way(self) -> None:
        """A transport with no POSIX pipes is written to as it is (a frame's buffers joined)."""
        written: list[bytes] = []

        class Transport:
            def write(self, data: bytes) -> None:
                written.append(data)

        write_now(Transport(), b"x")
        write_now(Transport(), [b"y", b"z"])
        self.assertEqual(written, [b"x", b"yz"])
