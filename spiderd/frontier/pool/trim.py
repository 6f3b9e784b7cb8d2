"""Keep the LevelDB table files' pages out of the process's resident set.

LevelDB reads its table files through ``mmap`` (up to 1000 of them), so every
page of a table it has touched counts in the process's RSS although it is
only page cache: clean, shared, reclaimable.  With ten million URLs that is
hundreds of MB that look like the daemon's own memory.  ``trim`` tells the
kernel (``madvise(MADV_DONTNEED)``) that the process does not need those pages
mapped any more; they stay in the page cache and fault back in on the next
read.  The table files never change once written, so this is safe.  Linux only;
elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import os
import sys
from functools import lru_cache
from typing import Callable

from spiderd.core.memory import libc

MADV_DONTNEED = 4


@lru_cache(maxsize=1)
def _madvise() -> Callable[[int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    lib = libc()
    if lib is None:
        return None
    madvise = lib.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    typed: Callable[[int, int, int], int] = madvise  # (address, length, advice) -> 0 or -1
    return typed


def mapped_tables(directory: str) -> list[tuple[int, int]]:
    """(start, length) of this process's mappings of LevelDB table files under ``directory``."""
    prefix = os.path.realpath(directory) + os.sep
    ranges = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(None, 5)
                if len(fields) == 6 and fields[5].startswith(prefix) and fields[5].rstrip().endswith(".ldb"):
                    start, end = (int(x, 16) for x in fields[0].split("-"))
                    ranges.append((start, end - start))
    except OSError:
        return []
    return ranges


def trim(directory: str) -> int:
    """Drop the table files of ``directory`` from the resident set; the bytes of mappings advised."""
    madvise = _madvise()
    if madvise is None:
        return 0
    advised = 0
    for start, length in mapped_tables(directory):
        if madvise(start, length, MADV_DONTNEED) == 0:
            advised += length
    return advised
