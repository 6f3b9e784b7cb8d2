"""Benchmark of the shared Redis frontier: pop+set_status per second on one and two nodes, Redis memory per seen URL.

    python bench/cluster.py                          # 200 thousand URLs per pop run, 1 million seen URLs
    python bench/cluster.py --urls 50000 --seen 100000 --redis redis://127.0.0.1:6379/0

Without ``--redis`` it starts a redis-server of its own (``--save "" --appendonly no``, a free port, a temp
directory; ``redis-server`` must be on PATH) and stops it at the end, so that ``INFO cpu`` counts this run's
commands only; with ``--redis`` it uses that server, whose CPU other clients may add to.

A node is a process with its own RedisPool on the same keys, popping 64 URLs
at a time and acking each with set_status(200), with a few such loops in
flight, as fast as it can, over URLs spread over 1000 hosts with no delay and a
high per-host concurrency.  Both nodes start at the same instant; the rate is
all URLs acked over the time until the last node finds the pool empty.

Redis CPU per crawled page is measured on a crawl-shaped mix, for the whole life of a page: one node
pops 64 at a time; a list page (1 in 51) adds the 50 detail links found on it; every page's status is
set as the crawler sets it (``set_statuses`` per page); the Redis server's CPU (``INFO cpu``, user+sys)
before and after, over the pages crawled (issue 17's figure; its target is 10 us a page).

Memory per seen URL is the growth of Redis's ``used_memory`` while one million
URLs are recorded with seen_add (``MEMORY USAGE`` of the bucket keys is shown
too).  scrapy-redis's dupefilter keeps each request fingerprint, the 40-hex
SHA-1 of the request, in one Redis set through SADD; scrapy-redis is not
installed here: the same storage is reproduced directly, with the SHA-1 hex of
the same URLs.  A shared Redis (``--redis``) may move ``used_memory`` a little by
itself.  Every key lives under a prefix of this run and is deleted at
the end.  Ends with one ``RESULT key=value ...`` line.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Generator

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from twisted.internet import defer, task, threads  # noqa: E402

from spiderd.frontier.politeness import Politeness  # noqa: E402
from spiderd.frontier.pool.redis import open_redis_pool  # noqa: E402
from spiderd.frontier.pool.redis.link import RedisLink, parse_redis_url  # noqa: E402

from faultkit import PrivateRedis  # noqa: E402  (bench/ is on sys.path: this script's folder)

HOSTS = 1000
BATCH = 2000
Gen = Generator[Any, Any, Any]


def url(i: int) -> str:
    """A realistic URL of about 70 characters; host ``i % HOSTS``."""
    return f"http://www.shop{i % HOSTS}.example.com/category/{(i // HOSTS) % 97}/item-{i}.html?ref=list&page={i % 7}"


def open_pool(args: argparse.Namespace, reactor: Any, prefix: str) -> defer.Deferred[Any]:
    """A pool whose keys (its own and the seed-002 ones) start with ``prefix``, about as long as ``spiderd:``."""
    return open_redis_pool(args.redis, reactor, prefix=prefix, namespace=prefix,
                           politeness=Politeness(0.0, 100000), pending_threshold=3600)


# -- a node -----------------------------------------------------------------------------


@defer.inlineCallbacks
def worker(reactor: Any, args: argparse.Namespace) -> Gen:
    """One node: wait for the common start, pop and ack until the pool is empty, print a JSON line."""
    pool = yield open_pool(args, reactor, args.prefix)
    yield task.deferLater(reactor, max(0.0, args.start_at - time.time()), lambda: None)
    start, cpu = time.time(), process_cpu()
    counts = yield defer.gatherResults([pop_ack_loop(pool) for _ in range(args.loops)])
    end, cpu = time.time(), process_cpu() - cpu
    yield pool.close()
    print(json.dumps({"acked": sum(counts), "start": start, "end": end, "cpu": cpu}), flush=True)


def process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@defer.inlineCallbacks
def pop_ack_loop(pool: Any) -> Gen:
    acked = 0
    while True:
        urls = yield pool.pop(64, 0)
        if not urls:
            if (yield pool.size()) == 0:
                return acked
            continue
        yield defer.gatherResults([pool.set_status(u, 200) for u in urls])
        acked += len(urls)


# -- the driver -------------------------------------------------------------------------


@defer.inlineCallbacks
def fill(args: argparse.Namespace, reactor: Any, prefix: str) -> Gen:
    pool = yield open_pool(args, reactor, prefix)
    for base in range(0, args.urls, BATCH):
        yield pool.addmany([url(i) for i in range(base, min(args.urls, base + BATCH))])
    yield pool.close()


@defer.inlineCallbacks
def pop_ack_rate(args: argparse.Namespace, reactor: Any, admin: RedisLink, nodes: int) -> Gen:
    """URLs popped and acked per second by ``nodes`` processes on the same keys."""
    prefix = f"{args.prefix}{nodes}:"
    yield fill(args, reactor, prefix)
    cpu = yield redis_cpu(admin)
    start_at = time.time() + 2.0
    command = [sys.executable, os.path.abspath(__file__), "--worker", "--prefix", prefix, "--redis", args.redis,
               "--start-at", repr(start_at), "--loops", str(args.loops)]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(nodes)]
    outputs = yield defer.gatherResults([threads.deferToThread(p.communicate) for p in procs])
    runs = [json.loads(out[0].strip().splitlines()[-1]) for out in outputs]
    cpu = (yield redis_cpu(admin)) - cpu
    acked = sum(r["acked"] for r in runs)
    rate = acked / (max(r["end"] for r in runs) - min(r["start"] for r in runs))
    print(f"{nodes} node(s): {acked} URLs popped and acked, {rate:,.0f} per second "
          f"({', '.join(str(r['acked']) for r in runs)} per node); CPU per URL: nodes "
          f"{sum(r['cpu'] for r in runs) / acked * 1e6:.0f} us, Redis {cpu / acked * 1e6:.0f} us "
          f"(this machine has {os.cpu_count()} CPUs)", flush=True)
    yield delete_keys(admin, prefix)
    return rate


def detail_links(list_id: int) -> list[str]:
    """The 50 detail URLs a list page links to (hosts spread as ``url`` spreads them)."""
    return [url(list_id * 50 + j) for j in range(50)]


@defer.inlineCallbacks
def crawl_mix(args: argparse.Namespace, reactor: Any, admin: RedisLink) -> Gen:
    """Redis CPU (and the node's) per page over a crawl-shaped mix: lists add 50 links each, every page acked."""
    prefix = f"{args.prefix}mix:"
    pool = yield open_pool(args, reactor, prefix)
    lists = max(1, args.mix_pages // 51)
    for base in range(0, lists, BATCH):
        yield pool.addmany([f"http://www.shop{i % HOSTS}.example.com/list/{i}.html"
                            for i in range(base, min(lists, base + BATCH))])
    cpu, node_cpu, started = (yield redis_cpu(admin)), process_cpu(), time.time()
    pages = 0
    while True:
        urls = yield pool.pop(64, 0)
        if not urls:
            if (yield pool.size()) == 0:
                break
            continue
        adds = [pool.addmany(detail_links(int(u.rsplit("/", 1)[1].split(".")[0])), detail=True)
                for u in urls if "/list/" in u]
        yield defer.gatherResults(adds)
        yield defer.gatherResults([pool.set_statuses([(u, 200)]) for u in urls])
        pages += len(urls)
    seconds, node_cpu = time.time() - started, process_cpu() - node_cpu
    cpu = (yield redis_cpu(admin)) - cpu
    yield pool.close()
    print(f"crawl mix: {pages} pages ({lists} lists of 50 links) in {seconds:.1f} s, {pages / seconds:,.0f} pages/s; "
          f"CPU per page: Redis {cpu / pages * 1e6:.1f} us, node {node_cpu / pages * 1e6:.1f} us", flush=True)
    yield delete_keys(admin, prefix)
    return cpu / pages * 1e6, pages / seconds


@defer.inlineCallbacks
def seen_memory(args: argparse.Namespace, reactor: Any, admin: RedisLink) -> Gen:
    """Bytes of Redis memory per URL in spiderd's seen set and in a scrapy-redis-style fingerprint set."""
    prefix = args.prefix
    pool = yield open_pool(args, reactor, prefix)
    before = yield used_memory(admin)
    for base in range(0, args.seen, BATCH):
        yield pool.seen_add([url(i) for i in range(base, min(args.seen, base + BATCH))])
    ours = ((yield used_memory(admin)) - before) / args.seen
    buckets = yield scan(admin, prefix + "s:*")
    usage = yield defer.gatherResults([admin.execute("MEMORY", "USAGE", k, "SAMPLES", "0") for k in buckets])
    encodings = set((yield defer.gatherResults([admin.execute("OBJECT", "ENCODING", k) for k in buckets])))
    yield pool.close()
    print(f"spiderd seen set: {args.seen} URLs, {len(buckets)} buckets ({', '.join(sorted(encodings))}): "
          f"{ours:.1f} bytes per URL (used_memory), {sum(map(int, usage)) / args.seen:.1f} (MEMORY USAGE)", flush=True)
    dupefilter = prefix + "dupefilter"
    before = yield used_memory(admin)
    for base in range(0, args.seen, BATCH):
        fps = [hashlib.sha1(url(i).encode()).hexdigest() for i in range(base, min(args.seen, base + BATCH))]
        yield admin.execute("SADD", dupefilter, *fps)
    theirs = ((yield used_memory(admin)) - before) / args.seen
    usage = yield admin.execute("MEMORY", "USAGE", dupefilter, "SAMPLES", "0")
    print(f"scrapy-redis dupefilter (SHA-1 hex in one set, reproduced): {theirs:.1f} bytes per URL (used_memory), "
          f"{int(usage) / args.seen:.1f} (MEMORY USAGE)", flush=True)
    yield delete_keys(admin, prefix)
    return ours, theirs


@defer.inlineCallbacks
def used_memory(admin: RedisLink) -> Gen:
    info = yield admin.execute("INFO", "memory")
    return int(next(line for line in info.split() if line.startswith("used_memory:")).split(":")[1])


@defer.inlineCallbacks
def redis_cpu(admin: RedisLink) -> Gen:
    """Seconds of CPU the Redis server has used (all its clients)."""
    info = yield admin.execute("INFO", "cpu")
    fields = dict(line.split(":") for line in info.split() if ":" in line)
    return float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])


