"""A child that fills and works a LevelDB pool forever, journaling what the pool acknowledged.

Run as ``python -m tests.crash_child POOL_DIR JOURNAL SEED``; the crash test kills it with SIGKILL.
Journal lines are written only after the pool call returned: ``A url`` (queued), ``D url`` (done),
``F url`` (failed for good).
"""

from __future__ import annotations

import random
import sys

from twisted.internet.task import Clock

from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool import open_leveldb_pool


def universe(size: int = 200_000) -> list[str]:
    """The URLs the child may add: many hosts, some big, some small."""
    return [f"http://h{i % 37 if i % 5 else i % 3}.example/p/{i}" for i in range(size)]


def main() -> None:
    path, journal_path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    clock = Clock()
    clock.advance(1_000_000 + seed * 1000)
    pool = open_leveldb_pool(path, clock, politeness=Politeness(0.0, 4), pending_threshold=30, failure_threshold=2)
    urls = universe()
    journal = open(journal_path, "a", buffering=1)
    while True:
        batch = rng.sample(urls, rng.randint(1, 50))
        pool.addmany(batch)
        journal.write("".join(f"A {u}\n" for u in batch))
        popped = []
        pool.pop(rng.randint(1, 40)).addCallback(popped.append)
        for url in popped[0]:
            code = rng.choice([200, 200, 200, 404, 500, 503])
            pool.set_status(url, code)
            pool.why(url).addCallback(lambda w: journal.write(f"{w['state'][0].upper()} {w['url']}\n"))
        clock.advance(rng.random() * 5)


if __name__ == "__main__":
    main()
