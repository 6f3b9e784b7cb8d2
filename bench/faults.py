"""The fault suite: real daemons in separate processes, broken on purpose, then the invariants checked.

    python bench/faults.py                 # every fault, the 10,000-page site (a few minutes)
    python bench/faults.py --details 2000  # quicker
    python bench/faults.py --only frontier-kill9,ftp-down

Topology per scenario (fresh directories each time): the generated site
(``python -m spiderd.demo.site``, with its 404s, 500s, redirects and slow
pages), a frontier (``twistd -n spiderd --role frontier``: LevelDB or Redis
pool, batches of 100), a worker (``--role worker``: SQLite or MySQL page
store, feed files shipped over FTP), and a pyftpdlib FTP server standing in
for the analytics host.  Redis and MariaDB run as private instances on free
ports (their own data directories), so the machine's servers are never
restarted.

The invariant checked at the end of every scenario: every good detail page
of the site is in the page store and in a shipped feed file ("stored" counts
the pages found in both), exactly once ("dups": second copies in the store or
the feed files); every batch the frontier sent, and every batch left in its
spool, reached the worker ("lost"); nothing counted done that was not done
("wrong": pages stored or shipped that are not good detail pages, and, with
the LevelDB pool, URLs the pool counts as batched that no worker job carried).
"Time to recover" is from the end of a fault (the process or server back) to
the next page stored (for the frontier: to its next batch sent).  Ends with
one ``RESULT`` line (the issue's keys, then ``wrongly_done``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spiderd.demo.site import SiteSpec  # noqa: E402

STOP_LIMIT = 60.0  # SIGTERM under load: both daemons must be gone within this (systemd allows 300 s)
TWISTD = "import sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()"
FTP_SERVER = """
import sys
from pyftpdlib.authorizers import DummyAuthorizer
from pyftpdlib.handlers import FTPHandler
from pyftpdlib.servers import FTPServer
authorizer = DummyAuthorizer()
authorizer.add_user("spark", "s3cret", sys.argv[2], perm="elradfmwMT")
FTPHandler.authorizer = authorizer
FTPHandler.passive_ports = range(int(sys.argv[3]), int(sys.argv[3]) + 50)
server = FTPServer(("127.0.0.1", int(sys.argv[1])), FTPHandler)
server.serve_forever()
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 30.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)  # polling another process's socket
    raise RuntimeError(f"nothing listens on {port}")


class Proc:
    """A child process with its output in a log file; restartable with the same command."""

    def __init__(self, name: str, command: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.name, self.command, self.log, self.env = name, command, log, env
        self.child: subprocess.Popen[bytes] | None = None

    def start(self) -> "Proc":
        out = open(self.log, "ab")
        self.child = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=ROOT)
        return self

    def kill9(self) -> None:
        if self.child and self.child.poll() is None:
            self.child.kill()
            self.child.wait()

    def term(self, timeout: float = 120.0) -> float:
        """SIGTERM; seconds until it exited."""
        if not self.child or self.child.poll() is not None:
            return 0.0
        started = time.monotonic()
        self.child.send_signal(signal.SIGTERM)
        self.child.wait(timeout)
        return time.monotonic() - started

    def alive(self) -> bool:
        return bool(self.child) and self.child.poll() is None


@dataclass
class Row:
    fault: str
    injected: int = 0
    expected: int = 0
    stored: int = 0
    duplicates: int = 0
    batches_lost: int = 0
    wrong: int = 0
    recover: list[float] = field(default_factory=list)
    note: str = ""
    counted: bool = True

    def line(self) -> str:
        recover = f"{max(self.recover):.1f}s" if self.recover else "-"
        return (f"{self.fault:<30} {self.injected:>8} {self.expected:>8} {self.stored:>8} {self.duplicates:>6} "
                f"{self.batches_lost:>6} {self.wrong:>6} {recover:>9}  {self.note}")


