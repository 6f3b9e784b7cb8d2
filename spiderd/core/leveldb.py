"""The one import of LevelDB: plyvel on CPython 3.11, its maintained fork plyvel-next on 3.12 and later.

plyvel 1.5.1 ships wheels for CPython 3.11 and 3.12 on x86_64 only; plyvel-next
is the same Cython code (its ``_plyvel.pyx``, ``leveldb.pxd`` and comparator are
plyvel 1.5.1's, byte for byte) with wheels for 3.12 to 3.14 on x86_64 and
aarch64, each bundling LevelDB and Snappy.  ``setup.cfg`` picks the one for the
interpreter; this module imports whichever is installed.  :class:`Reopening` is a DB that is opened again after
a write its disk refused.
"""

from __future__ import annotations

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


class Reopening:
    """A LevelDB that can be opened again in place: after a write the disk refused (a full disk), LevelDB refuses
    every later write until it is reopened (a failed compaction's error sticks), and a log record a failed write
    tore must have no record written after it in the same log; reopening starts a new log.

    ``get``, ``put``, ``delete``, ``write_batch`` and ``iterator`` are the open DB's own methods (no cost a call);
    anything else is looked up on it.  ``reopen`` closes and opens it again, and raises if it cannot be opened
    (then every call fails until a ``reopen`` succeeds).  A user that writes now and then tells it of a write
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
        """Close the DB and open it again (raises, leaving it closed, if it cannot be opened)."""
        self.close()
        self._open()

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
