"""The embedded pool after a write its disk refused (a full disk): no call works on memory the store does not
back, and the pool mends itself once the disk takes writes again.

A part changes the pool's memory (counters, hosts' counts and read positions, leases, hubs) and then writes
the change in one atomic batch; when the store refuses that batch, memory is ahead of the store.  So the
:class:`StoreGuard` that every call of a part goes through (:class:`Guarded`) remembers the refusal, fails
the call (the caller sees a storage error, which the storage gate tells apart, :mod:`spiderd.core.storage`),
reads memory back from the store at once (``resync``: the counts shown are the store's), and before the next
call opens the store again (``reopen``: LevelDB refuses every write after a failed compaction until then)
and reads memory back once more.  While the store cannot be opened again (LevelDB's is not even tried while
its disk has no room: :class:`spiderd.core.leveldb.Reopening`), every call fails the same way, and nothing is
changed.  Calls that touch memory only (``fetched``) and the admin's export are not guarded.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger

from spiderd.core.storage import blame, storage_error

log = Logger()

UNGUARDED = frozenset({"fetched", "export"})  # memory only; a lazy reader


class StoreGuard:
    """Calls of the pool's parts, failed while the store refused a write and could not be opened again
    (``reopen``, which raises while it cannot); ``resync`` reads memory back from the store."""

    def __init__(self, reopen: Callable[[], None], resync: Callable[[], None]) -> None:
        self._reopen = reopen
        self._resync = resync
        self.refused: str | None = None  # why the store refused the last write, until it is opened again

    def call(self, method: Callable[..., Any], *args: Any, **keywords: Any) -> Any:
        """``method(*args, **keywords)``, or a failed Deferred: the store refused it, or a write before it."""
        if self.refused is not None:
            try:
                self._reopen()
                self._resync()
            except Exception as e:
                if storage_error(e) is not None:
                    blame(e, "pool")
                return defer.fail(e)
            log.debug("Pool: its store opened again (it refused a write: {error})", error=self.refused)
            self.refused = None
        try:
            return method(*args, **keywords)
        except Exception as e:
            words = storage_error(e)
            if words is None:
                raise
            self.refused = words
            blame(e, "pool")  # (the pool's disk, whoever called: the items writer's checkpoint, say)
            try:
                self._resync()
            except Exception as again:  # (read again before the next call)
                log.debug("Pool: memory not read back from its store yet: {error}", error=again)
            return defer.fail(e)


class Guarded:
    """One part of the pool whose calls go through ``guard`` (attributes that are not methods are its own)."""

    def __init__(self, part: Any, guard: StoreGuard) -> None:
        self._part = part
        self._guard = guard

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._part, name)
        if name.startswith("_") or name in UNGUARDED or not callable(value):
            return value
        guarded = functools.partial(self._guard.call, value)
        setattr(self, name, guarded)  # found in the instance from now on: 0.2 us a call, not 1
        return guarded
