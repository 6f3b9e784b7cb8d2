"""One parse child process as the parse pool sees it: started with ``python -m spiderd.fetch.parseworker``,
frames out on its stdin, frames in on its stdout, a FIFO of the requests it holds.

The reactor reads a child's stdout :data:`READ_SIZE` bytes at a time (:func:`widen_reads`), not Twisted's 8 KiB: an
answer carrying a compressed page (10-20 KB) took two or three reactor wake-ups, and a batch of answers one per
8 KiB.  A request goes into the child's stdin at once when nothing waits before it (:func:`write_now`), not at the
reactor's next turn.
"""

from __future__ import annotations

import errno
import marshal
import os
import sys
from collections import OrderedDict, deque
from typing import Any, Callable, Protocol

from twisted.internet import main
from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IProcessTransport, IReactorProcess, IReactorTime
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

import spiderd

from spiderd.core.retry import Backoff
from spiderd.fetch.extract import Extracted, Rules
from spiderd.fetch.parseworker import FrameDecoder, FrameError, extracted_from, frame, rules_message

MAX_VERSIONS = 8  # versions of the rules a child keeps (the one in use, and those of running worker jobs)

log = Logger()

READ_SIZE = 256 * 1024  # bytes read from a child's stdout at once (the child writes its answers in 256 KiB)


class ChildOwner(Protocol):
    """What a child tells its pool."""

    def child_ready(self, child: ParseChild) -> None:
        """The child loaded the rules and takes pages."""

    def child_answered(self, child: ParseChild) -> None:
        """The child answered its oldest request: it has room for one more."""

    def child_ended(self, child: ParseChild, reason: Failure) -> None:
        """The child process exited; the requests it still holds are the owner's to fail."""


def spawn(reactor: IReactorProcess, child: ParseChild) -> None:
    """Start ``child``'s process with this interpreter, this ``spiderd`` first on its path."""
    spawn_module(reactor, child, "spiderd.fetch.parseworker")


def spawn_module(reactor: IReactorProcess, protocol: ProcessProtocol, module: str) -> None:
    """Start ``python -m module`` with this interpreter, this ``spiderd`` first on its path, speaking to
    ``protocol`` (the parse children, the render children)."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(spiderd.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    widen_reads(reactor.spawnProcess(protocol, sys.executable, [sys.executable, "-m", module], env=env))


def widen_reads(transport: object, fd: int = 1, size: int = READ_SIZE) -> bool:
    """Have the reactor read the child's ``fd`` ``size`` bytes at a time; False where the transport is not
    POSIX's (``twisted.internet.process.Process``, whose readers read 8 KiB), which is left as it is."""
    reader = getattr(transport, "pipes", {}).get(fd)
    if reader is None or not isinstance(getattr(reader, "fd", None), int) or not hasattr(reader, "dataReceived"):
        return False

    def read() -> object:
        """What Twisted's ``fdesc.readFromFD`` does, with a larger read."""
        try:
            data = os.read(reader.fd, size)
        except OSError as e:
            return None if e.errno in (errno.EAGAIN, errno.EINTR) else main.CONNECTION_LOST
        if not data:
            return main.CONNECTION_DONE
        reader.dataReceived(data)
        return None

    reader.doRead = read
    return True


def write_now(transport: object, data: bytes | list[bytes], fd: int = 0) -> None:
    """``transport.write(data)`` to the child's ``fd`` (``data``: bytes, or the buffers of one frame, written
    together with one ``writev`` and never joined unless the transport takes a part of them), but written into the
    pipe at once when nothing of the transport's waits before it (what the pipe does not take is left to the
    transport).

    Twisted buffers every write for the reactor's next turn, and its pipe writer on Linux stops watching the pipe
    for its close when a write is buffered and starts again when it is written (its read hack): four ``epoll_ctl``
    calls and a turn of the reactor for each page sent to a parse child, whose pipe (1 MiB) has room nearly
    always.  A transport that is not POSIX's, or an error (a child gone), goes the transport's way."""
    writer: Any = getattr(transport, "pipes", {}).get(fd)
    if (writer is not None and isinstance(getattr(writer, "fd", None), int) and writer.connected
            and not writer.disconnecting and not writer._writeDisconnected and not writer._tempDataBuffer
            and writer.offset == len(writer.dataBuffer)):
        parts = [data] if isinstance(data, bytes) else data
        try:
            sent = os.writev(writer.fd, parts)
        except OSError:  # full (EAGAIN), or the child gone: the transport's write meets it its own way
            sent = 0
        if sent == sum(map(len, parts)):
            return
        data = b"".join(parts)[sent:]
    elif not isinstance(data, bytes):
        data = b"".join(data)
    transport.write(data)  # type: ignore[attr-defined]


