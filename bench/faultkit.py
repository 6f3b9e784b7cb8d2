"""What the fault suite runs on: child processes, free ports, private Redis and MariaDB, the node's TOML.

Imported by ``bench/faults.py`` (this directory is on ``sys.path`` when it runs).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

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


def wait_port(port: int, timeout: float = 30.0, proc: "Proc | None" = None) -> None:
    """Until something listens on ``port``; fails at once, with its last output, if ``proc`` exits first."""
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited before listening on {port}: {proc.tail()}")
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
        self.child = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=ROOT,
                                      start_new_session=True)
        return self

    def kill9(self) -> None:
        """SIGKILL the whole process group (the daemon and its parser processes), as systemd's KillMode does."""
        if self.child and self.child.poll() is None:
            try:
                os.killpg(self.child.pid, signal.SIGKILL)
            except ProcessLookupError:
                self.child.kill()  # not a group leader (started elsewhere)
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

    def tail(self, size: int = 2000) -> str:
        return self.log.read_text(errors="replace")[-size:] if self.log.exists() else ""


HEADER = (f"{'fault':<30} {'injected':>8} {'expected':>8} {'stored':>7} {'dups':>5} {'lost':>5} {'wrong':>5} "
          f"{'missing':>7} {'itemdup':>7} {'recover':>8}")


@dataclass
class Row:
    """One scenario's figures: dups are second rows in the store, missing and itemdup count items."""

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
    items_expected: int = 0
    items_missing: int = 0
    items_duplicated: int = 0
    also_broken: list[str] = field(default_factory=list)  # a scenario's own invariants it broke

    def broken(self) -> list[str]:
        """The invariants this scenario broke (none for a scenario shown but not counted)."""
        if not self.counted:
            return []
        checks = {"stored": self.stored < self.expected, "dups": self.duplicates > 0, "lost": self.batches_lost > 0,
                  "wrong": self.wrong > 0, "missing": self.items_missing > 0, "itemdup": self.items_duplicated > 0,
                  "complete": "did not complete" in self.note}
        return [name for name, broke in checks.items() if broke] + self.also_broken

    def line(self) -> str:
        recover = f"{max(self.recover):.1f}s" if self.recover else "-"
        return (f"{self.fault:<30} {self.injected:>8} {self.expected:>8} {self.stored:>7} {self.duplicates:>5} "
                f"{self.batches_lost:>5} {self.wrong:>5} {self.items_missing:>7} {self.items_duplicated:>7} "
                f"{recover:>8}  {self.note}")


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


