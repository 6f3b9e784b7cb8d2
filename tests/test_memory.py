"""Memory helpers: a parser process keeps lzma's buffers in its heap instead of faulting them in per page; the
daemon's collector is calmed once it runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spiderd.core.memory import calm_gc, keep_heap, release_memory, rss_of

LASTING = """
import gc
from spiderd.core.memory import lasting_objects
before = gc.get_freeze_count()
with lasting_objects():
    inside = gc.isenabled()
    made = [[i] for i in range(1000)]
print(inside, gc.isenabled(), gc.get_freeze_count() - before >= 1000)
gc.disable()
with lasting_objects():
    pass
print(gc.isenabled())
"""

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


CALM = """
import gc
from spiderd.core.memory import calm_gc
before = gc.get_threshold()[0]
calm_gc()
print(before, gc.get_threshold()[0], gc.get_freeze_count() > 1000)
"""


def test_calm_gc_freezes_the_start_up_heap_and_collects_less_often() -> None:
    """calm_gc (run in a child: it freezes the whole heap) moves what exists out of the collector's reach and
    raises the young generation's threshold from CPython's 700 to 10,000."""
    out = subprocess.run([sys.executable, "-c", CALM], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["700", "10000", "True"]


def test_lasting_objects_are_made_with_no_collection_then_frozen() -> None:
    """Inside lasting_objects the collector does not run; after it, what was made is frozen (run in a child: it
    freezes the whole heap) and the collector runs again, unless it was off before."""
    out = subprocess.run([sys.executable, "-c", LASTING], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True", "True", "False"]


def test_the_daemon_modules_load_with_no_collection() -> None:
    """Importing the composition root (twistd's first step into spiderd) leaves its modules frozen out of the
    collector's reach and the collector on."""
    code = "import gc, spiderd.tap; print(gc.isenabled(), gc.get_freeze_count() > 10000)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True"]


def test_the_daemon_calms_the_collector_once_running(tmp_path: Path) -> None:
    """makeService (twistd's entry, not the tests' build) has calm_gc run when the reactor starts."""
    from twisted.internet.testing import MemoryReactorClock

    from spiderd.tap import Options, makeService

    config = tmp_path / "node.toml"
    config.write_text(f'[spiderd]\nrole = "worker"\ndata_dir = "{tmp_path / "data"}"\n[parse]\nworkers = 0\n')
    options = Options()
    options.parseOptions(["--config", str(config)])
    reactor = MemoryReactorClock()
    makeService(options, reactor)  # type: ignore[arg-type]  # (a MemoryReactorClock plays the node's reactor)
    assert calm_gc in [hook for hook, _, _ in reactor.whenRunningHooks]


def test_the_daemon_calms_the_collector_again_once_the_seeds_are_in(tmp_path: Path) -> None:
    """With a pool, calm_gc runs again after the seeds went in (their hosts' tables frozen out of full passes)."""
    from twisted.internet.testing import MemoryReactorClock

    from spiderd.tap import Options, makeService

    config = tmp_path / "node.toml"
    config.write_text(f'[spiderd]\nrole = "all"\ndata_dir = "{tmp_path / "data"}"\n[parse]\nworkers = 0\n'
                      '[batch]\ntargets = []\n[pool]\nbackend = "memory"\nseeds = ["http://127.0.0.1:9/"]\n')
    options = Options()
    options.parseOptions(["--config", str(config)])
    top = makeService(options, MemoryReactorClock())  # type: ignore[arg-type]
    seeds = [s for s in top if getattr(s, "name", None) == "seeds"]
    assert len(seeds) == 1 and calm_gc in seeds[0].loaded