class RulesVersions:
    """The parent's copy of the versions of the rules a child holds (:class:`~spiderd.fetch.parseworker.Versions`
    is the child's): at most MAX_VERSIONS, the one in use among them."""

    def __init__(self, rules: Rules) -> None:
        """The child was started with ``rules`` (its init message)."""
        self._versions: OrderedDict[str, None] = OrderedDict({rules.digest: None})
        self._using = rules.digest

    def use(self, rules: Rules) -> list[tuple[Any, ...]]:
        """The messages that make ``rules`` the version the child parses with (none if it is already)."""
        messages: list[tuple[Any, ...]] = []
        digest = rules.digest
        if digest not in self._versions:
            if len(self._versions) >= MAX_VERSIONS:
                oldest = next(d for d in self._versions if d != self._using)
                del self._versions[oldest]
                messages.append(("forget", oldest))
            messages.append(rules_message(rules))
        self._versions[digest] = None
        self._versions.move_to_end(digest)
        if digest != self._using:
            messages.append(("use", digest))
            self._using = digest
        return messages


class Restarts:
    """When a pool's child slots start again: after a delay that grows with the slot's failures in a row (the
    parse pool's and the fetch pool's)."""

    def __init__(self, clock: IReactorTime, slots: int, delay: float, max_delay: float, what: str) -> None:
        self._clock = clock
        self._backoff = Backoff(delay, max_delay)
        self._what = what  # how the log names a slot's child ("parse worker")
        self._failures = [0] * slots
        self.pending: dict[int, IDelayedCall] = {}  # slot -> its start

    def schedule(self, slot: int, start: Callable[[int], object]) -> None:
        """``start(slot)`` after the slot's delay (once: a restart already due stands)."""
        if slot in self.pending:
            return
        self._failures[slot] += 1
        delay = self._backoff.delay(self._failures[slot])
        log.info("Restarting {what} {slot} in {delay:.1f}s", what=self._what, slot=slot, delay=delay)
        self.pending[slot] = self._clock.callLater(delay, start, slot)

    def started(self, slot: int) -> None:
        """The slot's child is starting (its restart, if one was due, is over)."""
        self.pending.pop(slot, None)

    def worked(self, slot: int) -> None:
        """The slot's child answered: its next restart comes after the shortest delay again."""
        if slot < len(self._failures):
            self._failures[slot] = 0

    def cancel(self) -> None:
        for call in self.pending.values():
            call.cancel()
        self.pending.clear()


class ChildPool(Service):
    """What a pool of child processes keeps whatever they do (the parse pool's and the fetch pool's): a child per
    slot, their restarts, the waiters of :meth:`ready`, a watchdog, and the Deferred of its stop (with its deadline).
    A pool says how a child is started (``_spawn(slot)``) and what its watchdog checks."""

    def __init__(self, clock: IReactorTime, workers: int, restart_delay: float, max_restart_delay: float,
                 what: str, check: Callable[[], object]) -> None:
        self._reactor: Any = clock
        self.workers = workers
        self._children: list[Any] = [None] * workers
        self._restarts = Restarts(clock, workers, restart_delay, max_restart_delay, what)
        self._ready_waiters: list[Deferred[None]] = []
        self._stopped: Deferred[None] | None = None
        self._deadline: IDelayedCall | None = None
        self._watchdog = LoopingCall(check)
        self._watchdog.clock = clock

    def _spawn(self, slot: int) -> None:
        raise NotImplementedError

    def _start_slots(self, interval: float) -> None:
        """At start: a child in every slot, the watchdog every ``interval`` seconds."""
        self._stopped = None
        for slot in range(self.workers):
            self._spawn(slot)
        if self.workers:
            self._watchdog.start(interval, now=False)

    def _begin_stop(self) -> bool:
        """At stop: the watchdog and the restarts end; False if the pool was stopping already."""
        if self._stopped is not None:
            return False
        self._stopped = Deferred()
        if self._watchdog.running:
            self._watchdog.stop()
        self._restarts.cancel()
        return True

    def ready(self) -> Deferred[None]:
        """Fires once every child has started (at once without children)."""
        if all(c is not None and c.ready for c in self._children):
            return defer.succeed(None)
        d: Deferred[None] = Deferred()
        self._ready_waiters.append(d)
        return d

    def _fire_ready(self) -> None:
        """A child is ready: the waiters of :meth:`ready` are told once every child is."""
        if all(c is not None and c.ready for c in self._children):
            waiters, self._ready_waiters = self._ready_waiters, []
            for d in waiters:
                d.callback(None)

    def _live(self) -> list[Any]:
        return [c for c in self._children if c is not None]

    def _schedule_restart(self, slot: int) -> None:
        if self.running:
            self._restarts.schedule(slot, self._spawn)

    def _now_stopped(self) -> None:
        """Every child is gone: the stop's deadline is cancelled and its Deferred fires (once)."""
        if self._stopped is None or self._stopped.called:
            return
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None
        self._stopped.callback(None)

    def _when_stopped(self) -> Deferred[None]:
        d: Deferred[None] = Deferred()
        assert self._stopped is not None
        self._stopped.addCallback(lambda _: d.callback(None))
        return d


