"""The node the docs' examples run against: the demo site on a free port and ``twistd -n spiderd`` with the
annotated ``etc/spiderd.toml``, as the getting-started page runs them, on free ports and in a temporary directory.

The docs write the site as ``127.0.0.1:8080`` and the API as ``127.0.0.1:6810`` (their defaults); :meth:`localize`
puts this node's ports in their place.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from .test_twistd import ROOT, TWISTD

SITE, API = "127.0.0.1:8080", "127.0.0.1:6810"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DocNode:
    """The demo site and a node crawling it; ``stop()`` ends both."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.site = subprocess.Popen(
            [sys.executable, "-m", "spiderd.demo.site", "--port", "0", "--lists", "2", "--details", "30",
             "--slow-delay", "0.2"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
        assert self.site.stdout is not None
        self.site_port = int(self.site.stdout.readline().split()[1])
        self.api_port = free_port()
        config = self._config((ROOT / "etc" / "spiderd.toml").read_text(encoding="utf-8"))
        (tmp / "spiderd.toml").write_text(config, encoding="utf-8")
        self.out = tmp / "spiderd.out"
        command = [sys.executable, "-c", TWISTD, "-n", "--pidfile=", "spiderd", "--config", str(tmp / "spiderd.toml")]
        with open(self.out, "w") as out:
            self.node = subprocess.Popen(command, cwd=tmp, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                                         stdout=out, stderr=subprocess.STDOUT)

    def _config(self, text: str) -> str:
        """etc/spiderd.toml with this node's data directory, ports and a parser in the main process."""
        edits = {'data_dir = "./spiderd-data"': f'data_dir = "{self.tmp / "data"}"',
                 "port = 6810": f"port = {self.api_port}",
                 "workers = -1": "workers = 0",
                 "flush_interval = 30 ": "flush_interval = 0.5 ",
                 SITE: f"127.0.0.1:{self.site_port}"}
        for old, new in edits.items():
            assert old in text, f"etc/spiderd.toml no longer has {old!r}: update tests/docnode.py"
            text = text.replace(old, new)
        return text

    def localize(self, text: str) -> str:
        """A command of the docs, with this node's ports for the documented ones."""
        return text.replace(SITE, f"127.0.0.1:{self.site_port}").replace(API, f"127.0.0.1:{self.api_port}")

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}{path}", timeout=10) as answer:
            return json.loads(answer.read())

    def wait_until_crawled(self, timeout: float = 90.0, paused_too: bool = False) -> dict[str, Any]:
        """Wait (bounded) until the node's pool has nothing waiting or leased and its worker no job left (or, with
        ``paused_too``, until its crawl is paused)."""
        deadline = time.monotonic() + timeout
        status: dict[str, Any] = {}
        while time.monotonic() < deadline:
            if self.node.poll() is not None:
                raise AssertionError(f"spiderd exited ({self.node.returncode}):\n{self.out.read_text()}")
            try:
                status = self.get("/api/status")
            except OSError:
                status = {}
            if status and (_settled(status) or (paused_too and status.get("crawler", {}).get("paused"))):
                return status
            time.sleep(0.1)  # polling a child process, not waiting for a timer of ours
        raise AssertionError(f"the crawl did not settle within {timeout}s: {status}\n{self.out.read_text()}")

    def stop(self) -> None:
        for process in (self.node, self.site):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in (self.node, self.site):
            process.wait(timeout=60)


def _settled(status: dict[str, Any]) -> bool:
    pool, worker, batches = status.get("pool", {}), status.get("worker", {}), status.get("batches", {})
    return pool.get("done", 0) > 0 and pool.get("waiting", 1) == 0 and pool.get("pending", 1) == 0 \
        and worker.get("pages", 0) > 0 and worker.get("jobs_running", 1) == 0 and worker.get("jobs_pending", 1) == 0 \
        and batches.get("open", 1) == 0 and batches.get("spooled", 1) == 0 and batches.get("in_flight", 1) == 0
