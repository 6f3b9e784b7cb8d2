"""A real Redis Cluster of three masters (each with replicas, if asked) on free loopback ports in a directory of its
own, for tests and benches.

``RedisCluster(directory).start()`` runs three ``redis-server --cluster-enabled
yes`` (AOF on, fsync at every write, so a killed master comes back with what it
acknowledged), joins them with ``redis-cli --cluster create ... --cluster-replicas
0 --cluster-yes`` (each master gets a contiguous third of the 16384 slots) and
waits for ``cluster_state:ok`` on all of them.  ``cluster-require-full-coverage
no``: the other masters keep serving their slots while one is down.  With ``replicas=1`` each master gets a replica
(``CLUSTER MEET``, ``CLUSTER REPLICATE``: node ``masters + i`` replicates master ``i``); ``failover(i)`` runs
``CLUSTER FAILOVER`` on replica ``i``, ``wait_master(i)`` polls until the cluster has promoted it (after its
master was killed), ``pause(i)`` / ``resume(i)`` stop and continue a process (SIGSTOP, SIGCONT).  ``kill(i)``
and ``restart(i)`` (same port, same directory, its AOF and nodes.conf) stand for
a crash; ``stop()`` ends every process (also when a test failed: call it from a
cleanup).  A master also ends with the thread that started it (``PR_SET_PDEATHSIG``
on Linux): a run ended without its clean-ups (pytest-timeout's ``os._exit``, a
SIGKILL) leaves no redis-server behind.  ``server`` is the binary the nodes run (``redis-server`` on PATH;
``waitaof_server()`` finds one with WAITAOF, 7.2 or later), ``fsync`` the AOF's appendfsync.  Blocking: call it from a
test's set-up, never from the reactor.
"""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

MASTERS = 3
BUS_OFFSET = 10000  # Redis Cluster's bus port is the client port + 10000
START_TIMEOUT = 30.0
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def available() -> str | None:
    """None when redis-server and redis-cli are on PATH, else what is missing."""
    missing = [name for name in ("redis-server", "redis-cli") if shutil.which(name) is None]
    return f"{' and '.join(missing)} not on PATH (apt-get install redis-server)" if missing else None


WAITAOF_SERVER = "SPIDERD_REDIS_SERVER_72"  # the environment variable naming a redis-server 7.2 or later


