"""The URL pool (frontier): one contract (IURLPool, with the admin part IURLPoolAdmin), an embedded LevelDB
backend and an in-memory one (KVPool; Redis: :mod:`.redis`)."""

from __future__ import annotations

import os
from typing import Any

from twisted.internet.interfaces import IReactorTime

from spiderd.frontier.pool.kvpool import KVPool
from spiderd.frontier.pool.memkv import MemoryKV
from spiderd.frontier.pool.trim import trim

__all__ = ["KVPool", "MemoryKV", "open_leveldb_pool", "open_memory_pool"]


def open_leveldb_pool(path: str, clock: IReactorTime, **options: Any) -> KVPool:
    """Open (or create) the LevelDB pool at ``path``, with a bloom filter so misses cost no disk read."""
    from spiderd.core import leveldb

    os.makedirs(path, exist_ok=True)
    db = leveldb.DB(
        path,
        create_if_missing=True,
        bloom_filter_bits=10,
        write_buffer_size=8 << 20,
        lru_cache_size=16 << 20,
        max_open_files=500,
    )
    options.setdefault("trim", lambda: trim(path))
    return KVPool(db, clock, **options)


def open_memory_pool(clock: IReactorTime, **options: Any) -> KVPool:
    """A pool that lives in memory only: for tests and throwaway crawls."""
    return KVPool(MemoryKV(), clock, **options)
