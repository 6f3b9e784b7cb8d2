"""A storage error is not the page's fault: telling one apart, and the gate that holds the node's work while a sink
refuses writes.

A full disk, a read-only file system, an I/O error, a database that refuses writes (MySQL read-only, a lock wait
timeout, a deadlock, a full table) fail every page alike, and the next page as well; counting such a failure as
the URL's own burns the retry budget in seconds and loses the crawl.  :func:`storage_error` names such an error
(or says it is none).  :class:`StorageGate` is told of them (``failed``) and of writes that went through
(``succeeded``); while a sink is blocked the node takes no new work (``blocked``), the writes that failed are
tried again once the gate tries again (``retried``), after a bounded backoff that doubles while tries keep
failing, and the gate opens as soon as one write succeeds.  It logs one line when a sink blocks, a summary at
most every ``log_every`` seconds while it stays blocked, and one line when it resumes: never a traceback a page.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Any, Callable, Iterator, TypeVar

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core.retry import Backoff

log = Logger()
T = TypeVar("T")

_ERRNOS = {errno.ENOSPC: "disk full", errno.EDQUOT: "disk quota exceeded", errno.EROFS: "read-only file system",
           errno.EIO: "I/O error"}
_WORDS = (  # (lower-case text in the message, what it means): SQLite, LevelDB, the OS's own words
    ("database or disk is full", "disk full"),
    ("no space left on device", "disk full"),
    ("disk quota exceeded", "disk quota exceeded"),
    ("disk i/o error", "I/O error"),
    ("readonly database", "read-only database"),
    ("read-only file system", "read-only file system"),
    ("database is locked", "database locked"),
)
_MYSQL = {1290: "read-only server", 1836: "read-only server", 1792: "read-only transaction", 1205: "lock wait timeout",
          1213: "deadlock", 1021: "disk full", 1114: "table full", 3: "cannot write a file", 1030: "storage engine error"}


_SINK = "spiderd_sink"  # the attribute naming the sink whose storage refused a write (see :func:`blame`)


class StorageBlocked(Exception):
    """A write was refused by its sink's storage, and the node gave up waiting for it (see :func:`retried`)."""


def storage_error(error: BaseException | Failure | None) -> str | None:
    """What a storage failure is (``disk full``, ``read-only server`` ...), or None when ``error`` is not one."""
    return next((words for e in _chain(error) if (words := _words_of(e)) is not None), None)


def _chain(error: BaseException | Failure | None) -> Iterator[BaseException]:
    """``error`` and those it was raised from (a FirstError of gatherResults: its inner failure), at most 8."""
    for _ in range(8):
        if isinstance(error, Failure):
            error = error.value
        if error is None:
            return
        yield error
        inner = getattr(error, "subFailure", None)
        error = inner if inner is not None else (error.__cause__ or error.__context__)


def blame(error: BaseException, sink: str) -> None:
    """Say that ``error`` is ``sink``'s storage refusing a write, whoever made it: the items writer's checkpoint
    is refused by the pool's disk, and the gate then blocks "pool", not "items" (the disk that is full)."""
    try:
        setattr(error, _SINK, sink)
    except AttributeError:  # (an exception type without a __dict__: the caller's sink is named)
        pass


def sink_of(error: BaseException | Failure | None) -> str | None:
    """The sink :func:`blame` named for ``error`` (or an error it was raised from), or None."""
    return next((str(sink) for e in _chain(error) if (sink := getattr(e, _SINK, None)) is not None), None)


def _words_of(error: BaseException) -> str | None:
    if isinstance(error, StorageBlocked):
        return str(error) or "storage blocked"
    if isinstance(error, OSError) and error.errno in _ERRNOS:
        return _ERRNOS[error.errno]
    args = getattr(error, "args", ())
    if type(error).__module__.startswith("pymysql") and args and isinstance(args[0], int) and args[0] in _MYSQL:
        return _MYSQL[args[0]]
    text = str(error).lower()
    return next((words for needle, words in _WORDS if needle in text), None)


@dataclass
class Block:
    """One sink's block: since when, why, how many tries failed, the next try."""

    since: float
    error: str
    tries: int = 1
    until: float = 0.0
    refused: int = 1  # writes refused since the last line logged
    logged: float = 0.0


