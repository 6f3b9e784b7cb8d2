"""Scrapyd's clients against a real worker on 127.0.0.1: deploy endpoints, job logs and pages, job settings.

scrapyd-client (``scrapyd-deploy``) and python-scrapyd-api are run for real where they are installed
(``pip install '.[test]'`` installs them); those tests skip otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.internet.threads import deferToThread
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial import unittest

from spiderd.demo.site import PRIVATE
from spiderd.worker import joblog
from tests.test_worker import SECRET, WorkerTestBase

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "scrapyd-project")
NO_EGGS = "this is a spiderd worker, not Scrapyd, and it takes no eggs: it runs the spiders of its configuration's " \
          "[[sites]] (project 'spiderd', spiders: demo-shop); add or change a spider in [[sites]] and restart the worker"


def _scrapyd_api() -> Any:
    try:
        import scrapyd_api
    except ImportError:
        raise unittest.SkipTest("python-scrapyd-api is not installed (pip install '.[test]')") from None
    return scrapyd_api


def _deploy_command() -> str:
    found = shutil.which("scrapyd-deploy", path=os.path.dirname(sys.executable)) or shutil.which("scrapyd-deploy")
    if found is None:
        raise unittest.SkipTest("scrapyd-client is not installed (pip install '.[test]')")
    return found


class DeployTests(WorkerTestBase):
    """addversion.json, delversion.json and delproject.json: Scrapyd's checks, then a refusal that says why."""

    @defer.inlineCallbacks
    def test_answers_in_scrapyds_shape(self) -> Any:
        """Each answers HTTP 200 with status error: Scrapyd 1.6's message for a missing parameter or an unknown
        project or version, else what a spiderd worker runs; nothing is a 404."""
        service = self.worker()
        version = service.validator.versions[0]
        egg = {"files": {"egg": ("project.egg", b"PK\x05\x06" + b"\x00" * 18)}}
        cases: list[tuple[str, Any, dict[str, Any], str]] = [
            ("/addversion.json", [], {}, "'project' parameter is required"),
            ("/addversion.json", [("project", "spiderd")], {}, "'version' parameter is required"),
            ("/addversion.json", [("project", "spiderd"), ("version", "r1")], {}, "'egg' parameter is required"),
            ("/addversion.json", [("project", "spiderd"), ("version", "r1")], egg,
             "cannot add version 'r1' to project 'spiderd': " + NO_EGGS),
            ("/addversion.json", [("project", "new"), ("version", "r1"), ("egg", "\xff")], {},
             "cannot add version 'r1' to project 'new': " + NO_EGGS),
            ("/delversion.json", [], {}, "'project' parameter is required"),
            ("/delversion.json", [("project", "spiderd")], {}, "'version' parameter is required"),
            ("/delversion.json", [("project", "spiderd"), ("version", "r1")], {}, "version 'r1' not found"),
            ("/delversion.json", [("project", "nope"), ("version", version)], {}, f"version '{version}' not found"),
            ("/delversion.json", [("project", "spiderd"), ("version", version)], {},
             f"cannot delete version '{version}' of project 'spiderd': " + NO_EGGS),
            ("/delproject.json", [], {}, "'project' parameter is required"),
            ("/delproject.json", [("project", "nope")], {}, "project 'nope' not found"),
            ("/delproject.json", [("project", "spiderd")], {}, "cannot delete project 'spiderd': " + NO_EGGS),
        ]
        for endpoint, data, extra, message in cases:
            code, answer, _ = yield self.call("POST", endpoint, data, **extra)
            self.assertEqual((code, answer), (200, {"status": "error", "message": message, "node_name": "test-node"}),
                             f"{endpoint} {data!r}")
        code, answer, _ = yield self.call("GET", "/delproject.json?project=spiderd")
        self.assertEqual((code, answer["message"]), (200, "UnsupportedMethod: Expected one of [b'HEAD', b'OPTIONS', "
                                                          "b'POST']"))
        _, answer, _ = yield self.call("GET", "/listprojects.json")
        self.assertEqual(answer["projects"], ["spiderd"])

    @defer.inlineCallbacks
    def test_scrapyd_deploy(self) -> Any:
        """scrapyd-deploy of the example project prints the worker's refusal, not "Deploy failed (404)"."""
        command = _deploy_command()
        self.worker()
        project = os.path.join(self.tmp, "project")
        shutil.copytree(EXAMPLE, project)
        with open(os.path.join(project, "scrapy.cfg"), "a", encoding="utf-8") as f:
            f.write(f"\n[deploy:worker]\nurl = {self.api}/\nproject = spiderd\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPY")}
        out, err, code = yield getProcessOutputAndValue(command, ["worker", "-v", "r1"], env=env, path=project,
                                                        reactor=reactor)
        said = out.decode() + err.decode()
        self.assertNotIn("404", said)
        self.assertIn('Deploying to project "spiderd"', said)
        self.assertIn("Server response (200):", said)
        self.assertIn("cannot add version 'r1' to project 'spiderd': " + NO_EGGS, said)
        self.assertEqual(code, 0, said)  # scrapyd-deploy prints a 200 error answer and exits 0, as with Scrapyd

    @defer.inlineCallbacks
    def test_python_scrapyd_api(self) -> Any:
        """python-scrapyd-api raises ScrapydResponseError with the worker's message for each call."""
        scrapyd_api = _scrapyd_api()
        service = self.worker()
        version = service.validator.versions[0]
        api = scrapyd_api.ScrapydAPI(self.api)
        egg = os.path.join(self.tmp, "project.egg")
        with open(egg, "wb") as f:
            f.write(b"PK\x05\x06" + b"\x00" * 18)

        def raised(call: Any, *args: Any) -> str:
            try:
                call(*args)
            except scrapyd_api.exceptions.ScrapydResponseError as e:
                return str(e)
            return "no error"

        def calls() -> list[str]:
            with open(egg, "rb") as f:
                added = raised(api.add_version, "spiderd", "r1", f)
            return [added, raised(api.delete_version, "spiderd", version), raised(api.delete_project, "spiderd"),
                    raised(api.delete_project, "nope")]

        said = yield deferToThread(calls)  # the client blocks; the worker answers on this reactor
        self.assertEqual(said, ["cannot add version 'r1' to project 'spiderd': " + NO_EGGS,
                                f"cannot delete version '{version}' of project 'spiderd': " + NO_EGGS,
                                "cannot delete project 'spiderd': " + NO_EGGS,
                                "project 'nope' not found"])
        projects = yield deferToThread(api.list_projects)
        self.assertEqual(projects, ["spiderd"])


