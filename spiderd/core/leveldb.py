"""The one import of LevelDB: plyvel on CPython 3.11, its maintained fork plyvel-next on 3.12 and later.

plyvel 1.5.1 ships wheels for CPython 3.11 and 3.12 on x86_64 only; plyvel-next
is the same Cython code (its ``_plyvel.pyx``, ``leveldb.pxd`` and comparator are
plyvel 1.5.1's, byte for byte) with wheels for 3.12 to 3.14 on x86_64 and
aarch64, each bundling LevelDB and Snappy.  ``setup.cfg`` picks the one for the
interpreter; this module imports whichever is installed.  :class:`Reopening` is a DB that is opened again after
a write its disk refused, once that disk has room.
"""

from __future__ import annotations

import errno
import os
from typing import Any

from spiderd.core.storage import storage_error

try:
    import plyvel_next as _plyvel
except ImportError:  # CPython 3.11: plyvel itself
    import plyvel as _plyvel

DB: Any = _plyvel.DB
Error: type[Exception] = _plyvel.Error
IOError: type[Exception] = _plyvel.IOError  # noqa: A001 (plyvel's own name: another process holds the lock)
CorruptionError: type[Exception] = _plyvel.CorruptionError
repair_db: Any = _plyvel.repair_db

MARGIN = 64 << 10  # bytes free, beyond its logs, before a DB is opened again: a manifest, an info log, a new log


def free_bytes(path: str) -> int:
    """Bytes this process may still write on the file system of ``path`` (root may use the blocks reserved for
    root; others may not)."""
    fs = os.statvfs(path)
    return (fs.f_bfree if os.geteuid() == 0 else fs.f_bavail) * fs.f_frsize


def logs_size(path: str) -> int:
    """The size of the DB's write-ahead logs at ``path``: opening it writes their records out as a table."""
    size = 0
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name.endswith(".log"):
                try:
                    size += entry.stat().st_size
                except FileNotFoundError:  # (deleted since the listing)
                    pass
    return size


class Reopening:
    """A LevelDB that can be opened again in place: after a write the disk refused (a full disk), LevelDB refuses
    every later write until it is reopened (a failed compaction's error sticks), and a log record a failed write
    tore must have no record written after it in the same log; reopening starts a new log.

    ``get``, ``put``, ``delete``, ``write_batch`` and ``iterator`` are the open DB's own methods (no cost a call);
    anything else is looked up on it.  ``reopen`` closes and opens it again, and raises if it cannot be opened
    (then every call fails until a ``reopen`` succeeds).  It does so only once the disk has room for what opening
    writes (its logs' records as a table, and ``MARGIN``): on a disk that stays full, each try wrote a new log, a
    manifest and an info log, and deleted a torn table, so the disk's space came and went; until then it raises
    a disk-full ``OSError`` and leaves the DB as it is.  A user that writes now and then tells it of a write
    the disk refused (``refused``) and asks for it ``ready`` before the next write (reopened then, if need be;
    on the thread that reads it: a reopen must not race a read).
    """

    stale = False  # a write was refused: reopen before the next one

    get: Any
    put: Any
    delete: Any
    write_batch: Any
    iterator: Any

    def __init__(self, path: str, **options: Any) -> None:
        self.path = path
        self._options = options
        self.db: Any = None
        self._open()

    def _open(self) -> None:
        db = self.db = DB(self.path, **self._options)
        self.get, self.put, self.delete = db.get, db.put, db.delete
        self.write_batch, self.iterator = db.write_batch, db.iterator

    def reopen(self) -> None:
        """Close the DB and open it again once its disk has room (raises ``ENOSPC`` until then, leaving the DB as
        it is; raises, leaving it closed, if it cannot be opened)."""
        if not self.has_room():
            raise OSError(errno.ENOSPC, "No space left on device to open the store again", self.path)
        self.close()
        self._open()

    def has_room(self) -> bool:
        """Whether the DB's disk has room for what opening it writes (a few system calls)."""
        return free_bytes(self.path) > logs_size(self.path) + MARGIN

    def refused(self, error: BaseException) -> bool:
        """Note that a write failed with ``error``; True if the disk refused it (then reopened before the next)."""
        if storage_error(error) is None:
            return False
        self.stale = True
        return True

    def ready(self) -> Reopening:
        """This DB, opened again first if a write was refused since (raises while it cannot be)."""
        if self.stale:
            self.reopen()
            self.stale = False
        return self

    @property
    def closed(self) -> bool:
        return bool(self.db is None or self.db.closed)

    def close(self) -> None:
        if not self.closed:
            self.db.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["db"], name)