class WorkerProcess(ProcessProtocol):
    """What a pool's child process has whatever it does: its slot and pid, when it last said something, a
    SIGKILL that names why, its stderr logged, its frames decoded and handed to :meth:`message`."""

    transport: IProcessTransport  # set by spawnProcess, before anything here uses it
    what = "Worker"  # how the logs name it ("Parse worker 0 says: ...")

    def __init__(self, slot: int, clock: IReactorTime) -> None:
        self.slot = slot
        self.clock = clock
        self.ready = False
        self.pid: int | None = None
        self.progress = 0.0
        self.killed_because = ""
        self._frames = FrameDecoder()

    def connectionMade(self) -> None:
        self.pid = self.transport.pid

    def kill(self, because: str) -> None:
        """SIGKILL the child; what it held is settled in processEnded, naming ``because``."""
        log.warn("Killing {what} {slot} (pid {pid}): {because}", what=self.what.lower(), slot=self.slot,
                 pid=self.pid, because=because)
        self.killed_because = self.killed_because or because
        try:
            self.transport.signalProcess("KILL")
        except Exception:  # already gone: processEnded follows
            pass

    def childDataReceived(self, childFD: int, data: bytes) -> None:
        if childFD != 1:
            text = data.decode("utf-8", "replace").rstrip()
            if text:
                log.warn("{what} {slot} says: {text}", what=self.what, slot=self.slot, text=text[:2000])
            return
        try:
            for payload in self._frames.feed(data):
                self.message(marshal.loads(payload))
        except (FrameError, ValueError, EOFError, TypeError) as e:
            self.kill(f"protocol error ({e})")

    def message(self, message: tuple[Any, ...]) -> None:
        """One message from the child."""
        raise NotImplementedError


class ParseChild(WorkerProcess):
    """One child process: frames out on stdin, frames in on stdout, a FIFO of pending requests."""

    what = "Parse worker"

    def __init__(self, owner: ChildOwner, slot: int, clock: IReactorTime) -> None:
        super().__init__(slot, clock)
        self.owner = owner
        self.pending: deque[tuple[int, Deferred[Extracted]]] = deque()

    def connectionMade(self) -> None:
        super().connectionMade()
        log.info("Parse worker {slot} started (pid {pid})", slot=self.slot, pid=self.pid)

    def started_with(self, rules: Rules) -> None:
        """The child was sent ``rules`` in its init message: the version it parses with."""
        self._versions = RulesVersions(rules)

    def send(self, request_id: int, payload: list[bytes], d: Deferred[Extracted], rules: Rules) -> None:
        """Send one request (its frame's buffers, :func:`~spiderd.fetch.parseworker.request_frame`), to be parsed with
        ``rules`` (the child is given that version first if need be)."""
        if not self.pending:
            self.progress = self.clock.seconds()
        self.pending.append((request_id, d))
        for message in self._versions.use(rules):
            write_now(self.transport, frame(message))
        write_now(self.transport, payload)

    def message(self, message: tuple[Any, ...]) -> None:
        if message[0] == "ready":
            self.ready = True
            self.owner.child_ready(self)
            return
        if not self.pending or self.pending[0][0] != message[0]:
            raise ValueError(f"answer {message[0]!r} matches no pending request")
        _, d = self.pending.popleft()
        self.progress = self.clock.seconds()
        d.callback(extracted_from(message))
        self.owner.child_answered(self)

    def processEnded(self, reason: Failure) -> None:
        self.owner.child_ended(self, reason)
