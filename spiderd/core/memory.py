"""Giving memory back to the system after a big piece of work (CPython keeps freed memory in its arenas
and glibc's malloc keeps freed heap pages; ``malloc_trim`` returns what it can)."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def release_memory() -> bool:
    """Collect garbage and hand free heap pages back (glibc only); True if malloc_trim ran."""
    gc.collect()
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
