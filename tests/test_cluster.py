"""Three real nodes (``twistd -n spiderd``) share one Redis frontier and one MariaDB store; one is killed halfway.

The frontier is the machine's Redis, or a real 3-master Redis Cluster started for the test (the partitioned
pool; the demo site is one host, so its URLs are one partition's, on one master).

Each node runs the all role with ``[batch] targets = []`` (it fetches detail
pages itself) and ``exit_when_done``.  The generated site logs every request
with the fetching node's User-Agent, so fetches are counted per page and node.
Node 0 is killed with SIGKILL once about half the pages are stored; its leases
(``pending_threshold`` 10 s) expire and the other nodes take its URLs over.
A node exits only when nothing is waiting and nothing is leased by any node.
A per-host delay paces the whole crawl (over 12 s), so a node slow to start
still gets its share before the kill; the test takes about 25 s.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator

import pymysql
import pytest

from spiderd.demo.config import DEMO
from spiderd.demo.pages import SiteSpec
from spiderd.frontier.pool.redis.cluster import key_slot
from spiderd.frontier.pool.redis.keys import KEEP_HASHTABLE
from spiderd.frontier.pool.redis.partitions import partition_tags

from . import services
from .rediscluster import RedisCluster
from .test_twistd import ROOT, TWISTD

SPEC = SiteSpec(lists=20, details=600)
NODES = 3
KILL_AT = SPEC.details // 2  # stored pages
PENDING_THRESHOLD = 10
LEASE_SLACK = 1.0  # seconds between a pop and its request's arrival at the site, at most
DELAY = 0.02  # per_host_delay: the crawl lasts over 12 s, however fast the machine
DEADLINE = 120.0  # seconds: a hung crawl fails instead of hanging the suite


def redis(*command: str) -> Any:
    """One Redis command over a blocking socket (RESP), for setting up and checking."""
    with socket.create_connection(services.REDIS, timeout=5) as s:
        s.sendall(b"".join([f"*{len(command)}\r\n".encode()] + [f"${len(c.encode())}\r\n{c}\r\n".encode()
                                                                 for c in command]))
        return _reply(s.makefile("rb"))


def _reply(f: Any) -> Any:
    line = f.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:]
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind in (b"+", b":"):
        return rest.decode()
    if kind == b"$":
        return None if rest == b"-1" else f.read(int(rest) + 2)[:-2].decode()
    return [_reply(f) for _ in range(int(rest))]


def mysql(database: str | None, sql: str) -> list[Any]:
    connection = pymysql.connect(**{**services.need_mysql(), "database": database}, autocommit=True)
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql)
            return list(cursor.fetchall())
    finally:
        connection.close()


def stored(database: str) -> list[tuple[str, int]]:
    try:
        return [(url, int(h)) for url, h in mysql(database, "SELECT url, urlhash FROM crawler_html")]
    except pymysql.err.ProgrammingError:  # the first batch has not created the table yet
        return []


def fingerprint(url: str) -> str:
    """The Redis pool's lease key of a URL (the first 64 bits of its SHA-1, hex)."""
    return hashlib.sha1(url.encode()).hexdigest()[:16]


@dataclass
class Frontier:
    """The shared pool's Redis as the test reads it: its URL, key space and the pool's key prefixes."""

    url: str
    namespace: str
    prefixes: list[str]  # one for one Redis, one per partition on a cluster (partition 0 first)
    command: Callable[..., Any]  # (command, key, *args) -> the reply

    def leased(self) -> set[str]:
        return {fp for prefix in self.prefixes for fp in self.command("HKEYS", prefix + "lease")} - {KEEP_HASHTABLE[0]}

    def counters(self) -> dict[str, int]:
        """The pool's counters summed over its prefixes; one that no prefix holds is absent (not 0)."""
        total: Counter[str] = Counter()
        for prefix in self.prefixes:
            flat = self.command("HGETALL", prefix + "counters")
            total.update({k: int(v) for k, v in zip(flat[::2], flat[1::2])})
        return dict(total)

    def checkpoint(self, name: str) -> int | None:
        """The latest count under ``name``: on a cluster, the largest of the partitions' (as the pool reads it)."""
        counts = [self.command("HGET", prefix + "checkpoints", name) for prefix in self.prefixes]
        return max((int(count) for count in counts if count is not None), default=None)


