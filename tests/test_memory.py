"""Memory helpers: a parser process keeps lzma's buffers in its heap instead of faulting them in per page."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spiderd.core.memory import keep_heap, release_memory, rss_of

CHILD = """
import resource, sys
from spiderd.core.compression import compress
from spiderd.core.memory import keep_heap
if sys.argv[1] == "keep" and not keep_heap():
    print("unsupported"); sys.exit()
pages = [(b"<p>item %d</p>" % i) * 3000 for i in range(30)]
for page in pages[:5]:
    compress(page, 1)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for page in pages:
    compress(page, 1)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / len(pages))
"""


def faults_per_page(mode: str) -> float | None:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True).stdout
    return None if out.strip() == "unsupported" else float(out)


def test_keep_heap_reuses_lzma_buffers() -> None:
    """With keep_heap (as every parser process sets it), compressing page after page faults in next to no new
    memory; without it, lzma's freshly mapped buffers fault in tens of pages per call."""
    kept = faults_per_page("keep")
    if kept is None:
        pytest.skip("not glibc: mallopt is not there")
    assert kept < 5
    assert faults_per_page("default") > 20


def test_rss_of_this_process() -> None:
    import os

    rss = rss_of(os.getpid())
    assert rss is not None and 10 * 2**20 < rss < 4 * 2**30
    assert rss_of(2**22 + 12345) is None  # no such process
    assert isinstance(release_memory(), bool)


def test_private_memory_of_a_tree() -> None:
    """A process's private memory (resident less shared) is read from its statm: above 0, below its resident set;
    a tree's sums its descendants' (the render pool's watchdog reads it every 5 s, on the reactor)."""
    import os

    from spiderd.core.memory import private_of
    from spiderd.core.proctree import tree_private

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        own, whole = private_of(os.getpid()), tree_private(os.getpid())
        assert own is not None and whole is not None
        assert 0 < own < (rss_of(os.getpid()) or 0) and whole > own
        assert private_of(2**22 + 12345) is None and tree_private(2**22 + 12345) is None
    finally:
        child.communicate(b"")
