"""kill -9 at random moments: the reopened LevelDB pool loses nothing and stays consistent."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from twisted.internet.task import Clock

from spiderd.frontier.pool import open_leveldb_pool
from spiderd.frontier.pool.fsck import check

from .helpers import result

ROOT = Path(__file__).resolve().parent.parent


def run_and_kill(pool_dir: Path, journal: Path, seed: int, rng: random.Random) -> None:
    """Start the child, let it work for a random moment, SIGKILL it."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.crash_child", str(pool_dir), str(journal), str(seed)], cwd=ROOT
    )
    start = journal.stat().st_size if journal.exists() else 0
    deadline = time.monotonic() + 30
    while (not journal.exists() or journal.stat().st_size < start + 2000) and time.monotonic() < deadline:
        assert child.poll() is None, "the child died on its own"
        time.sleep(0.02)  # polling a file another process writes, not waiting for a timer
    assert journal.stat().st_size >= start + 2000, "the child did no work this round"
    time.sleep(rng.uniform(0.0, 0.4))  # then the kill lands at a random moment of its work
    os.kill(child.pid, signal.SIGKILL)
    child.wait()


def journal_states(journal: Path) -> dict[str, str]:
    """The last acknowledged state of each URL; a torn last line is ignored."""
    states: dict[str, str] = {}
    for line in journal.read_text().splitlines():
        kind, _, url = line.partition(" ")
        if url.startswith("http://") and kind in ("A", "D", "F", "W", "P"):
            if kind == "A":
                states.setdefault(url, "A")
            else:
                states[url] = kind
    return states


def test_kill_9_loses_nothing(tmp_path: Path) -> None:
    """After each SIGKILL: the store is consistent, every acknowledged URL is known, done ones stay done."""
    pool_dir, journal = tmp_path / "pool", tmp_path / "journal"
    rng = random.Random(1234)
    for round_ in range(5):
        run_and_kill(pool_dir, journal, round_, rng)
        pool = open_leveldb_pool(str(pool_dir), Clock())
        try:
            assert check(pool._kv) == [], f"round {round_}"
            stats = result(pool.stats())
            assert stats["pending"] == 0, "leases from before the crash are back in the queues"
            acknowledged = journal_states(journal)
            for url, kind in acknowledged.items():
                state = result(pool.why(url))["state"]
                assert state != "unknown", f"{url} was acknowledged ({kind}) and is lost"
                if kind == "D":
                    assert state == "done", f"{url} was done and is now {state}"
                if kind == "F":
                    assert state == "failed", f"{url} failed for good and is now {state}"
        finally:
            pool.close()
    # Finally the pool still works: drain it and nothing done comes out again.
    pool = open_leveldb_pool(str(pool_dir), Clock())
    done = {u for u, k in journal_states(journal).items() if k == "D"}
    assert done, "no URL was ever done: the rounds proved nothing"
    waiting, drained = result(pool.stats())["waiting"], 0
    while popped := result(pool.pop(1000)):
        assert not done & set(popped), "a URL done before a crash was handed out again"
        for url in popped:
            pool.set_status(url, 200)
        drained += len(popped)
    assert drained == waiting, "every waiting URL comes out, once"
    pool.close()


def test_fsck_finds_damage() -> None:
    """The consistency check reports a queue entry removed behind the pool's back, and a wrong counter."""
    from spiderd.frontier.pool import keys as k
    from spiderd.frontier.pool import open_memory_pool

    pool = open_memory_pool(Clock())
    pool.addmany([f"http://a.example/{i}" for i in range(3)])
    assert check(pool._kv) == []
    first_queued = next(pool._kv.iterator(prefix=k.QUEUE, include_value=False))
    pool._kv.delete(first_queued)
    problems = check(pool._kv)
    assert any("no queue entry" in p for p in problems)
    assert any("host" in p for p in problems)
    pool._kv.put(k.COUNTERS, k.pack_counters([9, 0, 0, 0, 0, 0]))
    assert any("counters" in p for p in check(pool._kv))