class Scenario:
    """One crawl of the site by a frontier and a worker, with hooks to break things."""

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
        self.worker = self._node("worker")
        self.frontier = self._node("frontier")

    def _node(self, role: str) -> Proc:
        config = self.dir / f"{role}.toml"
        config.write_text(self._config(role))
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        command = [sys.executable, "-c", TWISTD, "-n", "--pidfile=", "spiderd", "--config", str(config)]
        return Proc(role, command, self.dir / f"{role}.log", env)

    def _config(self, role: str) -> str:
        feed = f"ftp://spark:s3cret@127.0.0.1:{self.ftp_port}/feeds/%(batch)s_%(name)s_%(time)s.jl"
        pool = f'backend = "redis"\nredis_url = "redis://127.0.0.1:{self.redis_port}/0"' if self.pool == "redis" else ""
        return f"""
[spiderd]
role = "{role}"
data_dir = "{self.dir / role}"
log_interval = 5
[pool]
seeds = ["{self.site_url}"]
failure_threshold = 2
pending_threshold = 30
{pool}
[fetch]
concurrency = 16
per_host_concurrency = {4 if role == "frontier" else 32}
per_host_delay = {0.02 if role == "frontier" else 0}
timeout = 10
robots = true
[parse]
workers = 1
[store]
url = "{self.store_url}"
[batch]
targets = ["127.0.0.1:{self.worker_port}"]
size = 100
flush_interval = 1
timeout = 10
[worker]
port = {self.worker_port}
max_jobs = 4
job_concurrency = 16
feed_template = "{feed}"
stop_timeout = 20
finished_to_keep = 100000
[feed]
retry_max = 2
[api]
port = 0
[[sites]]
name = "demo-shop"
allowed_hosts = ["127.0.0.1"]
list_urls = ['/$', '/list/\\d+\\.html$']
detail_urls = ['/item/\\d+\\.html$']
[sites.fields]
title = "css:h1.title::text"
price = "css:span.price::text"
"""

    # -- running ------------------------------------------------------------------------

    def start(self) -> None:
        self.ftp.start()
        wait_port(self.ftp_port)
        self.worker.start()
        wait_port(self.worker_port)
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
        if self.store_kind == "sqlite":
            path = self.dir / "worker" / "pages.sqlite3"
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
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.complete():
                return True
            time.sleep(0.5)  # polling files other processes write
        return False

    def wait_progress(self, after: int, timeout: float = 120.0) -> float:
        """Seconds until more pages are stored than ``after`` (the time to recover)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.progress() > after or self.complete():
                return time.monotonic() - started
            time.sleep(0.1)
        return float("inf")

    def wait_batches(self, after: int, timeout: float = 120.0) -> float:
        """Seconds until the frontier has sent more batches than ``after`` (a restarted frontier works again)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if len(frontier_batches(self.dir / "frontier.log")) > after or self.complete():
                return time.monotonic() - started
            time.sleep(0.1)
        return float("inf")

    def wait_pages(self, count: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while self.progress() < count and time.monotonic() < deadline:
            time.sleep(0.1)

    def check(self, row: Row) -> Row:
        """The invariants, once every process is stopped."""
        expected = self.expected()
        stored = self.stored()
        items = [i["url"] for i in self.items()]
        row.expected = len(expected)
        row.stored = len(set(stored) & set(items) & expected)
        row.duplicates = (len(stored) - len(set(stored))) + (len(items) - len(set(items)))
        batches, urls = self.carried()
        row.batches_lost = self.batches_lost(batches)
        row.wrong = len((set(stored) | set(items)) - expected) + self.batched_not_carried(urls)
        return row

    def carried(self) -> tuple[set[int], set[str]]:
        """The batch numbers and the URLs of every job the worker accepted."""
        jobs = self.dir / "worker" / "worker" / "jobs"
        batches: set[int] = set()
        urls: set[str] = set()
        for path in jobs.glob("*.json") if jobs.exists() else []:
            try:
                job = json.loads(path.read_text())
                urls.update(json.loads(job["settings"]["DISTRIBUTED_START_URLS"]))
            except (ValueError, KeyError, TypeError):
                continue
            batch = (job.get("args") or {}).get("batch")
            if batch is not None:
                batches.add(int(batch))
        return batches, urls

    def batches_lost(self, carried: set[int]) -> int:
        """Batches the frontier sent (its log names them) or still spools that no worker job carries."""
        sent = frontier_batches(self.dir / "frontier.log")
        spooled = {int(p.stem.split("-")[1]) for p in (self.dir / "frontier" / "batches").glob("batch-*.json")}
        return len((sent | spooled) - carried)

    def batched_not_carried(self, carried_urls: set[str]) -> int:
        """With the LevelDB pool: fingerprints the pool counts as batched that no job carried."""
        if self.pool != "leveldb":
            return 0
        from twisted.internet.task import Clock

        from spiderd.pool import open_leveldb_pool
        from spiderd.urls import fingerprint

        pool = open_leveldb_pool(str(self.dir / "frontier" / "pool"), Clock())
        try:
            export, batched, got = pool.export(), set(), [[]]
            while got[0] is not None:
                export.next().addCallback(lambda chunk: got.__setitem__(0, chunk))
                batched.update(int(r["fp"], 16) for r in got[0] or () if r.get("state") == "batched")
        finally:
            pool.close()
        return len(batched - {fingerprint(u) for u in carried_urls})


def frontier_batches(log: Path) -> set[int]:
    """Batch numbers the frontier sent (its "not accepted" and "accepted" log lines name them)."""
    numbers = set()
    if log.exists():
        for line in log.read_text(errors="replace").splitlines():
            if "Batch " in line and ("accepted" in line or "not accepted" in line):
                token = line.split("Batch ", 1)[1].split()[0]
                if token.isdigit():
                    numbers.add(int(token))
    return numbers


def mysql_urls(url: str) -> list[str]:
    import pymysql
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        db = pymysql.connect(host=parts.hostname, port=parts.port, user=parts.username or "root",
                             password=parts.password or "", database=parts.path.lstrip("/"), connect_timeout=2)
    except pymysql.err.OperationalError:
        return []
    try:
        with db.cursor() as cursor:
            cursor.execute("SELECT url FROM crawler_html")
            return [row[0] for row in cursor.fetchall()]
    except pymysql.err.ProgrammingError:
        return []
    finally:
        db.close()


class PrivateRedis:
    """A redis-server of our own on a free port (so restarting it disturbs nobody)."""

    def __init__(self, directory: Path, aof: bool) -> None:
        self.port = free_port()
        directory.mkdir(parents=True, exist_ok=True)
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if aof else ["--appendonly", "no"]
        self.proc = Proc("redis", ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                   "--dir", str(directory), *persistence], directory / "redis.log")

    def start(self) -> None:
        self.proc.start()
        wait_port(self.port)

    def restart(self, down: float) -> None:
        self.proc.kill9()
        time.sleep(down)  # the outage
        self.start()