class JobLogTests(WorkerTestBase):
    """Each job's log at Scrapyd's /logs/<project>/<spider>/<job>.log, named by log_url in listjobs.json."""

    @defer.inlineCallbacks
    def log_of(self, path: str, **kwargs: Any) -> Any:
        code, body, response = yield self.call("GET", path, **kwargs)
        return code, body if isinstance(body, bytes) else json.dumps(body).encode(), response

    @defer.inlineCallbacks
    def test_log_url_and_log(self) -> Any:
        """A running job's and a finished job's log_url name their log, which has the worker's lines about the
        job (accepted, started, each failed URL with why, finished with its counts) and no password."""
        service = self.worker(job_concurrency=1)
        expected = self.spec.expected()
        failing = [sorted(expected.not_found)[0], sorted(expected.server_error)[0], PRIVATE]
        jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("jobid", "logged"),
                                    ("setting", self.urls(self.slow(), *self.good(0, 2), *failing)),
                                    ("setting", f"FEED_URI=ftp://bob:{SECRET}@127.0.0.1:1/%(batch)s.jl"))
        yield self.gate.arrival(1)
        _, jobs, _ = yield self.call("GET", "/listjobs.json")
        self.assertEqual(jobs["running"][0]["log_url"], "/logs/spiderd/demo-shop/logged.log")
        self.gate.open()
        yield service.runner.when_done(jobid)
        _, jobs, _ = yield self.call("GET", "/listjobs.json")
        [finished] = jobs["finished"]
        self.assertEqual((finished["log_url"], finished["items_url"]), ("/logs/spiderd/demo-shop/logged.log", None))
        code, body, response = yield self.log_of(finished["log_url"])
        self.assertEqual(code, 200)
        self.assertEqual(response.headers.getRawHeaders("content-type"), ["text/plain; charset=utf-8"])
        self.assertEqual(response.headers.getRawHeaders("x-content-type-options"), ["nosniff"])
        text = body.decode()
        lines = text.splitlines()
        self.assertRegex(lines[0], r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[spiderd\.worker\] INFO: Worker: accepted job "
                                   r"logged \(spider demo-shop, 6 URLs, priority 0\.0, feed ftp://bob:\*\*\*@127")
        self.assertIn("INFO: Worker: job logged (demo-shop) started: 6 URLs", lines[1])
        root = self.root
        self.assertIn(f"WARNING: {root}{failing[0]} failed: HTTP 404 (not retried)", text)
        self.assertIn(f"WARNING: {root}{failing[1]} failed: HTTP 500, 2 attempts", text)
        self.assertIn(f"WARNING: {root}{PRIVATE} failed: denied by robots.txt (not retried)", text)
        self.assertIn("stats: failed=3, items=3, pages=3", text)
        self.assertTrue(lines[-1].endswith("INFO: Worker: job logged finished: 3 items from 3 pages, 3 URLs failed"),
                        lines[-1])
        self.assertNotIn(SECRET, text)
        self.assertEqual(len(lines), 7)

    @defer.inlineCallbacks
    def test_log_survives_a_restart_and_goes_with_its_job(self) -> Any:
        """A job's log is served again after a restart (lines of both runs), and is deleted when the job is pruned."""
        self.gate.open()
        service = self.worker(finished_to_keep=1)
        first = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("jobid", "first"),
                                    ("setting", self.urls(*self.good(0, 1))))
        yield service.runner.when_done(first)
        yield service.stopService()
        log_file = os.path.join(self.data, "worker", "logs", "first.log")
        with open(log_file, encoding="utf-8") as f:
            self.assertIn("Worker: job first finished: 1 items from 1 pages", f.read())
        self.assertEqual(stat.S_IMODE(os.stat(log_file).st_mode), 0o600)
        service = self.worker(finished_to_keep=1)
        code, body, _ = yield self.log_of("/logs/spiderd/demo-shop/first.log")
        self.assertEqual(code, 200)
        self.assertIn(b"Worker: job first finished", body)
        again = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("jobid", "first"),
                                    ("setting", self.urls(*self.good(0, 1))))  # the same request: not run again
        self.assertEqual(again, "first")
        second = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("jobid", "second"),
                                     ("setting", self.urls(*self.good(1, 1))))
        yield service.runner.when_done(second)
        yield service.stopService()  # the queued deletion is done
        self.assertEqual(sorted(os.listdir(os.path.dirname(log_file))), ["second.log"])
        service = self.worker(finished_to_keep=1)
        code, body, _ = yield self.log_of("/logs/spiderd/demo-shop/first.log")
        self.assertEqual(code, 404)
        _, jobs, _ = yield self.call("GET", "/listjobs.json")
        self.assertEqual([(j["id"], j["log_url"]) for j in jobs["finished"]],
                         [("second", "/logs/spiderd/demo-shop/second.log")])

    @defer.inlineCallbacks
    def test_log_is_bounded(self) -> Any:
        """Lines about single URLs stop at the cap, one line says so, and the last line counts what was left out."""
        self.patch(joblog, "URL_LINES_BYTES", 2048)
        self.patch(joblog, "MAX_BYTES", 4096)
        self.gate.open()
        service = self.worker()
        missing = [f"/item/{100000 + i}.html" for i in range(200)]
        jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("jobid", "many"),
                                    ("setting", self.urls(*missing)))
        yield service.runner.when_done(jobid)
        _, body, _ = yield self.log_of("/logs/spiderd/demo-shop/many.log")
        lines = body.decode().splitlines()
        self.assertLessEqual(len(body), 4096)
        failed = [line for line in lines if "failed: HTTP 404" in line]
        self.assertTrue(10 < len(failed) < 30, len(failed))
        [note] = [line for line in lines if "holds no more lines about single URLs" in line]
        self.assertIn("its cap: 2 KiB of them, 4 KiB in all", note)
        self.assertTrue(lines[-1].endswith(f"finished: 0 items from 0 pages, 200 URLs failed ({200 - len(failed)} "
                                           "lines about single URLs not in this log)"), lines[-1])



