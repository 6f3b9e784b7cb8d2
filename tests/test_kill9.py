"""kill -9 of a real node (``twistd -n spiderd``, details fetched in process, SQLite store) at chosen moments.

The node crawls the generated site (with its 404s, 500s, redirects and slow
pages) and is killed, process group and all, at points where the old code lost
or doubled items: item lines in the file (their statuses possibly not yet
recorded), a file just rotated, pages stored ahead of their items, and right
after a restart.  Then it runs to the end (``exit_when_done``), and every good
detail page must be in the items files once and in the store once, nothing
else in either, the pool must count it done, and no checkpoint may be left.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from spiderd.demo.config import DEMO
from spiderd.demo.pages import SiteSpec

from .helpers import result
from .test_cluster import literals
from .test_twistd import ROOT, TWISTD

SPEC = SiteSpec(lists=6, details=240, slow_delay=0.5)
DEADLINE = 60.0  # seconds for any one wait: a hung node fails the test instead of hanging the suite


class Node:
    """One node's process, data directory and what it has written so far."""

    def __init__(self, tmp_path: Path, root: str) -> None:
        self.dir = tmp_path / "node"
        self.config = tmp_path / "node.toml"
        self.log = tmp_path / "node.log"
        self.config.write_text(config(self.dir, root))
        self.child: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [sys.executable, "-c", TWISTD, "-n", "--pidfile=", "spiderd", "--config", str(self.config)]
        with open(self.log, "ab") as out:
            self.child = subprocess.Popen(command, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True)

    def kill9(self) -> None:
        """SIGKILL the node's process group (the daemon and its parser process)."""
        assert self.child is not None
        os.killpg(self.child.pid, signal.SIGKILL)
        self.child.wait()

    def wait(self, predicate: Callable[[], bool], what: str) -> None:
        """Poll what the node writes (another process; no timer of ours) until ``predicate()``."""
        deadline = time.monotonic() + DEADLINE
        while not predicate():
            assert self.child is not None and self.child.poll() is None, f"the node exited: {self.tail()}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}: {self.tail()}"
            time.sleep(0.01)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def starts(self) -> int:
        return self.log.read_text(errors="replace").count("API on http") if self.log.exists() else 0

    def item_files(self, pattern: str = "*.jl*") -> list[Path]:
        return sorted((self.dir / "items").glob(pattern))

    def lines(self) -> int:
        count = 0
        for path in self.item_files():
            try:
                count += path.read_bytes().count(b"\n")
            except FileNotFoundError:  # renamed since the listing
                pass
        return count

    def rows(self) -> int:
        path = self.dir / "pages.sqlite3"
        if not path.exists():
            return 0
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
                return int(db.execute("SELECT COUNT(*) FROM crawler_html").fetchone()[0])
        except sqlite3.Error:
            return 0


def config(data_dir: Path, root: str) -> str:
    site = DEMO["sites"][0]
    return f"""
[spiderd]
data_dir = "{data_dir}"
log_interval = 3600
exit_when_done = true
[pool]
seeds = ["{root}"]
failure_threshold = 2
[fetch]
concurrency = 8
per_host_concurrency = 4
per_host_delay = 0.01       # at most 100 fetches a second: the kills land mid-crawl however fast the machine
timeout = 5
connect_timeout = 2
[parse]
workers = 1
[store]
url = "sqlite:///pages.sqlite3"
[items]
rotate_count = 40
[batch]
targets = []
[api]
port = 0
[[sites]]
name = "{site['name']}"
allowed_hosts = {literals(site['allowed_hosts'])}
list_urls = {literals(site['list_urls'])}
detail_urls = {literals(site['detail_urls'])}
[sites.fields]
title = "css:h1.title::text"
"""


@pytest.fixture
def root(tmp_path: Path) -> Iterator[str]:
    """The generated site in a process of its own."""
    command = [sys.executable, "-m", "spiderd.demo.site", "--port", "0", "--lists", str(SPEC.lists), "--details",
               str(SPEC.details), "--slow-delay", str(SPEC.slow_delay)]
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line.startswith("LISTENING "), line
    yield f"http://127.0.0.1:{int(line.split()[1])}/"
    child.kill()
    child.wait()


def test_kill_9_at_chosen_points_loses_and_doubles_nothing(tmp_path: Path, root: str) -> None:
    """After kills at four chosen points and a run to the end: each good page once in items and store, done."""
    node = Node(tmp_path, root)
    kills: list[tuple[str, Callable[[int, int, int], bool]]] = [
        ("30 new item lines in the file", lambda lines, files, rows: node.lines() >= lines + 30),
        ("an items file just completed", lambda lines, files, rows: len(node.item_files("*.jl")) > files),
        ("pages stored ahead of their items", lambda lines, files, rows: node.rows() - rows > node.lines() - lines),
        ("a restart just done", lambda lines, files, rows: True),
    ]
    try:
        for what, predicate in kills:
            starts = node.starts()
            node.start()
            node.wait(lambda: node.starts() > starts, "the node to start")  # the files of the last run settled
            lines, files, rows = node.lines(), len(node.item_files("*.jl")), node.rows()
            node.wait(lambda: predicate(lines, files, rows), what)
            node.kill9()
        node.start()
        assert node.child is not None
        assert node.child.wait(DEADLINE) == 0, node.tail()
    finally:
        if node.child is not None and node.child.poll() is None:
            node.kill9()
    check(node, root)


def check(node: Node, root: str) -> None:
    """Every good detail page once in the items files and in the store, nothing else; the pool agrees."""
    import json

    from twisted.internet.task import Clock

    from spiderd.frontier.pool import keys, open_leveldb_pool

    expected = sorted(root.rstrip("/") + path for path in SPEC.expected().details_ok)
    assert node.item_files("*.part") == []
    items = [json.loads(line)["url"] for path in node.item_files("*.jl") for line in path.open()]
    with sqlite3.connect(node.dir / "pages.sqlite3") as db:
        pages = [row[0] for row in db.execute("SELECT url FROM crawler_html")]
    for name, found in (("items", items), ("pages", pages)):
        missing, extra = set(expected) - set(found), set(found) - set(expected)
        duplicated = len(found) - len(set(found))
        assert (len(missing), duplicated, len(extra)) == (0, 0, 0), f"{name}: missing, duplicated, not expected"
    pool = open_leveldb_pool(str(node.dir / "pool"), Clock())
    try:
        stats = result(pool.stats())
        assert (stats["waiting"], stats["pending"]) == (0, 0)
        assert {result(pool.why(url))["state"] for url in expected} == {"done"}
        assert list(pool._kv.iterator(prefix=keys.CHECKPOINT)) == []  # every file completed
    finally:
        pool.close()