class RedisReader:
    """A blocking Redis connection (RESP2, one command at a time) for reading a pool after a scenario, when no
    reactor runs: ``execute`` has the signature of the pool's link (a Deferred, fired already)."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 30.0) -> None:
        import socket

        self.sock = socket.create_connection((host, port), timeout)
        self.file = self.sock.makefile("rb")

    def call(self, *args: Any) -> Any:
        words = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        self.sock.sendall(b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words))
        return self._reply()

    def execute(self, *args: Any) -> Any:
        from twisted.internet import defer

        return defer.maybeDeferred(self.call, *args)

    def _reply(self) -> Any:
        line = self.file.readline()
        kind, rest = line[:1], line[1:].rstrip(b"\r\n")
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(f"Redis: {rest.decode(errors='replace')}")
        if kind == b":":
            return int(rest)
        if kind in (b"$", b"*") and int(rest) < 0:
            return None
        if kind == b"$":
            return self.file.read(int(rest) + 2)[:-2].decode(errors="surrogateescape")
        if kind == b"*":
            return [self._reply() for _ in range(int(rest))]
        raise RuntimeError(f"Redis: unexpected reply {line!r}")

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def drained(reader: Any) -> list[dict[str, Any]]:
    """Every record of a pool's export ``reader`` whose ``next()`` answers at once (an embedded pool on a Clock,
    or a Redis export over a RedisReader)."""
    from twisted.python.failure import Failure

    records: list[dict[str, Any]] = []
    while True:
        got: list[Any] = []
        reader.next().addBoth(got.append)
        if not got:
            raise RuntimeError("the pool's export did not answer at once")
        if isinstance(got[0], Failure):
            got[0].raiseException()
        if got[0] is None:
            return records
        records += got[0]


def redis_batched(port: int, prefix: str, namespace: str = "", host: str = "127.0.0.1") -> set[int]:
    """The fingerprints (the first 64 bits of the SHA-1, as integers) that the Redis pool ``prefix`` on
    ``host``:``port`` counts as batched, read by the pool's own export (its seen buckets' members of code 3)."""
    from spiderd.frontier.pool.redis.export import RedisExport

    redis = RedisReader(port, host)
    try:
        bits = int(redis.call("HGET", prefix + "meta", "seen_bucket_bits") or 16)
        records = drained(RedisExport(redis.execute, prefix, namespace, bits))
    finally:
        redis.close()
    return {int(r["fp"], 16) for r in records if r.get("state") == "batched"}


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




class Load:
    """A busy process on each core (or ``count``), at the usual priority, for as long as it is held."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> "Load":
        for _ in range(self.count):
            self.procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        return self

    def __exit__(self, *_: object) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
        self.procs.clear()


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` shows them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class Tmpfs:
    """A tmpfs of ``size`` mounted at ``path`` (root only); ``fill`` takes its free space, ``free`` gives it back."""

    def __init__(self, path: Path, size: str) -> None:
        self.path, self.size = path, size
        self.filler = path / ".filler"

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", str(self.path)], check=True,
                       capture_output=True)

    def fill(self) -> None:
        with open(self.filler, "wb", buffering=0) as f:
            chunk = b"\0" * (1 << 20)
            try:
                while True:
                    f.write(chunk)
            except OSError:
                pass
            chunk = b"\0" * 4096
            try:
                while True:
                    f.write(chunk)
            except OSError:
                pass

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self, keep: Path | None = None) -> None:
        """Unmount; with ``keep``, copy what it holds there first."""
        self.free()
        if keep is not None:
            shutil.copytree(self.path, keep, symlinks=True, dirs_exist_ok=True)
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)


def can_mount_tmpfs() -> bool:
    return os.geteuid() == 0 and shutil.which("mount") is not None


# -- what the scenarios need -------------------------------------------------------------------------------

# (what, how to check it, how to get it, the scenarios that need it); "*" means every scenario
REQUIREMENTS = (
    ("the Python module pyftpdlib (the FTP server standing in for the analytics host)",
     lambda: importlib.util.find_spec("pyftpdlib") is not None,
     "pip install 'spiderd[test]' (or pip install pyftpdlib)", "*"),
    ("the Python module pymysql", lambda: importlib.util.find_spec("pymysql") is not None,
     "pip install . (spiderd depends on it)", "mariadb-restart"),
    ("redis-server on PATH", lambda: shutil.which("redis-server") is not None,
     "apt-get install redis-server",
     "redis-restart redis-no-persistence redis-kill9 cluster-failover cluster-master-kill9"),
    ("redis-cli on PATH", lambda: shutil.which("redis-cli") is not None,
     "apt-get install redis-tools", "cluster-failover cluster-master-kill9"),
    ("mariadb-install-db on PATH and /usr/sbin/mariadbd",
     lambda: shutil.which("mariadb-install-db") is not None and os.access("/usr/sbin/mariadbd", os.X_OK),
     "apt-get install mariadb-server", "mariadb-restart"),
    ("root, to mount a small tmpfs (the node's data directory) and fill it", can_mount_tmpfs,
     "run as root (or leave these scenarios out with --only)", "inprocess-disk-full local-worker-disk-full"),
)
NO_FTP = {"inprocess-kill9", "inprocess-nostore-kill9", "inprocess-disk-full"}  # the in-process path ships nothing


def missing_requirements(names: list[str]) -> list[str]:
    """One line per requirement of the scenarios ``names`` that this machine lacks."""
    lines = []
    for what, present, how, users in REQUIREMENTS:
        needed = [n for n in names if (users == "*" and n not in NO_FTP) or n in users.split()]
        if needed and not present():
            lines.append(f"  - {what}: {how} (needed by {', '.join(needed)})")
    return lines


FETCH_PROCESSES = 0  # [fetch] processes of every node (bench/faults.py --fetch-processes)


def node_toml(*, role: str, data_dir: Path, site_url: str, store_url: str, targets: str, worker_port: int,
              ftp_port: int, per_host: tuple[int, float], pool: str = "", items: str = "") -> str:
    """A node's configuration: the demo shop's rules, small batches, the feed over FTP to ``ftp_port``."""
    feed = f"ftp://spark:s3cret@127.0.0.1:{ftp_port}/feeds/%(batch)s_%(name)s_%(time)s.jl"
    return f"""
[spiderd]
role = "{role}"
data_dir = "{data_dir}"
log_interval = 5
[pool]
seeds = ["{site_url}"]
failure_threshold = 2
pending_threshold = 30
{pool}
[fetch]
concurrency = 16
per_host_concurrency = {per_host[0]}
per_host_delay = {per_host[1]}
timeout = 10
robots = true
processes = {FETCH_PROCESSES}
[parse]
workers = 1
[store]
url = "{store_url}"
[items]
{items}
[batch]
targets = {targets}
size = 100
flush_interval = 1
timeout = 10
[worker]
port = {worker_port}
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