class PageTests(WorkerTestBase):
    """/ and /jobs as Scrapyd's small HTML pages, /logs/ as its listing: escaped, guarded, authenticated."""

    @defer.inlineCallbacks
    def test_home_and_jobs_pages(self) -> Any:
        """The pages name the project, spiders and every job with its times and log; no script, nothing external."""
        service = self.worker(max_jobs=1)
        done = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("jobid", "done-1"))
        yield service.runner.when_done(done)
        yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("jobid", "held-1"),
                                   ("setting", self.urls(self.slow())))
        yield self.gate.arrival(1)
        yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("jobid", "waiting-1"))
        code, home, response = yield self.call("GET", "/")
        self.assertEqual((code, response.headers.getRawHeaders("content-type")), (200, ["text/html; charset=utf-8"]))
        self.assertIn(b'<a href="/jobs">Jobs</a>', home)
        self.assertIn(b'<a href="/logs/">Logs</a>', home)
        self.assertIn(b"<li>demo-shop</li>", home)
        self.assertIn(b"project=spiderd -d spider=SPIDER", home)
        code, page, response = yield self.call("GET", "/jobs")
        self.assertEqual(code, 200)
        text = page.decode()
        pending, running, finished = (text.index(f">{name}</th>") for name in ("Pending", "Running", "Finished"))
        self.assertTrue(pending < text.index(">waiting-1<") < running < text.index(">held-1<") < finished
                        < text.index(">done-1<"), text)
        self.assertIn('<a href="/logs/spiderd/demo-shop/done-1.log">Log</a>', text)
        self.assertIn(f"<td>{os.getpid()}</td>", text)
        for page in (home, text.encode()):
            self.assertNotIn(b"<script", page)
            self.assertNotIn(b"http://", page.replace(b"curl http://", b""))
            self.assertNotIn(b"<form", page)
        policy = response.headers.getRawHeaders("content-security-policy")[0]
        self.assertIn("default-src 'none'", policy)
        code, listing, _ = yield self.call("GET", "/logs/")
        self.assertIn(b'<a href="/logs/spiderd/">spiderd/</a>', listing)
        code, listing, _ = yield self.call("GET", "/logs/spiderd/demo-shop/")
        self.assertEqual(code, 200)
        for jobid in ("done-1", "held-1", "waiting-1"):
            self.assertIn(f'<a href="/logs/spiderd/demo-shop/{jobid}.log">{jobid}.log</a>'.encode(), listing)
        for missing in ("/logs/nope/", "/logs/spiderd/other/x.log", "/logs/spiderd/demo-shop/nope.log",
                        "/logs/spiderd/demo-shop/done-1.log/x", "/logs/../jobs/done-1.json"):
            code, answer, _ = yield self.call("GET", missing)
            self.assertEqual((code, answer["status"]), (404, "error"), missing)
        code, answer, response = yield self.call("POST", "/jobs", [("x", "y")])
        self.assertEqual((code, answer["status"]), (405, "error"))
        code, body, _ = yield self.call("HEAD", "/jobs")
        self.assertEqual((code, body), (200, None))
        self.gate.open()

    @defer.inlineCallbacks
    def test_values_are_escaped(self) -> Any:
        """A client's Host header and a FEED_URI full of markup are shown as text, never as HTML."""
        self.gate.open()
        service = self.worker(username="scrapy", password=SECRET)
        auth = ("scrapy", SECRET)
        hostile = '"><script>alert(1)</script>'
        code, home, _ = yield self.call("GET", "/", headers={"Host": "h" + hostile}, auth=auth)
        self.assertEqual(code, 200)
        self.assertNotIn(b"<script>", home)
        self.assertIn(b"h&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;", home)
        feed = f"FEED_URI=file://{self.feeds}/%(batch)s<script>x</script>.jl"
        code, answer, _ = yield self.call("POST", "/schedule.json", [("project", "spiderd"), ("spider", "demo-shop"),
                                                                    ("jobid", "j1"), ("setting", feed)], auth=auth)
        self.assertEqual(answer["status"], "ok", answer)
        yield service.runner.when_done("j1")
        code, body, response = yield self.call("GET", "/logs/spiderd/demo-shop/j1.log", auth=auth)
        self.assertEqual(response.headers.getRawHeaders("content-type"), ["text/plain; charset=utf-8"])
        self.assertEqual(response.headers.getRawHeaders("x-content-type-options"), ["nosniff"])
        code, page, _ = yield self.call("GET", "/jobs", auth=auth)
        self.assertNotIn(b"<script", page)

    @defer.inlineCallbacks
    def test_pages_need_the_apis_credentials(self) -> Any:
        """With basic auth, pages and logs answer 401 without the credentials; without auth, the browser guard
        refuses a Host that is not loopback, as for the JSON endpoints."""
        self.gate.open()
        service = self.worker(username="scrapy", password=SECRET)
        code, answer, _ = yield self.call("POST", "/schedule.json", [("project", "spiderd"), ("spider", "demo-shop"),
                                                                    ("jobid", "j1")], auth=("scrapy", SECRET))
        yield service.runner.when_done("j1")
        for path in ("/", "/jobs", "/logs/", "/logs/spiderd/demo-shop/j1.log"):
            code, answer, response = yield self.call("GET", path)
            self.assertEqual((code, answer["status"]), (401, "error"), path)
            self.assertEqual(response.headers.getRawHeaders("www-authenticate"), ['Basic realm="spiderd"'])
            code, _, _ = yield self.call("GET", path, auth=("scrapy", SECRET))
            self.assertEqual(code, 200, path)
        yield service.stopService()
        self.worker()
        for path in ("/", "/jobs", "/logs/spiderd/demo-shop/j1.log"):
            code, answer, _ = yield self.call("GET", path, headers={"Host": "rebound.example:6800"})
            self.assertEqual(code, 403, path)
            self.assertIn("loopback host name", answer["message"])


class LogWritesTests(unittest.SynchronousTestCase):
    """Job logs are written by the I/O runner they are given, never on the caller's thread."""

    def test_lines_go_through_the_io_runner(self) -> None:
        """Lines are queued, handed to the I/O runner at the next turn in one batch, and only then written."""
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        calls: list[Any] = []

        def io(function: Any, *args: Any) -> Any:
            calls.append((function, args))
            return defer.succeed(None)

        clock = Clock()
        logs = joblog.JobLogs(directory, io, clock)
        logs.open([])
        logs.line("j1", "one")
        logs.line("j1", "two: ftp://u:pw@h/x\nforged line")
        self.assertEqual((calls, os.listdir(directory)), ([], []))
        clock.advance(0)
        [(function, args)] = calls
        function(*args)
        with open(os.path.join(directory, "j1.log"), encoding="utf-8") as f:
            text = f.read()
        self.assertEqual([line.partition("INFO: ")[2] for line in text.splitlines()],
                         ["one", "two: ftp://u:***@h/x\\nforged line"])
        self.assertTrue(logs.has("j1"))
