"""The one import of LevelDB: plyvel on CPython 3.11, its maintained fork plyvel-next on 3.12 and later.

plyvel 1.5.1 ships wheels for CPython 3.11 and 3.12 on x86_64 only; plyvel-next
is the same Cython code (its ``_plyvel.pyx``, ``leveldb.pxd`` and comparator are
plyvel 1.5.1's, byte for byte) with wheels for 3.12 to 3.14 on x86_64 and
aarch64, each bundling LevelDB and Snappy.  ``setup.cfg`` picks the one for the
interpreter; this module imports whichever is installed.
"""

from __future__ import annotations

from typing import Any

try:
    import plyvel_next as _plyvel
except ImportError:  # CPython 3.11: plyvel itself
    import plyvel as _plyvel

DB: Any = _plyvel.DB
Error: type[Exception] = _plyvel.Error
IOError: type[Exception] = _plyvel.IOError  # noqa: A001 (plyvel's own name: another process holds the lock)
CorruptionError: type[Exception] = _plyvel.CorruptionError
repair_db: Any = _plyvel.repair_db
