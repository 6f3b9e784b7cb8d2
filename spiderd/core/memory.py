"""Giving memory back to the system after a big piece of work (CPython keeps freed memory in its arenas
and glibc's malloc keeps freed heap pages; ``malloc_trim`` returns what it can)."""

from __future__ import annotations

import ctypes
import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def libc() -> Any:
    """The C library's functions as this process has them loaded (``CDLL(None)``: no ``ldconfig -p`` run, as
    ``ctypes.util.find_library`` does), or None where ``malloc_trim`` is missing (not glibc)."""
    try:
        lib = ctypes.CDLL(None, use_errno=True)
    except (OSError, TypeError):
        return None
    return lib if hasattr(lib, "malloc_trim") else None


def release_memory() -> bool:
    """Collect garbage and hand free heap pages back (glibc only); True if malloc_trim ran."""
    gc.collect()
    lib = libc()
    if lib is None:
        return False
    lib.malloc_trim(0)
    return True


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_of(pid: int) -> int | None:
    """The resident set of process ``pid`` in bytes (Linux's /proc), or None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:  # procfs: answered from the kernel's memory, never the disk
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def private_of(pid: int) -> int | None:
    """The private resident memory of process ``pid`` in bytes: its resident set less its shared pages (files and
    shared memory), i.e. its anonymous pages (heaps, stacks), from /proc's ``statm`` (one read of the kernel's
    counters, where ``smaps_rollup`` walks the process's page tables: 1 to 170 ms for a Chromium process);
    None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            fields = f.read().split()
            return (int(fields[1]) - int(fields[2])) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def keep_heap(mmap_threshold: int = 32 << 20, trim_threshold: int = 64 << 20) -> bool:
    """Serve allocations up to ``mmap_threshold`` from the heap and keep up to ``trim_threshold`` of free heap
    (glibc only); True if set.

    For a process that allocates and frees the same large buffers again and again (a parser process's lzma
    encoder: its match finder's tables, about 175 fresh pages per 40 KB page), this turns a page fault per
    page of each buffer into reused memory: measured 2.0 ms to 1.53 ms of CPU per page, system time 0.3 ms to 0.
    """
    lib = libc()
    if lib is None or not hasattr(lib, "mallopt"):
        return False
    return bool(lib.mallopt(M_MMAP_THRESHOLD, mmap_threshold)) and bool(lib.mallopt(M_TRIM_THRESHOLD, trim_threshold))


YOUNG_GC_THRESHOLD = 10_000  # allocations between two collections of the youngest generation (CPython's: 700)


def calm_gc(threshold: int = YOUNG_GC_THRESHOLD) -> None:
    """Fewer and cheaper passes of the cyclic garbage collector, for a daemon once it has started.

    The objects made at start-up (modules, classes, the configuration, the services: most of the heap) are frozen
    out of the collector's reach (``gc.freeze``), so a full collection no longer walks them, and the youngest
    generation is collected every ``threshold`` allocations instead of 700, so that the objects of the pages in
    flight are not walked again and again on their way to the older generations.  Measured on bench/crawl.py's
    fast_store run (4,000 pages): the collector's time on the reactor's thread 0.52 s -> 0.19 s, no full
    collection left (8 before, 30 ms each).
    """
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(young, threshold), middle, old)


@contextmanager
def lasting_objects() -> Iterator[None]:
    """No cyclic collection while the block makes objects that last as long as the process (a composition root's
    imports: modules, classes, functions), then those objects frozen out of the collector's reach, as
    :func:`calm_gc` freezes the rest of the start-up's once the daemon has started.

    The collector walked them again and again as they were made (a full collection fell among spiderd.tap's
    imports, and showed as some module's own import time); freezing them at the end spares the young collection
    that would walk them all at once.  Measured: ``import spiderd.tap`` (after twistd's own imports) 178 ms ->
    146 ms, the mean of 8 runs each."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()

