"""The LevelDB pool's disk figure outside the benchmark: a done URL costs at most 24 bytes once compacted."""

from __future__ import annotations

import os
from pathlib import Path

from twisted.internet.task import Clock

from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool import open_leveldb_pool

DONE = 20_000
BUDGET = 24  # bytes per done URL (bench/README.md's figure is about 15 at ten million URLs)


def test_done_urls_cost_at_most_24_bytes(tmp_path: Path) -> None:
    """20,000 URLs of about 70 characters, popped and done, then compacted: under 24 bytes each on disk."""
    clock = Clock()
    pool = open_leveldb_pool(str(tmp_path / "pool"), clock, politeness=Politeness(0.0, 64), pending_threshold=3600)
    pool.addmany([f"http://www.shop{i % 50}.example.com/category/{i % 97}/item-{i}.html?ref=list" for i in range(DONE)])
    done = 0
    while done < DONE:
        popped = pool.pop(64).result  # the LevelDB pool answers at once
        assert popped, f"only {done} of {DONE} URLs came out"
        for url in popped:
            pool.set_status(url, 200)
        done += len(popped)
        clock.advance(0.001)
    pool.compact()
    pool.close()
    directory = tmp_path / "pool"
    size = sum(os.path.getsize(directory / name) for name in os.listdir(directory))
    assert size / DONE <= BUDGET, f"{size / DONE:.1f} bytes per done URL"