class PrivateMariaDB:
    """A mariadbd of our own (own data directory, free port, no grant tables)."""

    def __init__(self, directory: Path) -> None:
        self.port, self.dir = free_port(), directory
        directory.mkdir(parents=True)
        subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={directory / 'data'}", "--user=root",
                        "--auth-root-authentication-method=normal"], check=True, capture_output=True)
        self.proc = Proc("mariadb", ["/usr/sbin/mariadbd", "--no-defaults", f"--datadir={directory / 'data'}", f"--port={self.port}",
                                     "--bind-address=127.0.0.1", f"--socket={directory / 'sock'}", "--user=root",
                                     "--skip-grant-tables", f"--pid-file={directory / 'pid'}"], directory / "mariadb.log")

    def start(self) -> None:
        self.proc.start()
        wait_port(self.port, 60)

    def url(self, database: str) -> str:
        import pymysql

        db = pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="")
        with db.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{database}`")
        db.close()
        return f"mysql://root@127.0.0.1:{self.port}/{database}"

    def restart(self, down: float) -> None:
        self.proc.term(60)
        time.sleep(down)  # the outage
        self.start()

    def stop(self) -> None:
        self.proc.term(60)


def midway(s: Scenario, share: float) -> None:
    """Wait until ``share`` of the pages are stored."""
    s.wait_pages(int(len(s.expected()) * share))


def frontier_kill9(s: Scenario, row: Row, rng: random.Random, times: int = 5) -> None:
    """SIGKILL the frontier at random moments spread over the crawl, restart it each time."""
    for i in range(times):
        midway(s, i / (times + 1))
        time.sleep(rng.uniform(0.1, 1.5))  # a random moment
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
        time.sleep(rng.uniform(0.2, 1.0))  # down for a moment: batches fail over to the spool
        before = s.progress()
        s.worker.start()
        row.injected += 1
        row.recover.append(s.wait_progress(before))


def ftp_down(s: Scenario, row: Row, rng: random.Random) -> None:
    """Stop the FTP server for a few seconds mid-crawl, start it again on the same port."""
    midway(s, 0.3)
    s.ftp.kill9()
    time.sleep(5)  # the outage
    s.ftp.start()
    wait_port(s.ftp_port)
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
    wait_port(s.worker_port)
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


def service_scenario(kind: str, root: Path, site: str, spec: SiteSpec, rng: random.Random, aof: bool = True) -> Row:
    """Restart a private MariaDB (the page store) or Redis (the frontier's pool) mid-crawl."""
    name = "mariadb-restart" if kind == "mysql" else f"redis-restart{'' if aof else '-no-persistence'}"
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
        before = s.progress()
        server.restart(3)
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


SCENARIOS: dict[str, Callable[..., Row]] = {
    "frontier-kill9": lambda *a: run_scenario("frontier-kill9", *a[:3], frontier_kill9, a[3]),
    "worker-kill9": lambda *a: run_scenario("worker-kill9", *a[:3], worker_kill9, a[3]),
    "ftp-down": lambda *a: run_scenario("ftp-down", *a[:3], ftp_down, a[3]),
    "mariadb-restart": lambda *a: service_scenario("mysql", *a),
    "redis-restart": lambda *a: service_scenario("redis", *a),
    "redis-no-persistence": lambda *a: service_scenario("redis", *a, aof=False),
    "sigterm-under-load": lambda *a: run_scenario("sigterm-under-load", *a[:3], sigterm_under_load, a[3]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lists", type=int, default=200)
    parser.add_argument("--details", type=int, default=10000)
    parser.add_argument("--only", default="", help="comma-separated scenario names: " + ", ".join(SCENARIOS))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs) afterwards")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(SCENARIOS)
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
    rows = []
    print(f"site: {spec.lists} list pages, {spec.details} detail pages at {url}; work dir {root}", flush=True)
    print(f"{'fault':<30} {'injected':>8} {'expected':>8} {'stored':>8} {'dups':>6} {'lost':>6} {'wrong':>6} "
          f"{'recover':>9}", flush=True)
    try:
        for name in names:
            row = SCENARIOS[name](root, url, spec, rng)
            rows.append(row)
            print(row.line(), flush=True)
    finally:
        site.kill9()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    counted = [r for r in rows if r.counted]
    print(
        f"RESULT faults_injected={sum(r.injected for r in counted)} pages_expected={sum(r.expected for r in counted)} "
        f"pages_stored={sum(r.stored for r in counted)} duplicates={sum(r.duplicates for r in counted)} "
        f"batches_lost={sum(r.batches_lost for r in counted)} wrongly_done={sum(r.wrong for r in counted)}"
    )


if __name__ == "__main__":
    main()
