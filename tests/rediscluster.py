"""A real Redis Cluster of three masters on free loopback ports in a directory of its own, for tests and benches.

``RedisCluster(directory).start()`` runs three ``redis-server --cluster-enabled
yes`` (AOF on, fsync at every write, so a killed master comes back with what it
acknowledged), joins them with ``redis-cli --cluster create ... --cluster-replicas
0 --cluster-yes`` (each master gets a contiguous third of the 16384 slots) and
waits for ``cluster_state:ok`` on all of them.  ``cluster-require-full-coverage
no``: the other masters keep serving their slots while one is down.  ``kill(i)``
and ``restart(i)`` (same port, same directory, its AOF and nodes.conf) stand for
a crash; ``stop()`` ends every process (also when a test failed: call it from a
cleanup).  A master also ends with the thread that started it (``PR_SET_PDEATHSIG``
on Linux): a run ended without its clean-ups (pytest-timeout's ``os._exit``, a
SIGKILL) leaves no redis-server behind.  Blocking: call it from a test's set-up, never from the reactor.
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
    """Three Redis masters forming one cluster; ``ports`` and ``url`` once started."""

    def __init__(self, directory: str | os.PathLike[str], masters: int = MASTERS, aof: bool = True) -> None:
        self.directory = Path(directory)
        self.masters = masters
        self.aof = aof  # False: no persistence (a bench of CPU, not of the disk)
        self.ports: list[int] = []
        self._procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """The pool's ``redis_url`` for this cluster: every master as a seed address."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.ports) + "/"

    def start(self) -> RedisCluster:
        """Start the masters, create the cluster, wait until every master says ``cluster_state:ok``."""
        self.ports = free_ports(self.masters)
        try:
            for i in range(self.masters):
                self._launch(i)
            for port in self.ports:
                self._wait(lambda p=port: self.cli(p, "PING") == "PONG", f"redis-server on {port}")
            self._create()
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
        command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(home),
                   "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                   "--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no",
                   "--appendonly", "yes" if self.aof else "no", "--appendfsync", "always", "--save", "",
                   "--logfile", str(home / "redis.log"), "--daemonize", "no"]
        self._procs[i] = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          preexec_fn=_dying_with(os.getpid()))

    def _create(self) -> None:
        addresses = [f"127.0.0.1:{port}" for port in self.ports]
        done = subprocess.run(["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "0",
                               "--cluster-yes"], capture_output=True, text=True, timeout=START_TIMEOUT)
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")

    @staticmethod
    def cli(port: int, *command: str) -> str:
        """One command through redis-cli (its text output, '' when the server does not answer)."""
        done = subprocess.run(["redis-cli", "-p", str(port), *command], capture_output=True, text=True, timeout=10)
        return done.stdout.strip() if done.returncode == 0 else ""

    def _wait(self, ready: object, what: str) -> None:
        """Poll another process until ``ready()`` (its start is not a timer of ours); fail after START_TIMEOUT."""
        deadline = time.monotonic() + START_TIMEOUT
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
        """The index of the master serving ``slot`` (as created: contiguous equal ranges, in port order)."""
        for line in self.cli(self.ports[0], "CLUSTER", "NODES").splitlines():
            words = line.split()
            port = int(words[1].split("@")[0].rsplit(":", 1)[1])
            for part in words[8:]:
                start, _, end = part.partition("-")
                if start.isdigit() and int(start) <= slot <= int(end or start):
                    return self.ports.index(port)
        raise LookupError(f"no master serves slot {slot}")

    def running(self, i: int) -> bool:
        """Whether master ``i`` runs (started here, not killed since)."""
        return i in self._procs

    def kill(self, i: int) -> None:
        """SIGKILL master ``i`` (what it acknowledged is in its AOF)."""
        proc = self._procs.pop(i)
        proc.kill()
        proc.wait()

    def restart(self, i: int) -> None:
        """Start master ``i`` again on its port and directory; wait until the cluster is ok on it again."""
        self._launch(i)
        port = self.ports[i]
        self._wait(lambda: self.cli(port, "PING") == "PONG", f"redis-server on {port}")
        self._wait(lambda: "cluster_state:ok" in self.cli(port, "CLUSTER", "INFO"), f"cluster on {port}")

    def stop(self) -> None:
        """End every master this object started."""
        for i in list(self._procs):
            proc = self._procs.pop(i)
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
