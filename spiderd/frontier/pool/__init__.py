"""The URL pool (frontier): the backends of the pool's contracts (spiderd.contracts.pool: the narrow ones, joined
in IURLPool, and the admin part IURLPoolAdmin), an embedded LevelDB backend and an in-memory one (KVPool;
Redis: :mod:`.redis`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from twisted.internet.interfaces import IReactorTime

from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool.kvpool import KVPool
from spiderd.frontier.pool.memkv import MemoryKV
from spiderd.frontier.pool.options import PoolOptions
from spiderd.frontier.pool.trim import trim as trim_leveldb

__all__ = ["KVPool", "MemoryKV", "PoolOptions", "open_leveldb_pool", "open_memory_pool"]


def open_leveldb_pool(path: str, clock: IReactorTime, options: PoolOptions | None = None, *,
                      politeness: Politeness | None = None, trim: Callable[[], Any] | None = None,
                      **keywords: Any) -> KVPool:
    """Open (or create) the LevelDB pool at ``path``, with a bloom filter so misses cost no disk read.

    ``keywords`` (without ``options``): those of :meth:`PoolOptions.of`, such as ``failure_threshold=2``."""
    from spiderd.core import leveldb

    os.makedirs(path, exist_ok=True)
    db = leveldb.Reopening(
        path,
        create_if_missing=True,
        bloom_filter_bits=10,
        write_buffer_size=8 << 20,
        lru_cache_size=16 << 20,
        max_open_files=500,
    )
    return KVPool(db, clock, options or PoolOptions.of(**keywords), politeness=politeness,
                  trim=trim or (lambda: trim_leveldb(path)))


def open_memory_pool(clock: IReactorTime, options: PoolOptions | None = None, *, politeness: Politeness | None = None,
                     **keywords: Any) -> KVPool:
    """A pool that lives in memory only: for tests and throwaway crawls (``keywords`` as for the LevelDB pool)."""
    return KVPool(MemoryKV(), clock, options or PoolOptions.of(**keywords), politeness=politeness)
