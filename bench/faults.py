"""The fault suite: real daemons in separate processes, broken on purpose, then the invariants checked.

    python bench/faults.py                 # every fault, the 10,000-page site (the better part of an hour)
    python bench/faults.py --details 2000  # quicker
    python bench/faults.py --only frontier-kill9,inprocess-kill9
    python bench/faults.py --details 2000 --load -1 --stretch 2   # under load: a busy process a core

Topologies (fresh directories each time), against the generated site
(``python -m spiderd.demo.site``, with its 404s, 500s, redirects and slow
pages):

- a frontier (``twistd -n spiderd --role frontier``: LevelDB or Redis pool,
  batches of 100), a worker (``--role worker``: SQLite or MySQL page store,
  feed files shipped over FTP) and a pyftpdlib FTP server standing in for
  the analytics host; Redis and MariaDB run as private instances on free
  ports (their own data directories), so the machine's servers are never
  restarted;
- one node in the ``all`` role: ``targets = []`` (details fetched in process,
  items in its items directory; SQLite store, or none) or ``targets =
  ["local"]`` (its own worker, feed files over FTP).  These are killed
  (SIGKILL of the whole process group) 40 times, each 0.2-1.5 s (at random)
  after the restarted node has written something again, then run to the end.

``*-disk-full``: one ``all`` node whose data directory is a tmpfs of its own, filled for 15 s once a third of
the pages are done (its status must say the storage is blocked meanwhile, and it must log fewer than 100 lines
about it).  ``under-load``: the frontier and the worker SIGKILLed at random moments with a busy process on
each core and the timings stretched.  ``redis-kill9``: the pool's Redis SIGKILLed 10 times while the frontier
crawls list pages, started again at once (a kill between Redis running a call and its answer reaching the
frontier loses the answer: that lost one list page's detail URLs, marked seen, once).

The invariants checked at the end of every scenario: every good detail page
of the site is in the page store and in the items ("stored" counts the pages
found in both; with the store off, in the items), once ("dups": second rows in
the store; "missing" and "itemdup": good pages with no item line, second item
lines); every batch the frontier sent, and every batch left in its spool,
reached the worker ("lost"); nothing counted done that was not done ("wrong":
pages stored or in items that are not good detail pages, and URLs the pool
(LevelDB, or Redis read before its server stops: every master of a cluster) counts as batched that no worker job
carried: by count, more than the jobs carried, once a job's URL list is gone with its end).  "Time to
recover" is from the end of a fault (the process or server back) to the next
page stored (for the frontier: to its next batch sent).  Before anything
starts it checks that this machine has what the chosen scenarios need
(pyftpdlib and the other test extras, redis-server, MariaDB, root for a
tmpfs), else it says what is missing and exits with status 2.  A scenario that breaks an invariant keeps its
work directory and says so (``BROKEN ...``).  Ends with one ``RESULT`` line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import re
import urllib.request

from faultkit import (FTP_SERVER, ROOT, STOP_LIMIT, TWISTD, Load, PrivateMariaDB, PrivateRedis, Proc, Row, Tmpfs,
                      drained, free_port, frontier_batches, HEADER, load_average, missing_requirements, mysql_urls,
                      node_toml, redis_batched, wait_port)

sys.path.insert(0, str(ROOT))

from spiderd.demo.pages import SiteSpec  # noqa: E402
from tests.rediscluster import RedisCluster  # noqa: E402

STRETCH = 1.0  # --stretch: the scenarios' waits, outages and random moments, multiplied


def pause(seconds: float) -> None:
    """Sleep ``seconds`` x STRETCH (a fault's moment or outage)."""
    time.sleep(seconds * STRETCH)

class Scenario:
    """One crawl of the site by a frontier and a worker, with hooks to break things."""

    frontier_role = worker_role = ""  # the data directories (and logs) of the frontier and of the worker

    def __init__(self, name: str, root: Path, site_url: str, spec: SiteSpec, *, store: str = "sqlite",
                 pool: str = "leveldb", redis_port: int = 0) -> None:
        self.name, self.dir, self.site_url, self.spec = name, root / name, site_url, spec
        self.dir.mkdir(parents=True)
        self.ftp_root = self.dir / "ftp"
        self.ftp_root.mkdir()
        self.ftp_port, self.worker_port = free_port(), free_port()
        self.store_kind = store
        self.store_url = store if store != "sqlite" else "sqlite:///pages.sqlite3"
        self.pool, self.redis_port = pool, redis_port
        self.ftp = Proc("ftp", [sys.executable, "-c", FTP_SERVER, str(self.ftp_port), str(self.ftp_root),
                                str(free_port())], self.dir / "ftp.log")
        self._make_nodes()

    def _make_nodes(self) -> None:
        self.frontier_role, self.worker_role = "frontier", "worker"
        self.worker = self._node("worker")
        self.frontier = self._node("frontier")

    def _node(self, role: str) -> Proc:
        config = self.dir / f"{role}.toml"
        config.write_text(self._config(role))
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        command = [sys.executable, "-c", TWISTD, "-n", "--pidfile=", "spiderd", "--config", str(config)]
        return Proc(role, command, self.dir / f"{role}.log", env)

    def _config(self, role: str) -> str:
        pool = f'backend = "redis"\nredis_url = "redis://127.0.0.1:{self.redis_port}/0"' if self.pool == "redis" else ""
        return node_toml(role=role, data_dir=self.dir / role, site_url=self.site_url, store_url=self.store_url,
                         targets=f'["127.0.0.1:{self.worker_port}"]', worker_port=self.worker_port,
                         ftp_port=self.ftp_port, per_host=(4, 0.02) if role == "frontier" else (32, 0), pool=pool)

    # -- running ------------------------------------------------------------------------

    def start(self) -> None:
        self.ftp.start()
        wait_port(self.ftp_port, proc=self.ftp)
        self.worker.start()
        wait_port(self.worker_port, proc=self.worker)
        self.frontier.start()

    def stop(self) -> None:
        for proc in (self.frontier, self.worker, self.ftp):
            if proc.alive():
                proc.term() if proc is not self.ftp else proc.kill9()

    # -- what the crawl produced ----------------------------------------------------------

    def expected(self) -> set[str]:
        base = self.site_url.rstrip("/")
        return {base + path for path in self.spec.expected().details_ok}

    def stored(self) -> list[str]:
        if self.store_kind == "none":
            return []
        if self.store_kind == "sqlite":
            path = self.dir / self.worker_role / "pages.sqlite3"
            if not path.exists():
                return []
            try:
                with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
                    return [row[0] for row in db.execute("SELECT url FROM crawler_html")]
            except sqlite3.Error:
                return []
        return mysql_urls(self.store_url)

    def items(self) -> list[dict[str, Any]]:
        items = []
        for path in sorted((self.ftp_root / "feeds").glob("*.jl")):
            items += [json.loads(line) for line in path.read_text().splitlines() if line]
        return items

    def progress(self) -> int:
        return len(set(self.stored()) & self.expected())

    def complete(self) -> bool:
        wanted = self.expected()
        return wanted <= {i["url"] for i in self.items()} and wanted <= set(self.stored())

    def wait_complete(self, timeout: float = 300.0) -> bool:
        deadline = time.monotonic() + timeout * STRETCH
        while time.monotonic() < deadline:
            if self.complete():
                return True
            time.sleep(0.5)  # polling files other processes write
        return False

    def wait_progress(self, after: int, timeout: float = 120.0) -> float:
        """Seconds until more pages are stored than ``after`` (the time to recover)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout * STRETCH:
            if self.progress() > after or self.complete():
                return time.monotonic() - started
            time.sleep(0.1)
        return float("inf")

    def wait_batches(self, after: int, timeout: float = 120.0) -> float:
        """Seconds until the frontier has sent more batches than ``after`` (a restarted frontier works again)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout * STRETCH:
            if len(frontier_batches(self.dir / "frontier.log")) > after or self.complete():
                return time.monotonic() - started
            time.sleep(0.1)
        return float("inf")

    def wait_pages(self, count: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout * STRETCH
        while self.progress() < count and time.monotonic() < deadline:
            time.sleep(0.1)

    def check(self, row: Row) -> Row:
        """The invariants, once every process is stopped."""
        expected = self.expected()
        stored = self.stored()
        items = [i["url"] for i in self.items()]
        row.expected = len(expected)
        row.stored = len(set(stored) & set(items) & expected)
        row.duplicates = len(stored) - len(set(stored))
        batches, urls, count = self.carried()
        row.batches_lost = self.batches_lost(batches)
        row.wrong = len((set(stored) | set(items)) - expected) + self.batched_not_carried(urls, count)
        row.items_expected = len(expected)
        row.items_missing = len(expected - set(items))
        row.items_duplicated = len(items) - len(set(items))
        return row

    def carried(self) -> tuple[set[int], set[str] | None, int]:
        """The batch numbers and the URLs of every job the worker accepted (URLs: None when some job's are gone:
        a worker keeps a job's URLs in its ``.urls`` file only until the job ends), and how many URLs they
        carried (each distinct batch's ``url_count``: at least the distinct URLs carried)."""
        jobs = self.dir / self.worker_role / "worker" / "jobs"
        batches: dict[int, int] = {}
        urls: set[str] | None = set()
        for path in jobs.glob("*.json") if jobs.exists() else []:
            try:
                job = json.loads(path.read_text())
            except ValueError:
                continue
            batch = (job.get("args") or {}).get("batch")
            if batch is not None:
                batches[int(batch)] = int(job.get("url_count") or 0)
            settings = job.get("settings") or {}
            listed = path.with_suffix(".urls")
            if isinstance(settings, dict) and "DISTRIBUTED_START_URLS" in settings and urls is not None:
                urls.update(json.loads(settings["DISTRIBUTED_START_URLS"]))
            elif listed.exists() and urls is not None:
                urls.update(json.loads(listed.read_text()))
            else:
                urls = None
        return set(batches), urls, sum(batches.values())

    def batches_lost(self, carried: set[int]) -> int:
        """Batches the frontier sent (its log names them) or still spools that no worker job carries."""
        sent = frontier_batches(self.dir / f"{self.frontier_role}.log")
        spooled = {int(p.stem.split("-")[1])
                   for p in (self.dir / self.frontier_role / "batches").glob("batch-*.json")}
        return len((sent | spooled) - carried)

    def batched_not_carried(self, carried_urls: set[str] | None, carried_count: int) -> int:
        """Fingerprints the pool counts as batched that no job carried (when the jobs' URLs are gone: how many more
        the pool counts batched than the jobs carried)."""
        batched, fingerprint = self.pool_batched()
        if carried_urls is None:
            return max(0, len(batched) - carried_count)
        return len(batched - {fingerprint(u) for u in carried_urls})

    def pool_batched(self) -> tuple[set[int], Callable[[str], int]]:
        """The fingerprints the frontier's pool counts as batched, and the pool's fingerprint of a URL: the LevelDB
        pool opened once the frontier is gone, the Redis pool read while its server still runs."""
        if self.pool != "leveldb":
            from spiderd.frontier.pool.redis.keys import fingerprint_hex

            return redis_batched(self.redis_port, "spiderd:"), lambda url: int(fingerprint_hex(url), 16)
        from twisted.internet.task import Clock

        from spiderd.frontier.pool import open_leveldb_pool
        from spiderd.core.urls import fingerprint

        pool = open_leveldb_pool(str(self.dir / self.frontier_role / "pool"), Clock())
        try:
            records = drained(pool.export())
        finally:
            pool.close()
        return {int(r["fp"], 16) for r in records if r.get("state") == "batched"}, fingerprint


class NodeScenario(Scenario):
    """One node in the ``all`` role: details fetched here (``targets = []``, items in its items directory)
    or by its own worker (``targets = ["local"]``, items shipped over FTP); SQLite store or none."""

    def __init__(self, name: str, root: Path, site_url: str, spec: SiteSpec, *, targets: str = "[]",
                 store: str = "sqlite") -> None:
        self.targets = targets
        super().__init__(name, root, site_url, spec, store=store)

    def _make_nodes(self) -> None:
        self.frontier_role = self.worker_role = "all"
        self.node = self._node("all")

    def _config(self, role: str) -> str:
        return node_toml(role="all", data_dir=self.dir / "all", site_url=self.site_url, store_url=self.store_url,
                         targets=self.targets, worker_port=self.worker_port, ftp_port=self.ftp_port,
                         per_host=(16, 0), items="rotate_count = 1000")

    @property
    def local(self) -> bool:
        return self.targets != "[]"

    def start(self) -> None:
        if self.local:
            self.ftp.start()
            wait_port(self.ftp_port, proc=self.ftp)
        self.node.start()

    def stop(self) -> None:
        if self.node.alive():
            self.node.term()
        if self.ftp.alive():
            self.ftp.kill9()

    def starts(self) -> int:
        """How many times the node has come up (its API line), over all its runs."""
        log = self.dir / "all.log"
        return log.read_text(errors="replace").count("API on http") if log.exists() else 0

    def work(self) -> int:
        """Item lines and stored pages so far, duplicates included (cheap: no JSON parsed)."""
        lines = 0
        for path in self.item_files():
            try:
                lines += path.read_bytes().count(b"\n")
            except FileNotFoundError:  # renamed since the listing
                pass
        return lines + len(self.stored())

    def item_files(self) -> list[Path]:
        if self.local:
            return sorted((self.ftp_root / "feeds").glob("*.jl"))
        return sorted((self.dir / "all" / "items").glob("*.jl*"))

    def items(self) -> list[dict[str, Any]]:
        if self.local:
            return super().items()
        items = []
        for path in self.item_files():
            try:
                text = path.read_text()
            except FileNotFoundError:  # renamed (.part to .jl) since the listing
                continue
            for line in text.splitlines():
                try:
                    items.append(json.loads(line))
                except ValueError:
                    pass  # a torn last line of a .part file being written
        return items

    def progress(self) -> int:
        return len({i["url"] for i in self.items()} & self.expected())

    def complete(self) -> bool:
        wanted = self.expected()
        return wanted <= {i["url"] for i in self.items()} and (self.store_kind == "none" or wanted <= set(self.stored()))

    def check(self, row: Row) -> Row:
        expected = self.expected()
        stored = self.stored()
        items = [i["url"] for i in self.items()]
        row.expected = len(expected)
        row.stored = len((set(stored) if self.store_kind != "none" else set(items)) & set(items) & expected)
        row.duplicates = len(stored) - len(set(stored))
        row.items_expected = len(expected)
        row.items_missing = len(expected - set(items))
        row.items_duplicated = len(items) - len(set(items))
        row.wrong = len((set(stored) | set(items)) - expected)
        if self.local:
            batches, urls, count = self.carried()
            row.batches_lost = self.batches_lost(batches)
            row.wrong += self.batched_not_carried(urls, count)
        return row


def node_kill9(s: NodeScenario, row: Row, rng: random.Random, times: int = 40) -> None:
    """SIGKILL the node's process group 0.2-1.5 s (at random) after it is up and working again; restart it."""
    for i in range(times):
        deadline = time.monotonic() + 60
        while s.starts() < i + 1 and time.monotonic() < deadline:
            time.sleep(0.05)  # polling another process's log
        done = s.work()
        while s.work() <= done and not s.complete() and time.monotonic() < deadline:
            time.sleep(0.05)  # until it has written something since the last kill
        pause(rng.uniform(0.2, 1.5))  # a random moment
        s.node.kill9()
        row.injected += 1
        s.node.start()


class DiskScenario(NodeScenario):
    """A node in the ``all`` role whose data directory (pool, store, items, its worker's jobs, ledgers and spool)
    is a tmpfs of its own, filled up for a while mid-crawl."""

    def __init__(self, name: str, root: Path, site_url: str, spec: SiteSpec, **options: Any) -> None:
        super().__init__(name, root, site_url, spec, **options)
        self.tmpfs = Tmpfs(self.dir / "all", f"{64 + spec.details * 64 // 1024}m")  # the crawl's data, and room

    def start(self) -> None:
        self.tmpfs.mount()
        super().start()

    def release(self, keep: bool) -> None:
        """Unmount the data directory (its files copied next to it first when ``keep``)."""
        self.tmpfs.unmount(self.dir / "all-kept" if keep else None)

    def api(self) -> str:
        """The node's API root, from its last start's log line."""
        found = re.findall(r"API on (http://[^ /]+)", (self.dir / "all.log").read_text(errors="replace"))
        return found[-1] if found else ""

    def status(self) -> dict[str, Any]:
        """``/api/status`` ({} when it cannot be read)."""
        try:
            with urllib.request.urlopen(self.api() + "/api/status", timeout=5) as answer:
                return dict(json.loads(answer.read()))
        except (OSError, ValueError):
            return {}

    def storage(self) -> dict[str, Any]:
        """``/api/status``'s storage part."""
        return dict(self.status().get("storage") or {})

    def complete(self) -> bool:
        """Every page in the items and the store, and nothing left in the pool: an items file abandoned while
        the disk was full holds lines past its checkpoint until the node settles it, whose URLs are done again."""
        if not super().complete():
            return False
        pool = self.status().get("pool") or {}
        return pool.get("waiting") == 0 and pool.get("pending") == 0


STORAGE_WORDS = re.compile(r"(?i)storage|no space|disk|errno 28|read-only|traceback")
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT")


def storage_lines(text: str) -> int:
    """Lines about the storage a node logs at its usual level (info; the bench's log keeps debug lines too):
    those naming it, and the continuation lines of tracebacks."""
    return sum(1 for line in text.splitlines()
               if "#debug]" not in line and (STORAGE_WORDS.search(line) or not LOG_LINE.match(line)))


def disk_full(s: DiskScenario, row: Row, rng: random.Random, hold: float = 15.0) -> None:
    """Fill the node's data directory for ``hold`` seconds once a third of the pages are done; the status must
    say the storage is blocked meanwhile, and the log say little about it."""
    midway(s, 0.3)
    log = s.dir / "all.log"
    start = log.stat().st_size
    s.tmpfs.fill()
    row.injected += 1
    ends, blocked = time.monotonic() + hold, False
    while time.monotonic() < ends:
        blocked = blocked or bool(s.storage().get("blocked"))
        time.sleep(0.5)  # polling the node's API
    after = s.progress()
    s.tmpfs.free()
    row.recover.append(s.wait_progress(after))
    completed = s.wait_complete()
    with open(log, "rb") as f:
        f.seek(start)
        lines = storage_lines(f.read().decode(errors="replace"))
    row.note = f"status blocked: {'yes' if blocked else 'NO'}; {lines} log lines about it"
    if not completed:
        row.note += "; did not complete"
    if not blocked:
        row.also_broken.append("status")
    if lines >= 100:
        row.also_broken.append("log")


def run_disk_full(name: str, root: Path, site: str, spec: SiteSpec, rng: random.Random, **options: Any) -> Row:
    s = DiskScenario(name, root, site, spec, **options)
    row = Row(name)
    s.start()
    try:
        disk_full(s, row, rng)
    finally:
        s.stop()
        try:
            s.check(row)
        finally:
            s.release(keep=bool(row.broken()))
    return row


def run_node(name: str, root: Path, site: str, spec: SiteSpec, rng: random.Random, **options: Any) -> Row:
    s = NodeScenario(name, root, site, spec, **options)
    row = Row(name)
    s.start()
    try:
        node_kill9(s, row, rng)
        if not s.wait_complete(300):
            row.note = (row.note + "; did not complete").strip("; ")
    finally:
        s.stop()
    return s.check(row)


def midway(s: Scenario, share: float) -> None:
    """Wait until ``share`` of the pages are stored."""
    s.wait_pages(int(len(s.expected()) * share))


def frontier_kill9(s: Scenario, row: Row, rng: random.Random, times: int = 5) -> None:
    """SIGKILL the frontier at random moments spread over the crawl, restart it each time."""
    for i in range(times):
        midway(s, i / (times + 1))
        pause(rng.uniform(0.1, 1.5))  # a random moment
        s.frontier.kill9()
        before = len(frontier_batches(s.dir / "frontier.log"))
        s.frontier.start()
        row.injected += 1
        row.recover.append(s.wait_batches(before))


def worker_kill9(s: Scenario, row: Row, rng: random.Random, times: int = 3) -> None:
    """SIGKILL the worker while it holds accepted jobs, restart it."""
    for i in range(times):
        midway(s, (i + 1) / (times + 2))
        s.worker.kill9()
        pause(rng.uniform(0.2, 1.0))  # down for a moment: batches fail over to the spool
        before = s.progress()
        s.worker.start()
        row.injected += 1
        row.recover.append(s.wait_progress(before))


def ftp_down(s: Scenario, row: Row, rng: random.Random) -> None:
    """Stop the FTP server for a few seconds mid-crawl, start it again on the same port."""
    midway(s, 0.3)
    s.ftp.kill9()
    pause(5)  # the outage
    s.ftp.start()
    wait_port(s.ftp_port, proc=s.ftp)
    row.injected += 1
    shipped = len(list((s.ftp_root / "feeds").glob("*.jl")))
    started = time.monotonic()
    while len(list((s.ftp_root / "feeds").glob("*.jl"))) <= shipped and not s.complete():
        time.sleep(0.1)
    row.recover.append(time.monotonic() - started)


def sigterm_under_load(s: Scenario, row: Row, rng: random.Random) -> None:
    """SIGTERM frontier and worker at full load; they must exit within their stop timeout; restart both."""
    midway(s, 0.4)
    took, codes = 0.0, []
    for proc in (s.frontier, s.worker):
        try:
            took = max(took, proc.term(STOP_LIMIT))
            codes.append(proc.child.returncode if proc.child else None)
        except subprocess.TimeoutExpired:
            proc.kill9()
            row.note = f"{proc.name} did not stop within {STOP_LIMIT:.0f}s"
            took = float("inf")
    shown = "/".join(str(128 - c if c is not None and c < 0 else c) for c in codes)  # twistd re-raises SIGTERM
    row.note = row.note or f"stopped in {took:.1f}s (limit {STOP_LIMIT:.0f}s), exit {shown}"
    before = s.progress()
    s.worker.start()
    wait_port(s.worker_port, proc=s.worker)
    s.frontier.start()
    row.injected += 1
    row.recover.append(s.wait_progress(before))


def run_scenario(name: str, root: Path, site: str, spec: SiteSpec, fault: Callable[..., None],
                 rng: random.Random, complete_within: float = 300.0, **options: Any) -> Row:
    s = Scenario(name, root, site, spec, **options)
    row = Row(name)
    s.start()
    try:
        fault(s, row, rng)
        if not s.wait_complete(complete_within):
            row.note = (row.note + "; did not complete").strip("; ")
    finally:
        s.stop()
    return s.check(row)


def service_scenario(kind: str, root: Path, site: str, spec: SiteSpec, rng: random.Random, aof: bool = True,
                     kills: int = 0) -> Row:
    """Restart a private MariaDB (the page store) or Redis (the frontier's pool) mid-crawl; or (``kills``) SIGKILL
    the Redis that many times at random moments while the frontier crawls list pages, starting it again at once."""
    name = "mariadb-restart" if kind == "mysql" else f"redis-restart{'' if aof else '-no-persistence'}"
    name = "redis-kill9" if kills else name
    server: Any
    if kind == "mysql":
        server = PrivateMariaDB(root / f"{name}-server")
        server.start()
        options = {"store": server.url("crawl")}
    else:
        server = PrivateRedis(root / f"{name}-server", aof)
        server.start()
        options = {"pool": "redis", "redis_port": server.port}

    def fault(s: Scenario, row: Row, _: random.Random) -> None:
        if kind == "redis":  # while the frontier still crawls list pages and sends batches
            deadline = time.monotonic() + 60
            while len(frontier_batches(s.dir / "frontier.log")) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        else:
            midway(s, 0.3)
        if kills:
            redis_kills(s, row, server, rng, kills)
            return
        before = s.progress()
        server.restart(3 * STRETCH)
        row.injected += 1
        row.recover.append(s.wait_progress(before))

    try:
        row = run_scenario(name, root, site, spec, fault, rng, 300.0 if aof else 30.0, **options)
    finally:
        server.proc.kill9() if kind == "redis" else server.stop()
    if not aof:
        row.counted = False
        row.note = (row.note + "; Redis kept nothing: queues and seen set lost (use AOF)").strip("; ")
    return row


def redis_kills(s: Scenario, row: Row, server: PrivateRedis, rng: random.Random, times: int) -> None:
    """SIGKILL the pool's Redis ``times`` times, 0.2-1.5 s (at random) after the frontier has sent a batch since
    the last kill, while it still crawls list pages: a kill that falls after Redis ran a call and before its
    answer reached the frontier (its detail URLs marked seen, say) loses that answer."""
    for _ in range(times):
        if s.complete():
            break
        sent = len(frontier_batches(s.dir / "frontier.log"))
        deadline = time.monotonic() + 60 * STRETCH
        while len(frontier_batches(s.dir / "frontier.log")) <= sent:
            if time.monotonic() > deadline:
                return  # no batch any more: the list pages are done
            time.sleep(0.05)  # polling the frontier's log
        pause(rng.uniform(0.2, 1.5))  # a random moment
        before = s.progress()
        server.restart(0.2)
        row.injected += 1
        row.recover.append(s.wait_progress(before))


class ClusterScenario(Scenario):
    """Three frontiers sharing the Redis Cluster pool of ``cluster`` (three masters with a replica each:
    ``[pool] redis_durability = durability``), one worker, the FTP host."""

    FRONTIERS = 3

    def __init__(self, name: str, root: Path, site_url: str, spec: SiteSpec, cluster: RedisCluster,
                 durability: str) -> None:
        self.cluster, self.durability = cluster, durability
        super().__init__(name, root, site_url, spec, pool="redis")

    def _make_nodes(self) -> None:
        self.frontier_role, self.worker_role = "frontier0", "worker"
        self.worker = self._node("worker")
        self.frontiers = [self._node(f"frontier{i}") for i in range(self.FRONTIERS)]
        self.frontier = self.frontiers[0]

    def _config(self, role: str) -> str:
        pool = (f'backend = "redis"\nredis_url = "{self.cluster.url}"\nredis_prefix = "{self.name}:"\n'
                f'redis_namespace = "{self.name}:"\nredis_durability = "{self.durability}"')
        return node_toml(role="worker" if role == "worker" else "frontier", data_dir=self.dir / role,
                         site_url=self.site_url, store_url=self.store_url, targets=f'["127.0.0.1:{self.worker_port}"]',
                         worker_port=self.worker_port, ftp_port=self.ftp_port,
                         per_host=(4, 0.02) if role != "worker" else (32, 0), pool=pool)

    def start(self) -> None:
        self.ftp.start()
        wait_port(self.ftp_port, proc=self.ftp)
        self.worker.start()
        wait_port(self.worker_port, proc=self.worker)
        for frontier in self.frontiers:
            frontier.start()

    def stop(self) -> None:
        for proc in (*self.frontiers, self.worker, self.ftp):
            if proc.alive():
                proc.term() if proc is not self.ftp else proc.kill9()

    def sent(self) -> set[int]:
        return set().union(*(frontier_batches(self.dir / f"frontier{i}.log") for i in range(self.FRONTIERS)))

    def resumed(self) -> list[float]:
        """Each frontier's outage of the master (its "served by ... now, N s after it was lost" lines)."""
        seconds = []
        for i in range(self.FRONTIERS):
            log = self.dir / f"frontier{i}.log"
            for line in log.read_text(errors="replace").splitlines() if log.exists() else ():
                if "are served by" in line and " s after it was lost" in line:
                    seconds.append(float(line.split(" s after it was lost")[0].rsplit(" ", 1)[1]))
        return seconds

    def pool_batched(self) -> tuple[set[int], Callable[[str], int]]:
        """Every partition's batched fingerprints, each read from the master serving its hash tag now (a
        partition's keys all live on one master)."""
        from spiderd.frontier.pool.redis.cluster import key_slot
        from spiderd.frontier.pool.redis.keys import fingerprint_hex
        from spiderd.frontier.pool.redis.partitions import partition_tags

        def port(tag: str) -> int:
            return self.cluster.ports[self.cluster.master_of(key_slot(tag))]

        count = RedisCluster.cli(port("partitions"), "GET", f"{self.name}:{{partitions}}")  # '': never opened
        batched: set[int] = set()
        for tag in partition_tags(int(count)) if count else []:
            batched |= redis_batched(port(tag), f"{self.name}:{{{tag}}}:", f"{self.name}:{{{tag}}}:")
        return batched, lambda url: int(fingerprint_hex(url), 16)

    def batches_lost(self, carried: set[int]) -> int:
        spooled = {int(p.stem.split("-")[1]) for i in range(self.FRONTIERS)
                   for p in (self.dir / f"frontier{i}" / "batches").glob("batch-*.json")}
        return len((self.sent() | spooled) - carried)


def cluster_scenario(kind: str, root: Path, site: str, spec: SiteSpec, rng: random.Random, durability: str,
                     run: int) -> Row:
    """A Redis Cluster failover mid-crawl: ``CLUSTER FAILOVER`` on a master's replica ("failover"), or the master
    killed (SIGKILL) and its replica promoted by the cluster ("kill9"), then the master started again (it comes back
    as its replica's replica).  Recover: from the fault to the next page stored."""
    name = f"cluster-{'failover' if kind == 'failover' else 'master-kill9'}-{durability}-{run}"
    cluster = RedisCluster(root / f"{name}-servers", replicas=1).start()

    def fault(s: Scenario, row: Row, rng_: random.Random) -> None:
        while len(s.sent()) < 3 and not s.complete():  # type: ignore[attr-defined]
            time.sleep(0.05)  # polling the frontiers' logs: the crawl is under way
        master = rng_.randrange(cluster.masters)
        replica = cluster.replica_of(master)
        before, started = s.progress(), time.monotonic()
        if kind == "failover":
            cluster.failover(replica)
        else:
            cluster.kill(master)
        cluster.wait_master(replica, timeout=60)
        promoted = time.monotonic() - started
        row.injected += 1
        row.recover.append(s.wait_progress(before) + promoted)
        row.note = f"promoted in {promoted:.1f}s"
        if kind != "failover":
            cluster.restart(master)

    try:
        s = ClusterScenario(name, root, site, spec, cluster, durability)
        row = Row(name)
        s.start()
        try:
            fault(s, row, rng)
            if not s.wait_complete(300):
                row.note = (row.note + "; did not complete").strip("; ")
        finally:
            s.stop()
        resumed = s.resumed()
        row.note += (f"; frontiers resumed {min(resumed):.1f}-{max(resumed):.1f}s after losing the master"
                     if resumed else "; no frontier lost the master (MOVED only)")
        return s.check(row)
    finally:
        cluster.stop()


def under_load(root: Path, site: str, spec: SiteSpec, rng: random.Random) -> Row:
    """The frontier and the worker SIGKILLed at random moments, with a busy process on each core and the
    scenario's timings stretched three times (unless the whole run is already: ``--load``, ``--stretch``)."""
    global STRETCH
    stretch, STRETCH = STRETCH, max(STRETCH, 3.0)

    def fault(s: Scenario, row: Row, rng: random.Random) -> None:
        frontier_kill9(s, row, rng, times=3)
        worker_kill9(s, row, rng, times=2)

    try:
        with Load(0 if LOADED else os.cpu_count() or 1):
            row = run_scenario("under-load", root, site, spec, fault, rng)
    finally:
        STRETCH = stretch
    row.note = (row.note + f"; load {load_average()}").strip("; ")
    return row


LOADED = False  # --load: the whole run is under load already

SCENARIOS: dict[str, Callable[..., Row]] = {
    "frontier-kill9": lambda *a: run_scenario("frontier-kill9", *a[:3], frontier_kill9, a[3]),
    "worker-kill9": lambda *a: run_scenario("worker-kill9", *a[:3], worker_kill9, a[3]),
    "ftp-down": lambda *a: run_scenario("ftp-down", *a[:3], ftp_down, a[3]),
    "mariadb-restart": lambda *a: service_scenario("mysql", *a),
    "redis-restart": lambda *a: service_scenario("redis", *a),
    "redis-no-persistence": lambda *a: service_scenario("redis", *a, aof=False),
    "redis-kill9": lambda *a: service_scenario("redis", *a, kills=10),
    "sigterm-under-load": lambda *a: run_scenario("sigterm-under-load", *a[:3], sigterm_under_load, a[3]),
    "inprocess-kill9": lambda *a: run_node("inprocess-kill9", *a),
    "inprocess-nostore-kill9": lambda *a: run_node("inprocess-nostore-kill9", *a, store="none"),
    "local-worker-kill9": lambda *a: run_node("local-worker-kill9", *a, targets='["local"]'),
    "cluster-failover": lambda *a, **k: cluster_scenario("failover", *a, **k),
    "cluster-master-kill9": lambda *a, **k: cluster_scenario("kill9", *a, **k),
    "inprocess-disk-full": lambda *a: run_disk_full("inprocess-disk-full", *a),
    "local-worker-disk-full": lambda *a: run_disk_full("local-worker-disk-full", *a, targets='["local"]'),
    "under-load": under_load,
}
CLUSTER = {"cluster-failover", "cluster-master-kill9"}


def main() -> None:
    global STRETCH, LOADED
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lists", type=int, default=200)
    parser.add_argument("--details", type=int, default=10000)
    parser.add_argument("--only", default="", help="comma-separated scenario names: " + ", ".join(SCENARIOS))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--fetch-processes", type=int, default=0,
                        help="[fetch] processes of every node (fetch children; -1: one per CPU)")
    parser.add_argument("--keep", action="store_true", help="keep the whole work directory (logs) afterwards")
    parser.add_argument("--runs", type=int, default=1, help="runs of each cluster-* scenario")
    parser.add_argument("--durability", default="replica", help="cluster-*: [pool] redis_durability")
    parser.add_argument("--load", type=int, default=0, metavar="N",
                        help="N busy processes (-1: one per core) for the whole run")
    parser.add_argument("--stretch", type=float, default=1.0,
                        help="multiply the scenarios' waits, outages and random moments (and their time limits)")
    args = parser.parse_args()
    import faultkit

    faultkit.FETCH_PROCESSES = args.fetch_processes
    STRETCH = args.stretch
    names = [n for n in args.only.split(",") if n] or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)} (known: {', '.join(SCENARIOS)})")
    missing = missing_requirements(names)
    if missing:  # before anything starts: a plain `pip install .` lacks the test extras
        print("faults.py: this machine lacks what these scenarios need:\n" + "\n".join(missing), file=sys.stderr)
        sys.exit(2)
    spec = SiteSpec(lists=args.lists, details=args.details, detail_size=(20000, 60000), seed=args.seed,
                    slow_delay=1.0)
    root = Path(tempfile.mkdtemp(prefix="spiderd-faults-"))
    site = Proc("site", [sys.executable, "-m", "spiderd.demo.site", "--port", "0", "--lists", str(spec.lists),
                         "--details", str(spec.details), "--size", "20000-60000", "--seed", str(spec.seed),
                         "--slow-delay", "1.0"], root / "site.log")
    site.child = subprocess.Popen(site.command, cwd=ROOT, stdout=subprocess.PIPE, stderr=open(site.log, "wb"),
                                  text=True)
    port = int(site.child.stdout.readline().split()[1])  # type: ignore[union-attr]
    url = f"http://127.0.0.1:{port}/"
    rng = random.Random(args.seed)
    rows, broken = [], []
    load = args.load if args.load >= 0 else os.cpu_count() or 1
    LOADED = load > 0
    print(f"site: {spec.lists} list pages, {spec.details} detail pages at {url}; work dir {root}; "
          f"{load} busy processes, timings x{STRETCH:g}; load average {load_average()}", flush=True)
    print(HEADER, flush=True)
    try:
        with Load(load):
            for name in names:
                for run in range(args.runs if name in CLUSTER else 1):
                    extra = {"durability": args.durability, "run": run + 1} if name in CLUSTER else {}
                    row = SCENARIOS[name](root, url, spec, rng, **extra)
                    rows.append(row)
                    print(row.line(), flush=True)
                    if row.broken():
                        broken.append(name)
                        print(f"BROKEN {name}: {', '.join(row.broken())}; its work directory is kept: {root / name}",
                              flush=True)
                    elif not args.keep:
                        for path in root.glob(name + "*"):
                            shutil.rmtree(path, ignore_errors=True)
    finally:
        site.kill9()
        if not args.keep and not broken:
            shutil.rmtree(root, ignore_errors=True)
    counted = [r for r in rows if r.counted]
    print(
        f"RESULT faults_injected={sum(r.injected for r in counted)} pages_expected={sum(r.expected for r in counted)} "
        f"pages_stored={sum(r.stored for r in counted)} duplicates={sum(r.duplicates for r in counted)} "
        f"batches_lost={sum(r.batches_lost for r in counted)} wrongly_done={sum(r.wrong for r in counted)} "
        f"items_expected={sum(r.items_expected for r in counted)} items_missing={sum(r.items_missing for r in counted)} "
        f"items_duplicated={sum(r.items_duplicated for r in counted)} broken={','.join(broken) or 'none'} "
        f"load={load_average().replace(' ', '/')}"
    )


if __name__ == "__main__":
    main()