@pytest.fixture(params=["redis", "cluster"])
def frontier(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Frontier]:
    """A Redis key space of this test on the machine's Redis (deleted after it) or a Redis Cluster of its own."""
    namespace = f"spiderd-cluster:{uuid.uuid4().hex[:12]}:"
    if request.param == "cluster":
        services.need_redis_cluster_tools()
        cluster = RedisCluster(tmp_path / "redis-cluster").start()
        try:
            yield Frontier(cluster.url, namespace, [f"{namespace}spiderd:{{{tag}}}:" for tag in partition_tags(12)],
                           partial(cluster_command, cluster))
        finally:
            cluster.stop()
        return
    services.need_redis()
    yield Frontier(f"redis://{services.REDIS[0]}:{services.REDIS[1]}/0", namespace, [f"{namespace}spiderd:"], redis)
    cursor = "0"
    while True:
        cursor, keys = redis("SCAN", cursor, "MATCH", namespace + "*", "COUNT", "1000")
        if keys:
            redis("DEL", *keys)
        if cursor == "0":
            break


def cluster_command(cluster: RedisCluster, command: str, key: str, *args: str) -> Any:
    """One read of ``key`` through redis-cli on its master: a hash's keys or fields as a list, a field or None."""
    text = cluster.cli(cluster.ports[cluster.master_of(key_slot(key))], command, key, *args)
    return (text or None) if command == "HGET" else text.split()