def server_version(server: str) -> tuple[int, int] | None:
    """(major, minor) of the ``server`` binary (``redis-server --version``), None if it does not run."""
    try:
        done = subprocess.run([server, "--version"], capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    words = [word for word in done.stdout.split() if word.startswith("v=")]
    return tuple(int(n) for n in words[0][2:].split(".")[:2]) if words else None  # type: ignore[return-value]


def waitaof_server() -> tuple[str | None, str]:
    """A redis-server with WAITAOF (Redis 7.2 or later) for ``redis_durability = "aof"``: the one that
    $SPIDERD_REDIS_SERVER_72 names, else the one on PATH if it is recent enough; (None, why not) if none."""
    server = os.environ.get(WAITAOF_SERVER) or shutil.which("redis-server")
    version = server_version(server) if server else None
    if server and version and version >= (7, 2):
        return server, ""
    found = f"{server} is Redis {'.'.join(map(str, version))}" if server and version else f"no redis-server ({server})"
    return None, (f"needs a redis-server 7.2 or later (WAITAOF): {found}; set {WAITAOF_SERVER} to the path of one "
                  "(any build: Debian 12 ships 7.0)")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """``count`` ports free on 127.0.0.1 whose bus ports (+10000) are free too."""
    ports: list[int] = []
    while len(ports) < count:
        port = random.randrange(20000, 55000)
        if port not in ports and _free(port) and _free(port + BUS_OFFSET):
            ports.append(port)
    return ports


def _dying_with(parent: int) -> Callable[[], None] | None:
    """A child's pre-exec hook: SIGTERM when the thread that started it ends (None where prctl is not Linux's)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the hook itself only calls it

    def hook() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent ended before the hook ran
            os._exit(1)

    return hook


class RedisCluster:
    """Three Redis masters forming one cluster, ``replicas`` each; ``ports`` (masters first, then the replicas of
    master 0, 1, ...) and ``url`` once started.  A node is named by its index in ``ports``."""

    def __init__(self, directory: str | os.PathLike[str], masters: int = MASTERS, aof: bool = True,
                 replicas: int = 0, server: str = "redis-server", fsync: str = "always") -> None:
        self.directory = Path(directory)
        self.server = server  # the redis-server binary every node runs
        self.fsync = fsync  # appendfsync, with the AOF on
        self.masters = masters
        self.replicas = replicas
        self.aof = aof  # False: no persistence (a bench of CPU, not of the disk)
        self.ports: list[int] = []
        self._procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """The pool's ``redis_url`` for this cluster: every master as a seed address."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.ports) + "/"

    def start(self) -> RedisCluster:
        """Start the masters, create the cluster, wait until every master says ``cluster_state:ok``."""
        self.ports = free_ports(self.masters * (1 + self.replicas))
        try:
            for i in range(len(self.ports)):
                self._launch(i)
            for port in self.ports:
                self._wait(lambda p=port: self.cli(p, "PING") == "PONG", f"redis-server on {port}")
            self._create()
            for i in range(self.masters, len(self.ports)):
                self._replicate(i, (i - self.masters) // self.replicas)
            for port in self.ports:
                self._wait(lambda p=port: "cluster_state:ok" in self.cli(p, "CLUSTER", "INFO"), f"cluster on {port}")
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self, i: int) -> None:
        if i in self._procs:  # a second process would lose the first one's handle, and stop() would miss it
            raise RuntimeError(f"redis-server on {self.ports[i]} already runs")
        port = self.ports[i]
        home = self.directory / f"node{port}"
        home.mkdir(parents=True, exist_ok=True)
        command = [self.server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(home),
                   "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                   "--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no",
                   "--appendonly", "yes" if self.aof else "no", "--appendfsync", self.fsync, "--save", "",
                   "--logfile", str(home / "redis.log"), "--daemonize", "no"]
        self._procs[i] = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          preexec_fn=_dying_with(os.getpid()))

    def _create(self) -> None:
        addresses = [f"127.0.0.1:{port}" for port in self.ports[:self.masters]]
        done = subprocess.run(["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "0",
                               "--cluster-yes"], capture_output=True, text=True, timeout=START_TIMEOUT)
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")

    def _replicate(self, i: int, master: int) -> None:
        """Make node ``i`` a replica of node ``master``: meet it, then replicate it once it knows its id."""
        port, master_id = self.ports[i], self.cli(self.ports[master], "CLUSTER", "MYID")
        self.cli(port, "CLUSTER", "MEET", "127.0.0.1", str(self.ports[master]))
        self._wait(lambda: master_id in self.cli(port, "CLUSTER", "NODES"), f"node {port} meeting {master_id}")
        self._wait(lambda: self.cli(port, "CLUSTER", "REPLICATE", master_id) == "OK", f"{port} replicating")
        self._wait(lambda: "master_link_status:up" in self.cli(port, "INFO", "replication"), f"replica on {port}")

    def nodes(self) -> list[list[str]]:
        """CLUSTER NODES (as words a line) of the first node that answers."""
        for i in sorted(self._procs):
            text = self.cli(self.ports[i], "CLUSTER", "NODES")
            if text:
                return [line.split() for line in text.splitlines()]
        raise RuntimeError("no node of the cluster answers")

    def _index(self, address: str) -> int:
        return self.ports.index(int(address.split("@")[0].rsplit(":", 1)[1]))

    def replica_of(self, i: int) -> int:
        """The index of a replica of node ``i`` (a master), as the cluster sees it."""
        words = {line[0]: line for line in self.nodes()}
        master_id = next(w[0] for w in words.values() if self._index(w[1]) == i)
        for w in words.values():
            if w[3] == master_id and "fail" not in w[2]:
                return self._index(w[1])
        raise LookupError(f"node {self.ports[i]} has no replica")

    def is_master(self, i: int) -> bool:
        """Whether node ``i`` says it is a master (ROLE)."""
        return self.cli(self.ports[i], "ROLE").split("\n")[:1] == ["master"]

    def promoted(self, i: int) -> bool:
        """Whether node ``i`` is a master serving slots, as it and every other node that runs see it (one look)."""
        if not self.is_master(i):
            return False
        for j in self._procs:
            own = [w for w in self.nodes_of(j) if self._index(w[1]) == i]
            if not own or "master" not in own[0][2] or len(own[0]) < 9:
                return False
        return True

    def wait_master(self, i: int, timeout: float = START_TIMEOUT) -> None:
        """Poll until :meth:`promoted` (blocking: for a bench; a test polls with the reactor running)."""
        self._wait(lambda: self.promoted(i), f"node {self.ports[i]} promoted", timeout)

    def nodes_of(self, j: int) -> list[list[str]]:
        text = self.cli(self.ports[j], "CLUSTER", "NODES")
        return [line.split() for line in text.splitlines()]

    def failover(self, i: int) -> None:
        """``CLUSTER FAILOVER`` on replica ``i`` (its master hands over once ``i`` has all it wrote); returns at
        once: :meth:`wait_master` polls for the end."""
        answer = self.cli(self.ports[i], "CLUSTER", "FAILOVER")
        if answer != "OK":
            raise RuntimeError(f"CLUSTER FAILOVER on {self.ports[i]}: {answer!r}")

    def pause(self, i: int) -> None:
        """Stop node ``i`` (SIGSTOP): its connections stay open, it reads nothing."""
        self._procs[i].send_signal(signal.SIGSTOP)

    def resume(self, i: int) -> None:
        self._procs[i].send_signal(signal.SIGCONT)

    @staticmethod
    def cli(port: int, *command: str) -> str:
        """One command through redis-cli (its text output, '' when the server does not answer)."""
        done = subprocess.run(["redis-cli", "-p", str(port), *command], capture_output=True, text=True, timeout=10)
        return done.stdout.strip() if done.returncode == 0 else ""

    def _wait(self, ready: object, what: str, timeout: float = START_TIMEOUT) -> None:
        """Poll another process until ``ready()`` (its start is not a timer of ours); fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not ready():  # type: ignore[operator]
            for i, proc in self._procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"redis-server on {self.ports[i]} exited: {self._log(i)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.05)

    def _log(self, i: int) -> str:
        path = self.directory / f"node{self.ports[i]}" / "redis.log"
        return path.read_text()[-2000:] if path.exists() else ""

    def master_of(self, slot: int) -> int:
        """The index of the master serving ``slot`` (as created: contiguous equal ranges, in port order; after a
        failover, the replica that took over)."""
        for words in self.nodes():
            for part in words[8:]:
                start, _, end = part.partition("-")
                if start.isdigit() and int(start) <= slot <= int(end or start):
                    return self._index(words[1])
        raise LookupError(f"no master serves slot {slot}")

    def running(self, i: int) -> bool:
        """Whether master ``i`` runs (started here, not killed since)."""
        return i in self._procs

    def kill(self, i: int) -> None:
        """SIGKILL node ``i`` (what it acknowledged is in its AOF)."""
        proc = self._procs.pop(i)
        proc.send_signal(signal.SIGCONT)  # (a paused one too)
        proc.kill()
        proc.wait()

    def restart(self, i: int) -> None:
        """Start node ``i`` again on its port and directory; wait until the cluster is ok on it again (a master
        replaced meanwhile comes back as its replica's replica)."""
        self._launch(i)
        port = self.ports[i]
        self._wait(lambda: self.cli(port, "PING") == "PONG", f"redis-server on {port}")
        self._wait(lambda: "cluster_state:ok" in self.cli(port, "CLUSTER", "INFO"), f"cluster on {port}")
        if self.replicas:  # a master replaced meanwhile turns into a replica: until it has synchronised
            self._wait(lambda: self.promoted(i) or "master_link_status:up" in self.cli(port, "INFO", "replication"),
                       f"node {port} serving or replicating")

    def stop(self) -> None:
        """End every master this object started."""
        for i in list(self._procs):
            proc = self._procs.pop(i)
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
