"""spiderctl against a real ``twistd -n spiderd`` (and SIGHUP reloads), and against the API in this process."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Generator

from twisted.internet import defer, reactor, threads
from twisted.internet.task import Clock
from twisted.trial.unittest import TestCase

from spiderd.ops import ctl, ctlclient
from spiderd.core import status as st
from spiderd.ops.web import Auth

from .test_twistd import ROOT, TWISTD
from .webnode import CoreOnlyPool, make_node, start_api

Gen = Generator[Any, Any, Any]
TOKEN = "ctl-token"


def closed_port() -> int:
    """A loopback port nothing listens on (fetches there are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """``twistd -n spiderd --config FILE`` in a child process; its log read from a file."""

    def __init__(self, tmp: Path, config: str, logfile: bool = False) -> None:
        self.tmp = tmp
        self.config = tmp / "spiderd.toml"
        self.config.write_text(config)
        self.out = tmp / "out.txt"
        self.log = tmp / "spiderd.log" if logfile else self.out
        args = [f"--logfile={self.log}"] if logfile else []
        command = [sys.executable, "-c", TWISTD, "-n", "--pidfile=", *args, "spiderd", "--config", str(self.config)]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        with open(self.out, "w") as out:
            self.process = subprocess.Popen(command, cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.url = "http://127.0.0.1:%s" % self.wait_for(r"API on http://127\.0\.0\.1:(\d+)/").group(1)

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def wait_for(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        """Wait (bounded) until the daemon logs a line matching ``pattern``; fails if it exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.text())
            if found:
                return found
            if self.process.poll() is not None:
                raise AssertionError(f"spiderd exited ({self.process.returncode}):\n{self.out.read_text()}")
            time.sleep(0.05)  # polling the child's log, not waiting for a timer of ours
        raise AssertionError(f"no {pattern!r} in the log within {timeout}s:\n{self.text()}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)


def config(tmp: Path, seeds: list[str], **api: Any) -> str:
    api_lines = "".join(f"{k} = {json.dumps(v)}\n" for k, v in {"port": 0, "token": TOKEN, **api}.items())
    return (f'[spiderd]\ndata_dir = "{tmp / "data"}"\n[pool]\nbackend = "memory"\nseeds = {json.dumps(seeds)}\n'
            f'[parse]\nworkers = 0\n[store]\nurl = "none"\n[batch]\ntargets = []\n[api]\n{api_lines}')


class Run:
    """spiderctl's main() with its output and errors captured."""

    def __init__(self, case: TestCase, url: str, token: str = TOKEN) -> None:
        self.case = case
        self.base = ["--url", url] + (["--token", token] if token else [])

    def __call__(self, *argv: str, stdin: str | None = None) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        self.case.patch(sys, "stderr", err)
        if stdin is not None:
            self.case.patch(sys, "stdin", io.StringIO(stdin))
        code = ctl.main([*self.base, *argv], out)
        return code, out.getvalue(), err.getvalue()


class RealDaemonTests(TestCase):
    """spiderctl and a real daemon process: every command, and the errors a person meets."""

    timeout = 180

    def setUp(self) -> None:
        self.tmp = Path(self.mktemp()).resolve()
        self.tmp.mkdir(parents=True)
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.dead = f"http://127.0.0.1:{closed_port()}"

    def start(self, seeds: list[str], logfile: bool = False, **api: Any) -> Daemon:
        daemon = Daemon(self.tmp, config(self.tmp, seeds, **api), logfile)
        self.addCleanup(daemon.stop)
        return daemon

    def test_every_command(self) -> None:
        """status, add (arguments, file, stdin), pause/resume, why, export/import; wrong token; bad request; down."""
        daemon = self.start([])
        run = Run(self, daemon.url)
        assert run("pause") == (0, "the crawl is paused\n", "")
        code, out, err = run("add", "seeds", f"{self.dead}/a", f"{self.dead}/b", "ftp://nope/")
        assert (code, out) == (0, "seeds: 2 added, 0 known, 1 rejected\n") and "ftp://nope/ (bad-scheme)" in err
        urls = self.tmp / "urls.txt"
        urls.write_text(f"# details\n{self.dead}/item/1\n\n{self.dead}/item/2\n{self.dead}/a\n")
        assert run("add", "urls", "--detail", "-f", str(urls))[:2] == (0, "urls: 2 added, 1 known, 0 rejected\n")
        assert run("add", "urls", "-", stdin=f"{self.dead}/c\n{self.dead}/b\n")[:2] == \
            (0, "urls: 1 added, 1 known, 0 rejected\n")
        assert run("add", "hubs", "--refresh-span", "60", f"{self.dead}/hub")[:2] == \
            (0, "hubs: 1 added, 0 known, 0 rejected\n")

        code, out, _ = run("status")
        assert code == 0 and "crawl:    paused" in out and "pool:     5 waiting" in out, out
        code, out, _ = run("status", "--json")
        status = json.loads(out)
        assert status["pool"]["waiting"] == 5 and status["pool"]["hubs"] == 1 and status["crawler"]["paused"]
        code, out, _ = run("why", f"{self.dead}/item/2")
        assert code == 0 and ": waiting" in out and "the crawler is paused" in out and "kind: detail" in out

        export = self.tmp / "pool.jl"
        code, _, err = run("export", "-o", str(export))
        lines = [json.loads(line) for line in export.read_text().splitlines()]
        assert code == 0 and len(lines) == 5 and "exported 5 entries" in err
        assert sorted(r["kind"] for r in lines) == ["detail"] * 2 + ["list"] * 3
        assert run("import", str(export))[:2] == \
            (0, "imported: 0 URLs queued, 0 finished entries restored, 5 known, 0 rejected\n")

        code, _, err = Run(self, daemon.url, token="wrong")("status")
        assert code == ctlclient.UNAUTHORIZED and "refused the credentials (401)" in err
        code, _, err = run("add", "hubs", "--refresh-span", "0", f"{self.dead}/hub")
        assert code == ctlclient.REFUSED and err == ("spiderctl: spiderd refused the request (400): 'refresh_span' must "
                                               "be a number of seconds, more than 0 and at most 1e+09, got 0.0\n")
        assert run("add", "seeds")[0] == ctlclient.USAGE

        script = subprocess.run([sys.executable, "-m", "spiderd.ops.ctl", "--url", daemon.url, "status", "--json"],
                                capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT),
                                                                         SPIDERD_TOKEN=TOKEN), timeout=60)
        assert script.returncode == 0 and json.loads(script.stdout)["role"] == "all"
        assert run("resume") == (0, "the crawl runs\n", "")

        assert daemon.stop() in (-signal.SIGTERM, 128 + signal.SIGTERM)
        code, _, err = run("status")
        assert code == ctlclient.UNREACHABLE and f"cannot reach spiderd at {daemon.url}: connection refused" in err

    def test_sighup_reloads_seeds_and_reopens_the_log(self) -> None:
        """SIGHUP: the new seeds are added, the moved log file is reopened; a bad file is one error line, no more."""
        daemon = self.start([f"{self.dead}/first"], logfile=True)
        run = Run(self, daemon.url)
        assert run("pause")[0] == 0
        daemon.config.write_text(config(self.tmp, [f"{self.dead}/first", f"{self.dead}/second"]))
        daemon.log.rename(daemon.log.with_suffix(".log.1"))  # as logrotate does
        daemon.process.send_signal(signal.SIGHUP)
        daemon.wait_for(r"Reload \(SIGHUP\): reading .*; 1 log files reopened")
        daemon.wait_for(r"Reload \(SIGHUP\): changed: pool.seeds; no restart needed")
        daemon.wait_for(r"Seeds: 1 of 2 added")
        assert "Reload (SIGHUP)" not in daemon.log.with_suffix(".log.1").read_text()
        code, out, _ = run("why", "--json", f"{self.dead}/second")
        assert code == 0 and json.loads(out)["state"] == "waiting"

        daemon.config.write_text(config(self.tmp, ["ftp://not-a-seed/"]))
        daemon.process.send_signal(signal.SIGHUP)
        line = daemon.wait_for(r".*Reload \(SIGHUP\) refused: configuration error: .*").group(0)
        assert "pool.seeds: bad URL 'ftp://not-a-seed/'" in line and "the running configuration is kept" in line
        assert daemon.process.poll() is None
        code, out, _ = run("status", "--json")
        assert code == 0 and json.loads(out)["crawler"]["paused"] is True  # still running, as it was
        assert daemon.stop() in (-signal.SIGTERM, 128 + signal.SIGTERM)


class InProcessTests(TestCase):
    """spiderctl's main() in a thread against the API in this process (basic auth, chunking, stream errors)."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.node = make_node(self.clock)
        self.api = start_api(reactor, self.node, self.clock, Auth(username="ops", password="pw"))
        self.addCleanup(self.api.stopService)
        self.tmp = Path(self.mktemp())
        self.tmp.mkdir(parents=True)
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def ctl(self, *argv: str) -> defer.Deferred[tuple[int, str]]:
        out = io.StringIO()
        base = ["--url", self.api.url, "--user", "ops", "--password", "pw"]
        return threads.deferToThread(ctl.main, [*base, *argv], out).addCallback(lambda code: (code, out.getvalue()))

    @defer.inlineCallbacks
    def test_add_and_import_in_chunks(self) -> Gen:
        """Many URLs go in several requests; import rejects are numbered as lines of the file."""
        self.patch(ctl, "MAX_URLS", 3)
        self.patch(ctl, "IMPORT_LINES", 2)
        self.patch(sys, "stderr", io.StringIO())
        urls = self.tmp / "urls.txt"
        urls.write_text("".join(f"http://a.example/{i}\n" for i in range(8)))
        assert (yield self.ctl("add", "seeds", "-f", str(urls))) == (0, "seeds: 8 added, 0 known, 0 rejected\n")
        dump = self.tmp / "in.jl"
        dump.write_text('{"url": "http://b.example/1", "state": "waiting"}\n{"url": "ftp://x/", "state": "waiting"}\n'
                        '{"url": "http://b.example/2", "state": "pending", "kind": "detail"}\nnot json\n')
        code, out = yield self.ctl("import", str(dump))
        assert (code, out) == (0, "imported: 2 URLs queued, 0 finished entries restored, 0 known, 2 rejected\n")
        errors = sys.stderr.getvalue()
        assert "line 2 rejected: bad URL (bad-scheme)" in errors and "line 4 rejected: not JSON" in errors
        assert (yield self.node.pool.stats())["waiting"] == 10

    @defer.inlineCallbacks
    def test_export_to_stdout_and_a_broken_stream(self) -> Gen:
        """export writes JSON lines; an error line from the server ends it with status 1."""
        yield self.node.pool.addmany(["http://a.example/1", "http://a.example/2"])
        buffer = io.BytesIO()
        out = io.TextIOWrapper(buffer, encoding="utf-8")
        code = yield threads.deferToThread(ctl.main, ["--url", self.api.url, "--user", "ops", "--password", "pw",
                                                      "export"], out)
        assert code == 0 and len(buffer.getvalue().splitlines()) == 2

        class Broken:
            def __init__(self) -> None:
                self.calls = 0

            def next(self) -> defer.Deferred[Any]:
                self.calls += 1
                if self.calls == 1:
                    return defer.succeed([{"url": "http://a.example/1", "state": "waiting", "kind": "list"}])
                return defer.fail(RuntimeError("the disk is gone"))

        self.patch(self.node.pool, "export", lambda chunk=1000: Broken())
        self.patch(sys, "stderr", io.StringIO())
        code, _ = yield self.ctl("export", "-o", str(self.tmp / "x.jl"))
        assert code == ctlclient.REFUSED
        assert "the export stopped after 1 entries: the export failed: the disk is gone" in sys.stderr.getvalue()
        assert len(self.flushLoggedErrors(RuntimeError)) == 1

    @defer.inlineCallbacks
    def test_why_tells_the_last_failure(self) -> Gen:
        """why of a URL retried after a 503 and of one failed for good names the last failure, its count and time."""
        pool = self.node.pool
        yield pool.addmany(["http://a.example/retry", "http://b.example/gone"])
        yield pool.pop(10)
        self.clock.advance(90)
        yield pool.set_status("http://a.example/retry", 503)
        yield pool.set_status("http://b.example/gone", st.TOO_LARGE,
                              "too large: Content-Length 20000, over the limit of 1000 bytes")
        code, out = yield self.ctl("why", "http://a.example/retry")
        assert code == 0 and ": waiting\n" in out and "and is retried (the last: http 503)" in out, out
        assert "  last failure: http 503 (failure 1, at 1970-01-01 00:01:30 UTC)\n" in out, out
        code, out = yield self.ctl("why", "http://b.example/gone")
        assert code == 0 and out.startswith("http://b.example/gone: failed\n"), out
        assert "failed for good after 1 failure(s), the last: too large: Content-Length 20000, over the" in out, out
        code, out = yield self.ctl("why", "--json", "http://b.example/gone")
        assert json.loads(out)["last_failure"] == {
            "reason": "too large: Content-Length 20000, over the limit of 1000 bytes", "at": 90.0, "failures": 1}

    @defer.inlineCallbacks
    def test_failures_newest_first_with_the_reason(self) -> Gen:
        """GET /api/failures through `spiderctl failures`: URLs failed for good, newest first, each with its
        reason; a URL still retried is not one of them; --limit and --json."""
        pool = self.node.pool
        yield pool.addmany(["http://a.example/retry", "http://b.example/gone", "http://c.example/big"])
        yield pool.pop(10)
        self.clock.advance(60)
        yield pool.set_status("http://b.example/gone", 404)
        self.clock.advance(30)
        yield pool.set_status("http://c.example/big", st.TOO_LARGE, "too large: over the limit of 1000 bytes")
        yield pool.set_status("http://a.example/retry", 503)
        code, out = yield self.ctl("failures")
        lines = out.splitlines()
        assert code == 0 and lines[0] == "1970-01-01 00:01:30 UTC  http://c.example/big", out
        assert lines[1].strip().startswith("too large: over the limit of 1000 bytes")
        assert lines[2] == "1970-01-01 00:01:00 UTC  http://b.example/gone" and "http 404" in lines[3], out
        assert "retry" not in out
        code, out = yield self.ctl("failures", "--limit", "1", "--json")
        assert json.loads(out)["failures"] == [
            {"url": "http://c.example/big", "reason": "too large: over the limit of 1000 bytes", "at": 90.0}]

    @defer.inlineCallbacks
    def test_hosts_throttled_first_then_the_largest_queues(self) -> Gen:
        """GET /api/hosts through `spiderctl hosts`: the throttled host first with when its block ends, then the
        most waiting URLs, each with in flight of its concurrency, next turn, delay and why, errors; --json."""
        pool = self.node.pool
        pool.politeness.delay = 2.0
        yield pool.set_host_delay("robots.example", 5.0)
        yield pool.addmany(["http://thr.example/1", "http://robots.example/1", "http://robots.example/2"]
                           + [f"http://big.example/{i}" for i in range(3)])
        yield pool.pop(1)  # thr.example/1
        yield pool.throttle("http://thr.example/1", 90.0, 429)
        yield pool.pop(1)  # robots.example/1 (big.example's turn comes later)
        code, out = yield self.ctl("hosts")
        lines = [line.split("  ") for line in out.splitlines()]
        cells = [[c.strip() for c in line if c.strip()] for line in lines]
        assert code == 0 and cells[0] == ["HOST", "WAITING", "IN FLIGHT", "NEXT TURN", "DELAY", "ERRORS", "WHY"], out
        assert cells[1] == ["thr.example", "1", "0/1", "in 90.0s", "2s", "1",
                            "throttled (429/503 Retry-After) until 00:01:30 UTC"], out
        assert cells[2] == ["big.example", "3", "0/1", "now", "2s", "0", "configured"], out
        assert cells[3] == ["robots.example", "1", "1/1", "in 5.0s", "5s", "0", "Crawl-delay (robots.txt)"], out
        code, out = yield self.ctl("hosts", "--limit", "1", "--json")
        assert [r["host"] for r in json.loads(out)["hosts"]] == ["thr.example"]

    @defer.inlineCallbacks
    def test_admin_commands_on_a_pool_without_them(self) -> Gen:
        """why, hosts, export and import on a pool with the core contract only: status 1 and the server's reason."""
        self.node.pool = CoreOnlyPool(self.node.pool)
        dump = self.tmp / "in.jl"
        dump.write_text('{"url": "http://b.example/1", "state": "waiting"}\n')
        for argv, path in [(("why", "http://a.example/"), "why"), (("export", "-o", str(self.tmp / "x.jl")), "export"),
                           (("import", str(dump)), "import"), (("hosts",), "hosts")]:
            self.patch(sys, "stderr", io.StringIO())
            code, _ = yield self.ctl(*argv)
            assert code == ctlclient.REFUSED, argv
            assert (f"refused the request (404): /api/{path}: not available for this pool: its backend has no "
                    "admin interface (why, hosts, export, import)") in sys.stderr.getvalue(), sys.stderr.getvalue()

    @defer.inlineCallbacks
    def test_basic_auth_needed(self) -> Gen:
        """Without credentials: 401, exit status 4; --user without --password is a usage error."""
        self.patch(sys, "stderr", io.StringIO())
        code = yield threads.deferToThread(ctl.main, ["--url", self.api.url, "status"], io.StringIO())
        assert code == ctlclient.UNAUTHORIZED
        assert ctl.main(["--url", self.api.url, "--user", "ops", "status"], io.StringIO()) == ctlclient.USAGE
        code, out = yield self.ctl("status")
        assert code == 0 and out.startswith("spiderd ") and "pool:     0 waiting" in out