@pytest.fixture
def database() -> Iterator[str]:
    """A MariaDB database of this test, dropped after it."""
    services.need_mysql()
    name = f"spiderd_cluster_{uuid.uuid4().hex[:12]}"
    mysql(None, f"CREATE DATABASE `{name}`")
    yield name
    mysql(None, f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The generated site in a process of its own: its root URL and its request log."""
    log = tmp_path / "requests.log"
    command = [sys.executable, "-m", "spiderd.demo.site", "--port", "0", "--lists", str(SPEC.lists),
               "--details", str(SPEC.details), "--requests-log", str(log)]
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line.startswith("LISTENING "), line
    yield f"http://127.0.0.1:{int(line.split()[1])}/", log
    child.kill()
    child.wait()


def node_config(tmp_path: Path, index: int, root: str, frontier: Frontier, database: str) -> Path:
    """The TOML of node ``index``: all role, Redis pool, MariaDB store, short leases, its own User-Agent."""
    m = services.need_mysql()
    sites = "".join(
        f'[[sites]]\nname = "{s["name"]}"\nallowed_hosts = {literals(s["allowed_hosts"])}\n'
        f"list_urls = {literals(s['list_urls'])}\ndetail_urls = {literals(s['detail_urls'])}\n"
        for s in DEMO["sites"]
    )
    text = f"""
[spiderd]
data_dir = "{tmp_path / f'node{index}'}"
log_interval = 2
exit_when_done = true
[pool]
backend = "redis"
redis_url = "{frontier.url}"
redis_prefix = "{frontier.namespace}spiderd:"
redis_namespace = "{frontier.namespace}"
seeds = ["{root}"]
pending_threshold = {PENDING_THRESHOLD}
failure_threshold = 1
[fetch]
concurrency = 8
per_host_concurrency = 24       # the host takes all three nodes at full concurrency
per_host_delay = {DELAY}          # at most 1/DELAY pages a second over all nodes: a node slow to start still joins
timeout = 5
connect_timeout = 2
user_agent = "spiderd-node{index}"
[parse]
workers = 0
[batch]
targets = []
[store]
url = "mysql://{m['user']}{':' + str(m['password']) if m['password'] else ''}@{m['host']}:{m['port']}/{database}"
batch_size = 10
[api]
port = 0
{sites}"""
    path = tmp_path / f"node{index}.toml"
    path.write_text(text)
    return path


def start_node(config: Path) -> subprocess.Popen[str]:
    """``twistd -n spiderd --config CONFIG``, its output in CONFIG with .log (a pipe nobody reads could fill)."""
    command = [sys.executable, "-c", TWISTD, "-n", "--pidfile=", "spiderd", "--config", str(config)]
    with open(config.with_suffix(".log"), "w") as out:
        return subprocess.Popen(command, cwd=config.parent, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=out,
                                stderr=subprocess.STDOUT, text=True)


def output(node: subprocess.Popen[str]) -> str:
    return Path(node.args[-1]).with_suffix(".log").read_text()  # type: ignore[index]


def literals(items: list[str]) -> str:
    """A TOML array of literal strings (regexes keep their backslashes)."""
    return "[" + ", ".join(f"'{item}'" for item in items) + "]"


def wait_for(predicate: Any, what: str, nodes: list[subprocess.Popen[str]]) -> None:
    """Poll the crawl's progress (other processes, not a timer of ours) until ``predicate()`` is true."""
    deadline = time.monotonic() + DEADLINE
    while not predicate():
        for node in nodes:
            assert node.poll() is None, output(node)[-3000:]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def fetches(log: Path) -> dict[str, list[tuple[float, str]]]:
    """Path -> (time, node) of each GET, from the site's request log."""
    found: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for line in log.read_text().splitlines():
        when, method, path, agent = line.split(" ", 3)
        if method == "GET":
            found[path].append((float(when), agent))
    return found


def every_node_fetched(log: Path) -> bool:
    agents = {agent for requests in fetches(log).values() for _, agent in requests}
    return agents >= {f"spiderd-node{i}" for i in range(NODES)}


def test_nodes_share_the_crawl_and_survive_a_kill(tmp_path: Path, frontier: Frontier, database: str,
                                                   site: tuple[str, Path]) -> None:
    """Every detail page stored once, none missing; a page fetched twice only if the killed node held its lease."""
    root, log = site
    configs = [node_config(tmp_path, i, root, frontier, database) for i in range(NODES)]
    nodes = [start_node(config) for config in configs]
    try:
        wait_for(lambda: len(stored(database)) >= KILL_AT and every_node_fetched(log),
                 f"{KILL_AT} stored pages, every node fetching", nodes)
        nodes[0].kill()
        nodes[0].wait()
        leased = frontier.leased()  # node 0's leases among them, until they expire
        for node in nodes[1:]:
            node.wait(timeout=DEADLINE)
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait()
    for node in nodes[1:]:
        assert node.returncode == 0, output(node)[-3000:]
        assert "Nothing left to crawl" in output(node)
    expected = SPEC.expected()
    rows = stored(database)
    paths = sorted(url[len(root) - 1:] for url, _ in rows)
    assert paths == sorted(expected.details_ok)
    assert len({urlhash for _, urlhash in rows}) == len(rows)
    counters = frontier.counters()
    assert (counters["waiting"], counters["pending"]) == (0, 0)
    assert_fetched_once_unless_leased_by_the_dead(fetches(log), leased, root, expected)
    items = sorted(url[len(root) - 1:] for url in item_urls(tmp_path, frontier))
    assert items == sorted(expected.details_ok)  # once each, over the nodes, node 0's files cut where it died


def item_urls(tmp_path: Path, frontier: Frontier) -> list[str]:
    """The URLs of every node's item lines; a .part file (node 0 was killed, never restarted) cut at the
    checkpoint the shared pool holds for it, as that node's next start would."""
    urls = []
    for path in sorted(tmp_path.glob("node*/items/*.jl*")):
        data = path.read_bytes()
        if path.name.endswith(".part"):
            committed = frontier.checkpoint("items:" + path.name[: -len(".part")])
            data = data[: int(committed or 0)]
        urls += [json.loads(line)["url"] for line in data.splitlines()]
    return urls


def assert_fetched_once_unless_leased_by_the_dead(found: dict[str, list[tuple[float, str]]], leased: set[str],
                                                 root: str, expected: Any) -> None:
    """A page is fetched once, unless node 0 fetched it and held its lease when it died, or a lease ran out
    (a second fetch at least pending_threshold after the first)."""
    redirected_to = set(expected.redirects.values())  # also requested by following a redirect
    pages = (expected.details_ok - redirected_to) | expected.lists | expected.not_found
    missing = [path for path in pages if path not in found]
    assert not missing, missing[:10]
    for path in pages:
        (first, who), *later = sorted(found[path])
        for when, _ in later:
            by_the_dead = who == "spiderd-node0" and fingerprint(root + path[1:]) in leased and len(later) == 1
            # times are arrivals at the site; a lease starts when the URL is popped, a little before its first
            # arrival, so a second fetch after an expiry arrives at least about pending_threshold later
            assert by_the_dead or when - first >= PENDING_THRESHOLD - LEASE_SLACK, (path, found[path])