class StorageGate:
    """Whether the node's sinks take writes (see the module's docstring)."""

    def __init__(self, clock: IReactorTime, backoff: Backoff = Backoff(1.0, 60.0), log_every: float = 60.0) -> None:
        self._clock = clock
        self._backoff = backoff
        self._log_every = log_every
        self.blocks: dict[str, Block] = {}
        self._waiters: list[Deferred[None]] = []
        self._wake: IDelayedCall | None = None
        self._listeners: list[Callable[[], Any]] = []

    def add_listener(self, listener: Callable[[], Any]) -> None:
        """Call ``listener()`` whenever the gate tries again or opens (a loop that held its work kicks itself)."""
        self._listeners.append(listener)

    def blocked(self) -> bool:
        """True while a sink is blocked and its next try has not come (take no new work)."""
        now = self._clock.seconds()
        return any(block.until > now for block in self.blocks.values())

    def failed(self, sink: str, error: BaseException | Failure) -> str | None:
        """Tell the gate a write to ``sink`` failed; if it was a storage error, the sink now blocked (the one
        :func:`blame` names for the error, or else ``sink``), or None."""
        words = storage_error(error)
        if words is None:
            return None
        sink = sink_of(error) or sink
        now = self._clock.seconds()
        block = self.blocks.get(sink)
        if block is None:
            block = self.blocks[sink] = Block(now, words, logged=now)
            block.until = now + self._backoff.delay(1)
            log.error("Storage blocked: {sink}: {error}; no new work is taken, trying again in {wait:g} s",
                      sink=sink, error=words, wait=block.until - now)
        elif block.until <= now:  # a try after the wait failed too: wait longer
            block.tries += 1
            block.until = now + self._backoff.delay(block.tries)
            block.error, block.refused = words, block.refused + 1
        else:
            block.refused += 1
        self._summary(sink, block, now)
        self._schedule()
        return sink

    def succeeded(self, sink: str) -> None:
        """A write to ``sink`` went through: the sink takes writes again."""
        block = self.blocks.pop(sink, None)
        if block is not None:
            log.info("Storage resumed: {sink} takes writes again after {seconds:.0f} s", sink=sink,
                     seconds=self._clock.seconds() - block.since)
            self._open()

    def wait(self) -> Deferred[None]:
        """Fires when the gate next tries again or opens."""
        d: Deferred[None] = Deferred()
        self._waiters.append(d)
        self._schedule()
        return d

    def wake(self) -> None:
        """Fire the waiters now, as a try would (at a stop: each waiting write is made once more, and gives up
        if it may no longer wait)."""
        self._open()

    def status(self) -> dict[str, Any]:
        """For /api/status: each blocked sink, its error, since when and its next try (seconds from now)."""
        now = self._clock.seconds()
        return {sink: {"error": b.error, "blocked_for": round(now - b.since, 1), "tries": b.tries,
                       "next_try_in": round(max(0.0, b.until - now), 1)} for sink, b in self.blocks.items()}

    def _summary(self, sink: str, block: Block, now: float) -> None:
        if now - block.logged >= self._log_every:
            log.warn("Storage still blocked: {sink}: {error} for {seconds:.0f} s ({refused} writes refused since the "
                     "last line); next try in {wait:.0f} s", sink=sink, error=block.error, seconds=now - block.since,
                     refused=block.refused, wait=max(0.0, block.until - now))
            block.logged, block.refused = now, 0

    def _schedule(self) -> None:
        """One timer, at the earliest next try to come (a block whose try came and went, with no write since to
        say how it went, wakes nobody again: its waiters would try at once, and again, without end)."""
        if self._wake is not None and self._wake.active():
            return
        now = self._clock.seconds()
        due = [block.until for block in self.blocks.values() if block.until > now]
        if due:
            self._wake = self._clock.callLater(min(due) - now, self._tried)

    def _tried(self) -> None:
        self._wake = None
        self._open()
        if self.blocked():
            self._schedule()

    def _open(self) -> None:
        waiters, self._waiters = self._waiters, []
        for d in waiters:
            d.callback(None)
        for listener in self._listeners:
            try:
                listener()
            except Exception:
                log.failure("A storage gate listener failed")


def retried(gate: StorageGate | None, sink: str, write: Callable[[], Deferred[T]],
            give_up: Callable[[], bool] = lambda: False) -> Deferred[T]:
    """``write()``; on a storage error, again each time the gate tries again, until it succeeds, fails otherwise,
    or ``give_up()`` says to stop (then it fails with :class:`StorageBlocked`).  Without a gate, ``write()``."""
    if gate is None:
        return write()
    return _retried(gate, sink, write, give_up)


@defer.inlineCallbacks
def _retried(gate: StorageGate, sink: str, write: Callable[[], Deferred[T]], give_up: Callable[[], bool]) -> Any:
    refused = {sink}  # the sinks that refused the write: each takes writes again once it goes through
    while True:
        try:
            result = yield write()
        except Exception as e:
            blocked = gate.failed(sink, e)
            if blocked is None:
                raise
            refused.add(blocked)
            if give_up():
                raise StorageBlocked(f"{blocked}: {storage_error(e)}") from e
            yield gate.wait()
            continue
        for name in sorted(refused):
            gate.succeeded(name)
        return result
