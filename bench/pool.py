"""Benchmark of the embedded LevelDB pool: adds, duplicates, pop+set_status, memory, disk, reopen.

    python bench/pool.py            # 10 million URLs (about 5 minutes, about 2 GB of disk)
    python bench/pool.py --urls 1000000

Canonicalisation and fingerprinting are included in every figure (the pool
does them on every call).  Memory is the resident size of a fresh process that
opens the pool and works it (adds, pops, acks), at 10 thousand and at the full
count.  Ends with one ``RESULT key=value ...`` line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from twisted.internet.task import Clock  # noqa: E402

from spiderd.engine.politeness import Politeness  # noqa: E402
from spiderd.frontier.pool import open_leveldb_pool  # noqa: E402

HOSTS = 1000
BATCH = 1000


def url(i: int) -> str:
    """A realistic URL of about 70 characters; host ``i % HOSTS``."""
    return f"http://www.shop{i % HOSTS}.example.com/category/{(i // HOSTS) % 97}/item-{i}.html?ref=list&page={i % 7}"


def open_pool(path: str, clock: Clock) -> object:
    return open_leveldb_pool(path, clock, politeness=Politeness(0.0, 64), pending_threshold=3600)


def fill(pool: object, start: int, stop: int) -> float:
    """addmany URLs [start, stop) in batches; returns the seconds spent inside the pool."""
    spent = 0.0
    for base in range(start, stop, BATCH):
        batch = [url(i) for i in range(base, min(base + BATCH, stop))]
        t = time.perf_counter()
        pool.addmany(batch)  # type: ignore[attr-defined]
        spent += time.perf_counter() - t
    return spent


def pop_ack(pool: object, clock: Clock, count: int) -> float:
    """pop batches of 64 and set_status(200) each URL; returns URLs per second."""
    done = 0
    t = time.perf_counter()
    while done < count:
        got: list = []
        pool.pop(64).addCallback(got.append)  # type: ignore[attr-defined]
        if not got[0]:
            break
        for u in got[0]:
            pool.set_status(u, 200)  # type: ignore[attr-defined]
        done += len(got[0])
        clock.advance(0.001)
    return done / (time.perf_counter() - t)


def dir_size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def work_child(path: str, known: int) -> None:
    """In a fresh process: reopen, work the pool a little, print reopen time and RSS as JSON."""
    clock = Clock()
    clock.advance(10_000_000)
    t = time.perf_counter()
    pool = open_pool(path, clock)
    reopen = time.perf_counter() - t
    fill(pool, known, known + 50_000)
    fill(pool, 0, 50_000)
    pop_ack(pool, clock, 50_000)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"reopen_s": reopen, "rss_mb": rss_mb(), "peak_mb": peak}))
    pool.close()  # type: ignore[attr-defined]


def measure_child(path: str, known: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", path, "--urls", str(known)], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--urls", type=int, default=10_000_000)
    parser.add_argument("--dir", default=None, help="where to put the pools (default: a temp dir, removed after)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        work_child(args.child, args.urls)
        return
    root = args.dir or tempfile.mkdtemp(prefix="spiderd-bench-pool-")
    try:
        run(root, args.urls)
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


def run(root: str, total: int) -> None:
    clock = Clock()
    clock.advance(1_000_000)
    small, big, disk = (os.path.join(root, name) for name in ("small", "big", "disk"))

    pool = open_pool(small, clock)
    fill(pool, 0, 10_000)
    pool.close()  # type: ignore[attr-defined]
    at_10k = measure_child(small, 10_000)
    print(f"10 thousand URLs: reopen {at_10k['reopen_s']:.3f}s, RSS {at_10k['rss_mb']:.1f} MB")

    pool = open_pool(big, clock)
    spent = fill(pool, 0, total)
    add_new = total / spent
    print(f"add, new URLs:        {add_new:10,.0f} /s  ({total:,} URLs in {spent:.1f}s inside the pool)")
    dup_n = min(total, 1_000_000)
    add_dup = dup_n / fill(pool, 0, dup_n)
    print(f"add, duplicates:      {add_dup:10,.0f} /s")
    single_n = 100_000
    t = time.perf_counter()
    for i in range(total, total + single_n):
        pool.add(url(i))  # type: ignore[attr-defined]
    print(f"add, one at a time:   {single_n / (time.perf_counter() - t):10,.0f} /s (URL generation included)")
    rate = pop_ack(pool, clock, 300_000)
    print(f"pop + set_status:     {rate:10,.0f} /s")
    pool.close()  # type: ignore[attr-defined]
    at_big = measure_child(big, total)
    print(f"{total:,} URLs: reopen {at_big['reopen_s']:.3f}s, RSS {at_big['rss_mb']:.1f} MB (peak {at_big['peak_mb']:.1f})")

    done_n = min(total, 1_000_000)
    pool = open_pool(disk, clock)
    fill(pool, 0, done_n)
    pop_ack(pool, clock, done_n)
    pool.compact()  # type: ignore[attr-defined]
    pool.close()  # type: ignore[attr-defined]
    per_url = dir_size(disk) / done_n
    print(f"disk per done URL:    {per_url:10.1f} bytes ({done_n:,} done URLs, compacted)")
    print(
        f"RESULT add_new_per_s={add_new:.0f} add_dup_per_s={add_dup:.0f} pop_ack_per_s={rate:.0f} "
        f"rss_10k_mb={at_10k['rss_mb']:.1f} rss_10m_mb={at_big['rss_mb']:.1f} "
        f"disk_bytes_per_url={per_url:.1f} reopen_s={at_big['reopen_s']:.3f}"
    )


if __name__ == "__main__":
    main()