@defer.inlineCallbacks
def scan(admin: RedisLink, pattern: str) -> Gen:
    cursor, found = "0", set()
    while True:
        cursor, batch = yield admin.execute("SCAN", cursor, "MATCH", pattern, "COUNT", "10000")
        found.update(batch)
        if cursor == "0":
            return sorted(found)


@defer.inlineCallbacks
def delete_keys(admin: RedisLink, prefix: str) -> Gen:
    keys = yield scan(admin, prefix + "*")
    for i in range(0, len(keys), 1000):
        yield admin.execute("UNLINK", *keys[i:i + 1000])


@defer.inlineCallbacks
def driver(reactor: Any, args: argparse.Namespace) -> Gen:
    admin = RedisLink(parse_redis_url(args.redis))
    try:
        mix_us, mix_rate = yield crawl_mix(args, reactor, admin)
        one = yield pop_ack_rate(args, reactor, admin, 1)
        two = yield pop_ack_rate(args, reactor, admin, 2)
        ours, theirs = yield seen_memory(args, reactor, admin)
    finally:
        yield delete_keys(admin, args.prefix)
        yield admin.close()
    print(f"RESULT redis_us_per_page={mix_us:.1f} mix_pages_per_s={mix_rate:.0f} "
          f"pop_ack_1node={one:.0f} pop_ack_2node={two:.0f} redis_bytes_per_url={ours:.1f} "
          f"scrapy_redis_bytes_per_url={theirs:.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default=None,
                        help="a redis:// URL to use (default: a private redis-server started and stopped by this run)")
    parser.add_argument("--urls", type=int, default=200_000, help="URLs per pop+ack run")
    parser.add_argument("--seen", type=int, default=1_000_000, help="URLs in the memory measurement")
    parser.add_argument("--mix-pages", type=int, default=51_000, help="pages in the crawl-shaped mix")
    parser.add_argument("--loops", type=int, default=4, help="pop+ack loops in flight per node")
    parser.add_argument("--prefix", default=f"bcl{os.getpid() % 100000}:")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker or args.redis is not None:
        task.react(worker if args.worker else driver, (args,))
    else:
        with private_redis() as url:  # task.react exits: the server stops on the way out
            args.redis = url
            print(f"private redis-server at {url} (--save '' --appendonly no)", flush=True)
            task.react(driver, (args,))


@contextlib.contextmanager
def private_redis() -> Generator[str, None, None]:
    """A redis-server of this run's own in a temp directory, its URL; stopped (and the directory removed) after."""
    if shutil.which("redis-server") is None:
        sys.exit("redis-server is not on PATH: install it, or give --redis redis://host:port/db")
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as directory:
        server = PrivateRedis(Path(directory), aof=False)
        server.start()
        try:
            yield f"redis://127.0.0.1:{server.port}/0"
        finally:
            server.proc.term()


if __name__ == "__main__":
    main()
