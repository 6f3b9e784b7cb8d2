"""Benchmark of the shared Redis frontier: pop+set_status per second on one and two nodes, Redis memory per seen URL.

    python bench/cluster.py                          # 200 thousand URLs per pop run, 1 million seen URLs
    python bench/cluster.py --urls 50000 --seen 100000 --redis redis://127.0.0.1:6379/0
    python bench/cluster.py --cluster --urls 50000 --seen 100000   # a 3-master Redis Cluster of its own

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
before and after, over the pages crawled (``redis_us_per_page``).

The crawler-shaped mix drives the same pages as the crawler drives the pool (``CrawlerModel``): 64 fetches in
flight, pops ahead of the free slots into a local queue of up to ``[pool] redis_pop_ahead`` URLs (or, with
``--pop-ahead 0``, a pop when ``redis_pop_batch`` slots are free, or half of them), statuses waiting up to
``[pool] redis_status_wait`` to go out with the next pop (``--pop-ahead``, ``--pop-batch``, ``--status-wait``:
the defaults are the configuration's); ``floor`` runs the mix with plain commands and no script; its Redis CPU a page is ``redis_us_per_page_crawler``, and also ``redis_cpu_us_per_page``,
issue 17's figure (target: 10 us a page; the lockstep one where the crawler-shaped mix was not run).  ``owned``
runs bench/owned.py's model of nodes that own domains (``--run``: URLs a domain's run; ``--owned-plain set`` or
``hash``: statuses and adds as plain commands, URL states in seen sets or in hashes) driven the same way
(``redis_us_per_page_owned``), and ``owned-memory`` the memory a URL of its hash states
(``owned_hash_bytes_per_url``); neither is spiderd's pool.  ``--only
mix,crawler`` runs only those parts; ``--commands`` prints the Redis commands a page (``INFO commandstats``).

Memory per seen URL is the growth of Redis's ``used_memory`` while one million
URLs are recorded with seen_add (``MEMORY USAGE`` of the bucket keys is shown
too).  scrapy-redis's dupefilter keeps each request fingerprint, the 40-hex
SHA-1 of the request, in one Redis set through SADD; scrapy-redis is not
installed here: the same storage is reproduced directly, with the SHA-1 hex of
the same URLs.  A shared Redis (``--redis``) may move ``used_memory`` a little by
itself.  Every key lives under a prefix of this run and is deleted at
the end.  Memory per waiting URL is the growth of ``used_memory`` while as many URLs are added (queued).

``--cluster`` starts a Redis Cluster of three masters on free loopback ports
(tests/rediscluster.py; no persistence, as the machine's Redis runs, unless ``--aof``: fsync always, or
``--fsync everysec``) and runs
everything on the partitioned pool; Redis CPU is each master's ``INFO cpu``,
reported per shard with the spread between shards ((max - min) / mean), and
memory is summed over the masters.  Its 1000 hosts are 1000 registered domains
(``www.shopN.com``: the pool partitions by registered domain); ``--domains``
gives the single Redis the same URLs.  ``--replicas 1`` gives each master a replica (the cluster's
slots as before); Redis CPU stays the masters' (``redis_us_per_page``), each replica's is shown beside it.
``--durability none,replica`` runs the crawler-shaped mix once per ``[pool] redis_durability`` (the other parts
with the first) and adds ``redis_us_per_page_<mode>``, ``replica_us_per_page_<mode>``, ``pages_per_s_<mode>`` and
``ceiling_per_shard_<mode>`` (1e6 / the busiest master's CPU a page: the pages/s of the whole cluster at which that
master is saturated; one shard carries about 1e6 / ``redis_us_per_page_<mode>``) to the RESULT line, and
``redis_us_per_page_net_<mode>`` (and ``replica_us_per_page_net_<mode>``): the same less what the servers spend
idle (cron, the cluster bus; measured for ``--idle`` seconds before the mix) over the mix's time, which a slow mode
("aof": a tenth of the pages/s) would otherwise count in its pages ("aof" needs ``--aof`` and
a Redis 7.2 or later: ``--server /path/to/redis-server``; ``--aof`` turns the AOF on for every mode of the run).
The memory parts print a line each million URLs and, with replicas, the replicas' ``used_memory`` growth a URL (once
their replication offsets have caught up with their masters').  Ends with one ``RESULT key=value ...`` line.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import json
import os
import random
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

from spiderd.config.sections import PoolSection  # noqa: E402
from spiderd.frontier.crawler import pull_size  # noqa: E402
from spiderd.engine.politeness import Politeness  # noqa: E402
from spiderd.frontier.pool.redis import open_redis_pool  # noqa: E402
from spiderd.frontier.pool.redis.cluster import key_slot  # noqa: E402
from spiderd.frontier.pool.redis.keys import located  # noqa: E402
from spiderd.frontier.pool.redis.link import RedisAddress, RedisLink, parse_redis_url  # noqa: E402
from tests.rediscluster import RedisCluster  # noqa: E402

from faultkit import PrivateRedis  # noqa: E402  (bench/ is on sys.path: this script's folder)
from owned import HashStates, OwnedNode  # noqa: E402

HOSTS = 1000
HOST = "www.shop{n}.example.com"  # 1000 hosts of one registered domain; www.shop{n}.com with --domains/--cluster
BATCH = 2000
PARTS = ("mix", "crawler", "popack", "seen", "waiting", "floor", "owned", "owned-memory")
Gen = Generator[Any, Any, Any]


def url(i: int) -> str:
    """A realistic URL of about 70 characters; host ``i % HOSTS``."""
    return f"http://{HOST.format(n=i % HOSTS)}/category/{(i // HOSTS) % 97}/item-{i}.html?ref=list&page={i % 7}"


def open_pool(args: argparse.Namespace, reactor: Any, prefix: str, status_wait: float = 0.0) -> defer.Deferred[Any]:
    """A pool whose keys (its own and the seed-002 ones) start with ``prefix``, about as long as ``spiderd:``;
    each status sent at once unless ``status_wait`` (the crawler-shaped mix: ``[pool] redis_status_wait``)."""
    return open_redis_pool(args.redis, reactor, prefix=prefix, namespace=prefix, seen_bucket_bits=args.bucket_bits,
                           politeness=Politeness(0.0, 100000), pending_threshold=3600, status_wait=status_wait,
                           redis_known_urls=args.known_urls, durability=args.mode)


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


# -- the Redis servers (one, or the cluster's masters) ------------------------------------


class Servers:
    """Admin connections to each Redis server: the one Redis, or every master of the cluster."""

    def __init__(self, links: list[RedisLink], ranges: list[tuple[int, int, int]],
                 replicas: list[RedisLink] | None = None) -> None:
        self.links = links  # the masters
        self.replicas = replicas or []  # with --replicas: each master's replicas, in the masters' order
        self._ranges = ranges  # (first slot, last slot, index of its master) on a cluster

    @classmethod
    @defer.inlineCallbacks
    def open(cls, url_: str, ports: list[int] | None) -> Gen:
        if not ports:
            return cls([RedisLink(parse_redis_url(url_))], [])
        first = RedisLink(RedisAddress("127.0.0.1", ports[0], 0))
        slots = yield first.execute("CLUSTER", "SLOTS")
        yield first.close()
        masters = list(dict.fromkeys(int(m[1]) for _, _, m, *_ in slots))
        replicas = [port for port in ports if port not in masters]  # (CLUSTER SLOTS may not list them all yet)
        links = [RedisLink(RedisAddress("127.0.0.1", port, 0)) for port in masters]
        copies = [RedisLink(RedisAddress("127.0.0.1", port, 0)) for port in replicas]
        return cls(links, [(int(a), int(b), masters.index(int(m[1]))) for a, b, m, *_ in slots], copies)

    def at(self, key: str) -> RedisLink:
        """The server of ``key`` (its slot's master on a cluster)."""
        slot = key_slot(key)
        return next((self.links[i] for a, b, i in self._ranges if a <= slot <= b), self.links[0])

    @defer.inlineCallbacks
    def cpu(self, replicas: bool = False) -> Gen:
        """Seconds of CPU each server (each master; ``replicas``: each replica) has used (all its clients)."""
        infos = yield defer.gatherResults([link.execute("INFO", "cpu")
                                           for link in (self.replicas if replicas else self.links)])
        out = []
        for info in infos:
            fields = dict(line.split(":") for line in info.split() if ":" in line)
            out.append(float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"]))
        return out

    @defer.inlineCallbacks
    def commandstats(self) -> Gen:
        """command -> (calls, microseconds) summed over the servers (INFO commandstats; script commands too), and
        "(reads)" -> (the servers' read events: a wake-up for each batch of requests read, 0)."""
        sections = ("commandstats", "stats")  # one INFO each: one section a call before Redis 7
        infos = yield defer.gatherResults([link.execute("INFO", name) for link in self.links for name in sections])
        stats: dict[str, list[int]] = {"(reads)": [0, 0]}
        for info in infos:
            for line in info.split():
                if line.startswith("total_reads_processed:"):
                    stats["(reads)"][0] += int(line.split(":")[1])
                if line.startswith("cmdstat_"):
                    name, fields = line[8:].split(":", 1)
                    values = dict(pair.split("=") for pair in fields.split(","))
                    total = stats.setdefault(name, [0, 0])
                    total[0] += int(values["calls"])
                    total[1] += int(values["usec"])
        return stats

    @defer.inlineCallbacks
    def used_memory(self, replicas: bool = False) -> Gen:
        """``used_memory`` summed over the servers (the masters; ``replicas``: the replicas)."""
        infos = yield defer.gatherResults([link.execute("INFO", "memory")
                                           for link in (self.replicas if replicas else self.links)])
        return sum(int(next(line for line in info.split() if line.startswith("used_memory:")).split(":")[1])
                   for info in infos)

    @defer.inlineCallbacks
    def replicated(self) -> Gen:
        """Whether every replica has all its master's writes (each master's ``master_repl_offset``, as many times
        as it has replicas, adds up to the replicas' ``slave_repl_offset``)."""
        def offset(info: str, name: str) -> int:
            return int(next(line for line in info.split() if line.startswith(name + ":")).split(":")[1])

        masters = yield defer.gatherResults([link.execute("INFO", "replication") for link in self.links])
        copies = yield defer.gatherResults([link.execute("INFO", "replication") for link in self.replicas])
        share = len(self.replicas) // len(self.links)
        return (sum(offset(info, "master_repl_offset") for info in masters) * share
                == sum(offset(info, "slave_repl_offset") for info in copies))

    @defer.inlineCallbacks
    def scan(self, pattern: str) -> Gen:
        """(server, key) of every key matching ``pattern``."""
        found = []
        for link in self.links:
            cursor = "0"
            while True:
                cursor, batch = yield link.execute("SCAN", cursor, "MATCH", pattern, "COUNT", "10000")
                found += [(link, key) for key in batch]
                if cursor == "0":
                    break
        return sorted(set(found), key=lambda pair: pair[1])

    @defer.inlineCallbacks
    def delete(self, prefix: str) -> Gen:
        keys = yield self.scan(_glob_escape(prefix) + "*")
        for i in range(0, len(keys), 1000):
            yield defer.gatherResults([link.execute("UNLINK", key) for link, key in keys[i:i + 1000]])

    def close(self) -> defer.Deferred[Any]:
        return defer.gatherResults([link.close() for link in self.links + self.replicas])


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\{}" else c for c in text)


def cpu_used(before: list[float], after: list[float]) -> list[float]:
    return [b - a for a, b in zip(before, after)]


# -- the driver -------------------------------------------------------------------------


@defer.inlineCallbacks
def fill(args: argparse.Namespace, reactor: Any, prefix: str) -> Gen:
    pool = yield open_pool(args, reactor, prefix)
    for base in range(0, args.urls, BATCH):
        yield pool.addmany([url(i) for i in range(base, min(args.urls, base + BATCH))])
    yield pool.close()


@defer.inlineCallbacks
def pop_ack_rate(args: argparse.Namespace, reactor: Any, servers: Servers, nodes: int) -> Gen:
    """URLs popped and acked per second by ``nodes`` processes on the same keys."""
    prefix = f"{args.prefix}{nodes}:"
    yield fill(args, reactor, prefix)
    cpu = yield servers.cpu()
    start_at = time.time() + 2.0
    command = [sys.executable, os.path.abspath(__file__), "--worker", "--prefix", prefix, "--redis", args.redis,
               "--durability", args.mode,
               "--start-at", repr(start_at), "--loops", str(args.loops), "--bucket-bits", str(args.bucket_bits)] + (["--domains"] if args.domains else [])
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(nodes)]
    outputs = yield defer.gatherResults([threads.deferToThread(p.communicate) for p in procs])
    runs = [json.loads(out[0].strip().splitlines()[-1]) for out in outputs]
    cpu = sum(cpu_used(cpu, (yield servers.cpu())))
    acked = sum(r["acked"] for r in runs)
    rate = acked / (max(r["end"] for r in runs) - min(r["start"] for r in runs))
    print(f"{nodes} node(s): {acked} URLs popped and acked, {rate:,.0f} per second "
          f"({', '.join(str(r['acked']) for r in runs)} per node); CPU per URL: nodes "
          f"{sum(r['cpu'] for r in runs) / acked * 1e6:.0f} us, Redis {cpu / acked * 1e6:.0f} us "
          f"(this machine has {os.cpu_count()} CPUs)", flush=True)
    yield servers.delete(prefix)
    return rate


REPEAT = 0  # --repeat-links: links every list page has to the same pages (a menu), found before


def detail_links(list_id: int) -> list[str]:
    """The 50 detail URLs a list page links to (hosts spread as ``url`` spreads them), then REPEAT links that
    every list page but the first has (the site's first REPEAT detail pages, as a menu or a "top sellers" block:
    known to the pool once list pages 0 and 1 were added)."""
    return [url(list_id * 50 + j) for j in range(50)] + [url(j) for j in range(REPEAT) if list_id]


@defer.inlineCallbacks
def mix_pool(args: argparse.Namespace, reactor: Any, prefix: str, status_wait: float = 0.0) -> Gen:
    """A pool under ``prefix`` holding the mix's list pages (one in 51 of ``--mix-pages``); (pool, list pages)."""
    pool = yield open_pool(args, reactor, prefix, status_wait)
    lists = max(1, args.mix_pages // 51)
    for base in range(0, lists, BATCH):
        yield pool.addmany([f"http://{HOST.format(n=i % HOSTS)}/list/{i}.html"
                            for i in range(base, min(lists, base + BATCH))])
    return pool, lists


@defer.inlineCallbacks
def crawl_mix(args: argparse.Namespace, reactor: Any, servers: Servers) -> Gen:
    """Redis CPU (and the node's) per page over a crawl-shaped mix: lists add 50 links each, every page acked."""
    prefix = f"{args.prefix}mix:"
    pool, lists = yield mix_pool(args, reactor, prefix)
    run = yield Run.start(servers)
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
    seconds, node_us, shards = yield run.end(args, pages)
    yield pool.close()
    print(f"crawl mix: {pages} pages ({lists} lists of 50 links) in {seconds:.1f} s, {pages / seconds:,.0f} pages/s; "
          f"CPU per page: Redis {sum(shards):.1f} us, node {node_us:.1f} us", flush=True)
    if len(shards) > 1:
        print(f"  per shard: {', '.join(f'{us:.1f}' for us in shards)} us a page (spread {spread(shards):.0%}); "
              f"ceiling per shard {1e6 / max(shards):,.0f} pages/s", flush=True)
    yield servers.delete(prefix)
    return shards, pages / seconds


@defer.inlineCallbacks
def floor_mix(args: argparse.Namespace, reactor: Any, servers: Servers) -> Gen:
    """Redis CPU a page over the same mix with plain commands, pipelined, and no script: the least a shared
    frontier asks of Redis when nodes keep the rest (each host's politeness, retries) to themselves.

    A URL is seen once one SADD of its bucket's member (keys.py's buckets) answers 1; list pages' new links go
    to one queue in one RPUSH; a node takes ``--pop-batch`` URLs with one LPOP and holds them under one lease
    record (HSET, HDEL once all are done); a page done is one SADD of its done member.  Not spiderd's pool: a
    floor to hold its figure against (single Redis only)."""
    if len(servers.links) > 1:
        return 0.0
    link, prefix, bits = servers.links[0], f"{args.prefix}floor:", args.bucket_bits
    queue, leases = prefix + "queue", prefix + "leases"
    lists = max(1, args.mix_pages // 51)
    for base in range(0, lists, BATCH):
        yield link.execute("RPUSH", queue, *[f"http://{HOST.format(n=i % HOSTS)}/list/{i}.html"
                                             for i in range(base, min(lists, base + BATCH))])
    run = yield Run.start(servers)
    pages = pops = 0
    while True:
        urls = yield link.execute("LPOP", queue, str(args.pop_batch))
        if not urls:
            break
        pops += 1
        yield link.execute("HSET", leases, str(pops), "\n".join(urls))
        calls = []
        for u in urls:
            if "/list/" in u:
                found = detail_links(int(u.rsplit("/", 1)[1].split(".")[0]))
                marks = [link.execute("SADD", *seen_member(f, prefix, bits, 0)) for f in found]
                new = [f for f, fresh in zip(found, (yield defer.gatherResults(marks))) if fresh]
                if new:
                    calls.append(link.execute("RPUSH", queue, *new))
            calls.append(link.execute("SADD", *seen_member(u, prefix, bits, 1)))
        yield defer.gatherResults(calls)
        yield link.execute("HDEL", leases, str(pops))
        pages += len(urls)
    seconds, node_us, shards = yield run.end(args, pages)
    print(f"floor (plain commands, no script, {args.pop_batch} URLs a pop): {pages} pages in {seconds:.1f} s; "
          f"CPU per page: Redis {sum(shards):.1f} us, node {node_us:.1f} us", flush=True)
    yield servers.delete(prefix)
    return sum(shards)


@defer.inlineCallbacks
def owned_mix(args: argparse.Namespace, reactor: Any, servers: Servers) -> Gen:
    """Redis CPU a page of bench/owned.py's model (nodes owning domains) over the crawler-shaped mix, driven by
    ``CrawlerModel`` as the pool is (single Redis only)."""
    if len(servers.links) > 1:
        return 0.0
    prefix = f"{args.prefix}owned:"
    node = OwnedNode(servers.links[0], reactor, prefix, args.bucket_bits, run=args.run, status_wait=args.status_wait,
                      plain=args.owned_plain)
    yield node.start()
    lists = max(1, args.mix_pages // 51)
    for base in range(0, lists, BATCH):
        yield node.addmany([f"http://{HOST.format(n=i % HOSTS)}/list/{i}.html"
                            for i in range(base, min(lists, base + BATCH))])
        yield node.step(0)
    run = yield Run.start(servers)
    model = CrawlerModel(node, reactor, 64, args.fetch_ms / 1000, args.pop_batch, ahead=args.pop_ahead)
    pages = yield model.run()
    seconds, node_us, shards = yield run.end(args, pages)
    print(f"owned-domain model (runs of up to {args.run} URLs a domain, one request in flight a domain): {pages} "
          f"pages in {seconds:.1f} s, {pages / seconds:,.0f} pages/s, {pages / model.pops:.1f} URLs a pop, "
          f"{node.calls / pages:.2f} calls a page; CPU per page: Redis {sum(shards):.1f} us, node {node_us:.1f} us",
          flush=True)
    yield servers.delete(prefix)
    return sum(shards)


@defer.inlineCallbacks
def owned_memory(args: argparse.Namespace, reactor: Any, servers: Servers) -> Gen:
    """Bytes of Redis memory per URL of bench/owned.py's HashStates (one field a URL in a hash a seen bucket):
    ``used_memory`` growth while ``--seen`` URLs are recorded done (single Redis only)."""
    if len(servers.links) > 1:
        return 0.0
    link, prefix, states = servers.links[0], f"{args.prefix}omem:", HashStates()
    before = yield servers.used_memory()
    for base in range(0, args.seen, BATCH):
        calls = []
        for i in range(base, min(args.seen, base + BATCH)):
            _, bucket, member = located(url(i), prefix + states.infix, args.bucket_bits)
            calls.append(link.execute("HSET", bucket, str(member >> 3), "1"))
        yield defer.gatherResults(calls)
    per_url = ((yield servers.used_memory()) - before) / args.seen
    print(f"owned model's hash states: {args.seen} URLs in {2 ** args.bucket_bits} hashes: {per_url:.1f} bytes per "
          f"URL (used_memory)", flush=True)
    yield servers.delete(prefix)
    return per_url


def seen_member(u: str, prefix: str, bits: int, code: int) -> tuple[str, str]:
    """(bucket, member of state ``code``) of ``u`` in keys.py's seen buckets."""
    _, bucket, base = located(u, prefix, bits)
    return bucket, str(base + code)


class Run:
    """A measured run of a mix: the servers' CPU and commands, this process's CPU and the time from its start."""

    def __init__(self, servers: Servers, commands: dict[str, list[int]], cpu: list[float],
                 replica_cpu: list[float]) -> None:
        self.servers, self.commands, self.cpu, self.replica_cpu = servers, commands, cpu, replica_cpu
        self.replica_us: list[float] = []  # each replica's CPU a page, once ended
        self.node_cpu, self.started = process_cpu(), time.time()

    @classmethod
    @defer.inlineCallbacks
    def start(cls, servers: Servers) -> Gen:
        commands = yield servers.commandstats()
        return cls(servers, commands, (yield servers.cpu()), (yield servers.cpu(replicas=True)))

    @defer.inlineCallbacks
    def end(self, args: argparse.Namespace, pages: int) -> Gen:
        """(seconds, the node's CPU a page in us, each server's CPU a page in us), the commands shown if asked."""
        seconds, node_us = time.time() - self.started, (process_cpu() - self.node_cpu) / pages * 1e6
        shards = [used / pages * 1e6 for used in cpu_used(self.cpu, (yield self.servers.cpu()))]
        self.replica_us = [used / pages * 1e6 for used in cpu_used(self.replica_cpu,
                                                                   (yield self.servers.cpu(replicas=True)))]
        yield show_commands(args, self.servers, self.commands, pages)
        return seconds, node_us, shards


class CrawlerModel:
    """What spiderd.frontier.crawler does with the pool for each page, with fetches that take a random time.

    One pop in flight at a time, asking for ``concurrency`` minus the fetches
    under way (the crawler's ``_pull``, kicked at every fetch's end, waiting for
    ``pop_batch`` free slots while more than half are busy: ``pull_waits``); each URL
    fetched in an exponentially distributed time (mean ``fetch_s``), then
    ``fetched`` (not awaited), its links added if it is a list page, then its
    status set, as each page completes: not in lockstep with the pops.

    With ``ahead`` (``--pop-ahead``: ``[pool] redis_pop_ahead``, the crawler's ``pull_ahead``), the model pops
    ahead of its free slots instead: up to ``ahead`` leased URLs wait in a local queue for a free slot, and a pop
    (for the free slots and the queue's room) goes out once the queue is down to half of ``ahead``.
    """

    def __init__(self, pool: Any, reactor: Any, concurrency: int, fetch_s: float, pop_batch: int,
                 seed: int = 17, ahead: int = 0) -> None:
        self.pool, self.reactor, self.concurrency, self.fetch_s = pool, reactor, concurrency, fetch_s
        self.pop_batch, self.ahead = pop_batch, ahead
        self.queue: collections.deque[str] = collections.deque()
        self.rng = random.Random(seed)
        self.fetching = self.processing = self.pages = self.pops = 0
        self.popping = False
        self.kicked: Any = None
        self.done: defer.Deferred[int] = defer.Deferred()

    def run(self) -> defer.Deferred[int]:
        self.kick()
        return self.done

    def kick(self) -> None:
        if self.kicked is None and not self.done.called:
            self.kicked = self.reactor.callLater(0, self.pull)

    def pull(self) -> None:
        self.kicked = None
        self.start_queued()
        if self.popping:
            return
        wanted = pull_size(self.concurrency, self.fetching, len(self.queue), self.ahead, self.pop_batch)
        if wanted <= 0:
            return
        self.popping = True
        self.pops += 1
        self.pool.pop(wanted, 0).addCallback(self.popped).addErrback(self.done.errback)

    def start_queued(self) -> None:
        while self.queue and self.fetching < self.concurrency:
            self.fetching += 1
            self.reactor.callLater(self.rng.expovariate(1 / self.fetch_s), self.fetched, self.queue.popleft(),
                                   time.time())

    def popped(self, urls: dict[str, bool]) -> Any:
        self.popping = False
        self.queue.extend(urls)
        self.start_queued()
        if urls:
            self.kick()
        elif not self.fetching and not self.processing and not self.queue:
            return self.pool.size().addCallback(self.idle)
        return None

    def idle(self, waiting: int) -> None:
        if self.done.called:
            return
        if waiting == 0:
            self.done.callback(self.pages)
        else:  # none due yet
            self.reactor.callLater(0.01, self.kick)

    def fetched(self, u: str, started: float) -> None:
        self.pool.fetched(u, time.time() - started)
        self.fetching -= 1
        self.processing += 1
        self.kick()
        d = defer.succeed(0)
        if "/list/" in u:
            d = self.pool.addmany(detail_links(int(u.rsplit("/", 1)[1].split(".")[0])), detail=True, parent=u)
        d.addCallback(lambda _: self.pool.set_statuses([(u, 200)]))
        d.addCallbacks(self.processed, self.done.errback)

    def processed(self, _: object) -> None:
        self.processing -= 1
        self.pages += 1
        self.kick()


@defer.inlineCallbacks
def crawler_mix(args: argparse.Namespace, reactor: Any, servers: Servers) -> Gen:
    """Redis CPU per page over the same mix as ``crawl_mix``, driven as the crawler drives the pool (CrawlerModel)."""
    prefix = f"{args.prefix}cmix:"
    pool, _ = yield mix_pool(args, reactor, prefix, args.status_wait)
    run = yield Run.start(servers)
    model = CrawlerModel(pool, reactor, 64, args.fetch_ms / 1000, args.pop_batch, ahead=args.pop_ahead)
    calls = count_calls(pool)
    pages = yield model.run()
    seconds, node_us, shards = yield run.end(args, pages)
    yield pool.close()
    copies = (f", its replicas {sum(run.replica_us):.1f} us ({'/'.join(f'{us:.1f}' for us in run.replica_us)})"
              if run.replica_us else "")
    print(f"redis_durability = {args.mode!r}: Redis CPU a page {sum(shards):.1f} us, per shard "
          f"{'/'.join(f'{us:.1f}' for us in shards)}{copies}; {pages / seconds:,.0f} pages/s", flush=True)
    pops = (f"pops ahead of up to {args.pop_ahead} URLs" if args.pop_ahead else
            f"pops of {args.pop_batch} free slots or more")
    print(f"crawler-shaped mix (64 fetches in flight, {args.fetch_ms:g} ms a fetch on average, {pops}, "
          f"statuses waiting {args.status_wait:g} s): {pages} pages in "
          f"{seconds:.1f} s, {pages / seconds:,.0f} pages/s, {pages / model.pops:.1f} URLs a pop; CPU per page: "
          f"Redis {sum(shards):.1f} us, node {node_us:.1f} us; script calls a page: "
          f"{', '.join(f'{name} {n / pages:.2f}' for name, n in calls.most_common())}", flush=True)
    yield servers.delete(prefix)
    return sum(shards), shards, run.replica_us, pages / seconds


@defer.inlineCallbacks
def show_commands(args: argparse.Namespace, servers: Servers, before: dict[str, list[int]], pages: int) -> Gen:
    """With ``--commands``: the Redis commands run per page since ``before`` (scripts' own commands too), and the
    time ``INFO commandstats`` gives them (FCALL's includes its commands')."""
    if not args.commands:
        return
    after = yield servers.commandstats()
    rows = sorted(((name, calls - before.get(name, [0, 0])[0], usec - before.get(name, [0, 0])[1])
                   for name, (calls, usec) in after.items()), key=lambda row: -row[1])
    total = sum(calls for name, calls, _ in rows if name not in ("fcall", "evalsha", "eval", "info", "(reads)"))
    print(f"  Redis commands a page: {total / pages:.1f} in all, apart from the script calls", flush=True)
    for name, calls, usec in rows:
        if calls:
            print(f"    {name:<18} {calls / pages:7.3f} a page  {usec / pages:6.2f} us a page", flush=True)


def count_calls(pool: Any) -> collections.Counter[str]:
    """Script calls by name through ``pool``'s links (each partition's on a cluster) from now on."""
    calls: collections.Counter[str] = collections.Counter()
    for part in getattr(pool, "parts", [pool]):
        part.channel.link.run = counted_run(part.channel.link.run, calls)
    return calls


def counted_run(run: Any, calls: collections.Counter[str]) -> Any:
    def counted(script: Any, args: Any, *rest: Any) -> Any:
        calls[script.name] += 1
        return run(script, args, *rest)

    return counted


def spread(values: list[float]) -> float:
    """(max - min) / mean."""
    return (max(values) - min(values)) / (sum(values) / len(values))


@defer.inlineCallbacks
def seen_memory(args: argparse.Namespace, reactor: Any, servers: Servers) -> Gen:
    """Bytes of Redis memory per URL in spiderd's seen set and in a scrapy-redis-style fingerprint set."""
    prefix = args.prefix
    pool = yield open_pool(args, reactor, prefix)
    before = yield servers.used_memory()
    copies = yield servers.used_memory(replicas=True)
    yield in_flight(args.seen, lambda a, b: pool.seen_add([url(i) for i in range(a, b)]), "seen")
    ours = ((yield servers.used_memory()) - before) / args.seen
    yield replica_memory(servers, reactor, copies, args.seen, "seen")
    print(f"spiderd seen set: {args.seen} URLs: {ours:.1f} bytes per URL (used_memory)", flush=True)
    buckets = [(link, key) for link, key in (yield servers.scan(_glob_escape(prefix) + "*s:*")) if ":s:" in key]
    usage, encodings = [], set()
    for i in range(0, len(buckets), BATCH):  # (a cluster has P x 2^bits buckets: not all in one pipeline)
        usage += yield defer.gatherResults([link.execute("MEMORY", "USAGE", k, "SAMPLES", "0")
                                            for link, k in buckets[i:i + BATCH]])
        encodings.update((yield defer.gatherResults([link.execute("OBJECT", "ENCODING", k)
                                                     for link, k in buckets[i:i + BATCH]])))
    yield pool.close()
    print(f"spiderd seen set: {args.seen} URLs, {len(buckets)} buckets ({', '.join(sorted(encodings))}): "
          f"{ours:.1f} bytes per URL (used_memory), {sum(map(int, usage)) / args.seen:.1f} (MEMORY USAGE)", flush=True)
    dupefilter = prefix + "dupefilter"
    admin = servers.at(dupefilter)
    before = yield servers.used_memory()
    for base in range(0, args.seen, BATCH):
        fps = [hashlib.sha1(url(i).encode()).hexdigest() for i in range(base, min(args.seen, base + BATCH))]
        yield admin.execute("SADD", dupefilter, *fps)
    theirs = ((yield servers.used_memory()) - before) / args.seen
    usage = yield admin.execute("MEMORY", "USAGE", dupefilter, "SAMPLES", "0")
    print(f"scrapy-redis dupefilter (SHA-1 hex in one set, reproduced): {theirs:.1f} bytes per URL (used_memory), "
          f"{int(usage) / args.seen:.1f} (MEMORY USAGE)", flush=True)
    yield servers.delete(prefix)
    return ours, theirs


IN_FLIGHT = 4  # batches of BATCH URLs in flight in the memory measurements


@defer.inlineCallbacks
def in_flight(total: int, call: Any, what: str) -> Gen:
    """``call(first, end)`` for each batch of BATCH of ``total`` URLs, IN_FLIGHT at a time; a line each million."""
    gate, started = defer.DeferredSemaphore(IN_FLIGHT), time.time()

    def batch(base: int) -> defer.Deferred[Any]:
        end = min(total, base + BATCH)
        if end % 1_000_000 < BATCH and end >= 1_000_000:
            print(f"  {end:,} URLs {what} after {time.time() - started:.0f} s", flush=True)
        return call(base, end)

    yield defer.gatherResults([gate.run(batch, base) for base in range(0, total, BATCH)], consumeErrors=True)


@defer.inlineCallbacks
def replica_memory(servers: Servers, reactor: Any, before: int, urls: int, what: str) -> Gen:
    """With replicas: print their ``used_memory`` growth a URL since ``before``, once they have caught up."""
    if not servers.replicas:
        return
    while not (yield servers.replicated()):
        yield task.deferLater(reactor, 0.5, lambda: None)
    grown = ((yield servers.used_memory(replicas=True)) - before) / urls
    print(f"  {what}: the replicas' used_memory grew {grown:.1f} bytes per URL", flush=True)


@defer.inlineCallbacks
def waiting_memory(args: argparse.Namespace, reactor: Any, servers: Servers) -> Gen:
    """Bytes of Redis memory per waiting URL: ``used_memory`` growth while ``--seen`` URLs are queued."""
    prefix = f"{args.prefix}wait:"
    pool = yield open_pool(args, reactor, prefix)
    before = yield servers.used_memory()
    copies = yield servers.used_memory(replicas=True)
    yield in_flight(args.seen, lambda a, b: pool.addmany([url(i) for i in range(a, b)]), "queued")
    per_url = ((yield servers.used_memory()) - before) / args.seen
    yield replica_memory(servers, reactor, copies, args.seen, "waiting")
    yield pool.close()
    print(f"waiting URLs: {args.seen} queued over {HOSTS} hosts: {per_url:.1f} bytes per URL (used_memory)", flush=True)
    yield servers.delete(prefix)
    return per_url


@defer.inlineCallbacks
def idle_cpu(args: argparse.Namespace, reactor: Any, servers: Servers) -> Gen:
    """(each master's, each replica's) CPU seconds a second while nothing is asked of them for ``--idle`` seconds:
    cron, the cluster bus, replication pings (about 1-2 ms a second each), which a slow mix counts in its pages."""
    masters, replicas = (yield servers.cpu()), (yield servers.cpu(replicas=True))
    yield task.deferLater(reactor, args.idle, lambda: None)
    masters = [used / args.idle for used in cpu_used(masters, (yield servers.cpu()))]
    replicas = [used / args.idle for used in cpu_used(replicas, (yield servers.cpu(replicas=True)))]
    print(f"idle CPU: masters {'/'.join(f'{1e3 * r:.2f}' for r in masters)} ms a second, replicas "
          f"{'/'.join(f'{1e3 * r:.2f}' for r in replicas)}", flush=True)
    return masters, replicas


def net_keys(mode: str, each: list[float], copies: list[float], rate: float,
             idle: tuple[list[float], list[float]]) -> str:
    """RESULT keys of a mode's Redis CPU a page less what the servers spend idle over the mix's time (1 / rate a
    page): ``redis_us_per_page_net_<mode>``, ``replica_us_per_page_net_<mode>``."""
    net = sum(us - r * 1e6 / rate for us, r in zip(each, idle[0]))
    copies_net = sum(us - r * 1e6 / rate for us, r in zip(copies, idle[1]))
    return f"redis_us_per_page_net_{mode}={net:.1f} " + (f"replica_us_per_page_net_{mode}={copies_net:.1f} "
                                                         if copies else "")


@defer.inlineCallbacks
def driver(reactor: Any, args: argparse.Namespace) -> Gen:
    servers = yield Servers.open(args.redis, args.ports)
    only = set(args.only.split(",")) if args.only else set(PARTS)
    nothing = defer.succeed
    try:
        shards, mix_rate = yield (crawl_mix(args, reactor, servers) if "mix" in only else nothing(([0.0], 0.0)))
        durable: dict[str, tuple[float, list[float], list[float], float]] = {}
        idle = yield (idle_cpu(args, reactor, servers) if "crawler" in only and args.idle > 0 else nothing(None))
        for mode in args.durability.split(",") if "crawler" in only else ():
            args.mode = mode
            durable[mode] = yield crawler_mix(args, reactor, servers)
        args.mode = args.durability.split(",")[0]
        crawler = durable[args.mode][0] if durable else 0.0
        one = yield (pop_ack_rate(args, reactor, servers, 1) if "popack" in only else nothing(0.0))
        two = yield (pop_ack_rate(args, reactor, servers, 2) if "popack" in only else nothing(0.0))
        ours, theirs = yield (seen_memory(args, reactor, servers) if "seen" in only else nothing((0.0, 0.0)))
        waiting = yield (waiting_memory(args, reactor, servers) if "waiting" in only else nothing(0.0))
        floor = yield (floor_mix(args, reactor, servers) if "floor" in only else nothing(0.0))
        owned = yield (owned_mix(args, reactor, servers) if "owned" in only else nothing(0.0))
        hash_bytes = yield (owned_memory(args, reactor, servers) if "owned-memory" in only else nothing(0.0))
    finally:
        yield servers.delete(args.prefix)
        yield servers.close()
    per_shard = ""
    if len(shards) > 1:
        per_shard = (f"shards={len(shards)} redis_us_per_page_per_shard={'/'.join(f'{us:.1f}' for us in shards)} "
                     f"shard_spread={spread(shards):.2f} pages_per_s_ceiling_per_shard={1e6 / max(shards):.0f} ")
    by_mode = "".join(f"redis_us_per_page_{mode}={total:.1f} redis_us_per_page_per_shard_{mode}="
                      f"{'/'.join(f'{us:.1f}' for us in each)} "
                      + (f"replica_us_per_page_{mode}={sum(copies):.1f} " if copies else "")
                      + f"pages_per_s_{mode}={rate:.0f} ceiling_per_shard_{mode}={1e6 / max(each):.0f} "
                      + (net_keys(mode, each, copies, rate, idle) if idle else "")
                      for mode, (total, each, copies, rate) in durable.items()) if len(durable) > 1 else ""
    print(f"RESULT {by_mode}redis_cpu_us_per_page={crawler or sum(shards):.1f} "  # issue 17's key: the crawler-shaped figure
          f"redis_us_per_page={sum(shards):.1f} redis_us_per_page_crawler={crawler:.1f} {per_shard}mix_pages_per_s={mix_rate:.0f} "
          f"pop_ack_1node={one:.0f} pop_ack_2node={two:.0f} redis_bytes_per_url={ours:.1f} "
          f"scrapy_redis_bytes_per_url={theirs:.1f} redis_bytes_per_waiting_url={waiting:.1f}"
          + (f" redis_us_per_page_floor={floor:.1f}" if floor else "")
          + (f" redis_us_per_page_owned={owned:.1f}" if owned else "")
          + (f" owned_hash_bytes_per_url={hash_bytes:.1f}" if hash_bytes else ""), flush=True)  # (no floor on a cluster)


def main() -> None:
    global HOST, HOSTS, REPEAT
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default=None,
                        help="a redis:// URL to use (default: a private redis-server started and stopped by this run)")
    parser.add_argument("--cluster", action="store_true", help="start a 3-master Redis Cluster and bench on it")
    parser.add_argument("--aof", action="store_true", help="--cluster: AOF with fsync always (as the tests run it)")
    parser.add_argument("--replicas", type=int, default=0, help="--cluster: replicas of each master")
    parser.add_argument("--idle", type=float, default=10.0,
                        help="seconds of the servers' idle CPU measured before the crawler-shaped mix (0: none)")
    parser.add_argument("--fsync", default="always", choices=("always", "everysec"), help="--aof: appendfsync")
    parser.add_argument("--server", default="redis-server",
                        help="--cluster: the redis-server binary its nodes run (\"aof\" needs 7.2 or later)")
    parser.add_argument("--durability", default="none",
                        help="[pool] redis_durability; several, comma-separated: the crawler-shaped mix once each")
    parser.add_argument("--domains", action="store_true", help="hosts are 1000 registered domains (www.shopN.com)")
    parser.add_argument("--hosts", type=int, default=HOSTS, help="hosts the URLs are spread over")
    parser.add_argument("--bucket-bits", type=int, default=16, help="seen_bucket_bits (per partition on a cluster)")
    parser.add_argument("--urls", type=int, default=200_000, help="URLs per pop+ack run")
    parser.add_argument("--seen", type=int, default=1_000_000, help="URLs in the memory measurements")
    parser.add_argument("--fetch-ms", type=float, default=20.0, help="mean fetch time in the crawler-shaped mix")
    parser.add_argument("--mix-pages", type=int, default=51_000, help="pages in the crawl-shaped mix")
    parser.add_argument("--loops", type=int, default=4, help="pop+ack loops in flight per node")
    parser.add_argument("--status-wait", type=float, default=PoolSection().redis_status_wait,
                        help="crawler-shaped mix: [pool] redis_status_wait (seconds)")
    parser.add_argument("--pop-batch", type=int, default=PoolSection().redis_pop_batch,
                        help="crawler-shaped mix: [pool] redis_pop_batch")
    parser.add_argument("--pop-ahead", type=int, default=PoolSection().redis_pop_ahead,
                        help="crawler-shaped mix: [pool] redis_pop_ahead (0: pops wait for --pop-batch free slots)")
    parser.add_argument("--repeat-links", type=int, default=0,
                        help="links every list page has to the same pages (known once added), beside its 50 new ones")
    parser.add_argument("--known-urls", type=int, default=PoolSection().redis_known_urls,
                        help="[pool] redis_known_urls (0: every link goes to Redis)")
    parser.add_argument("--run", type=int, default=16, help="owned: URLs a domain's run takes at most")
    parser.add_argument("--owned-plain", choices=("set", "hash"), default="",
                        help="owned: statuses and adds as plain commands, URL states in seen sets or hashes")
    parser.add_argument("--only", default="", help=f"comma-separated parts to run ({','.join(PARTS)}; all by default)")
    parser.add_argument("--commands", action="store_true", help="print the Redis commands a page (INFO commandstats)")
    parser.add_argument("--prefix", default=f"bcl{os.getpid() % 100000}:")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.ports = None
    args.mode = args.durability.split(",")[0]
    args.cluster = args.cluster or args.replicas > 0
    REPEAT, HOSTS = args.repeat_links, args.hosts
    args.domains = args.domains or args.cluster
    if args.domains:
        HOST = "www.shop{n}.com"
    if args.worker or (args.redis is not None and not args.cluster):
        task.react(worker if args.worker else driver, (args,))
    elif args.cluster:
        with tempfile.TemporaryDirectory(prefix="spiderd-bench-cluster-") as directory:
            cluster = RedisCluster(directory, aof=args.aof, replicas=args.replicas, server=args.server,
                                   fsync=args.fsync).start()
            try:
                args.redis, args.ports = cluster.url, cluster.ports
                print(f"Redis Cluster of {cluster.masters} masters with {args.replicas} replica(s) each on ports "
                      f"{cluster.ports}", flush=True)
                task.react(driver, (args,))
            finally:
                cluster.stop()
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
