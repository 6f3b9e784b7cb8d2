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
import time
from collections import Counter
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.defer import Deferred
from twisted.internet import task
from twisted.internet.task import Clock
from twisted.internet.threads import deferToThread
from twisted.internet.utils import getProcessOutputAndValue
from twisted.logger import LogLevel, capturedLogs, formatEvent
from twisted.trial import unittest
from twisted.web import resource, server

from spiderd.core.rules import AdaptiveDelay
from spiderd.demo.pages import PRIVATE
from spiderd.worker import WorkerService, joblog
from tests.test_worker import SECRET, UA, WorkerTestBase

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
        self.assertNotIn("(404)", said)  # ("Deploy failed (404)"; a bare "404" may be in the port's number)
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
        own = [line for line in lines if not line.startswith((" ", "{"))]  # not the lines of Scrapy's stats dict
        self.assertEqual(len(own), 9)  # with Scrapy's "Crawled 0 pages ..." at the start, its stats at the end

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
        service = self.worker(max_jobs=1, concurrency=1)
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
        self.assertIn(b'<a href="spiderd/">spiderd/</a>', listing)  # relative, as Scrapyd's (Twisted's) listing
        code, listing, _ = yield self.call("GET", "/logs/spiderd/demo-shop/")
        self.assertEqual(code, 200)
        for jobid in ("done-1", "held-1", "waiting-1"):
            self.assertIn(f'<a href="{jobid}.log">{jobid}.log</a>'.encode(), listing)
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
                                                                    ("jobid", "j1"), ("setting", feed),
                                                                    ("setting", self.urls())], auth=auth)
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
                                                                    ("jobid", "j1"), ("setting", self.urls())],
                                          auth=("scrapy", SECRET))
        yield service.runner.when_done("j1")
        for path in ("/", "/jobs", "/logs/", "/logs/spiderd/demo-shop/j1.log"):
            code, answer, response = yield self.call("GET", path)
            self.assertEqual((code, answer), (401, b"Unauthorized"), path)  # Scrapyd's body
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


class HoldingSite(resource.Resource):
    """Detail pages answered at once or held until the test releases them; records each request (port, path,
    user agent) and the most requests in flight, in all and per port."""

    isLeaf = True
    ROBOTS = b"User-agent: jobbot\nDisallow: /item/2.html\n\nUser-agent: *\nDisallow: /item/3.html\n"

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.held: list[Any] = []
        self.seen: list[tuple[int, str, str]] = []
        self.in_flight: Counter[int] = Counter()
        self.most = 0
        self.most_per_host = 0
        self._waiters: list[tuple[int, Deferred[None]]] = []

    def render_GET(self, request: Any) -> Any:
        path = request.path.decode()
        if path == "/robots.txt":
            return self.ROBOTS
        port = request.getHost().port
        self.seen.append((port, path, (request.getHeader(b"user-agent") or b"").decode()))
        self.in_flight[port] += 1
        self.most = max(self.most, sum(self.in_flight.values()))
        self.most_per_host = max(self.most_per_host, self.in_flight[port])
        for n, d in [w for w in self._waiters if w[0] <= len(self.seen)]:
            self._waiters.remove((n, d))
            reactor.callLater(0, d.callback, None)
        if self.hold:
            self.held.append(request)
            return server.NOT_DONE_YET
        self.in_flight[port] -= 1
        return b'<html><body><h1 class="title">%s</h1></body></html>' % path.encode()

    def arrival(self, count: int) -> Deferred[None]:
        """Fires once ``count`` page requests arrived in all."""
        d: Deferred[None] = Deferred()
        if len(self.seen) >= count:
            d.callback(None)
        else:
            self._waiters.append((count, d))
        return d

    def release(self, count: int | None = None) -> None:
        """Answer the first ``count`` held requests (all if None)."""
        count = len(self.held) if count is None else count
        for request in self.held[:count]:
            self.in_flight[request.getHost().port] -= 1
            request.write(b'<html><body><h1 class="title">held</h1></body></html>')
            request.finish()
        del self.held[:count]


class JobSettingsTests(WorkerTestBase):
    """DOWNLOAD_DELAY, CONCURRENT_REQUESTS(_PER_DOMAIN), USER_AGENT, ROBOTSTXT_OBEY and FEEDS act on the job, within
    the worker's limits; other settings are listed in ignored_settings and logged."""

    def setUp(self) -> None:
        super().setUp()
        self.site = HoldingSite()
        factory = server.Site(self.site)
        factory.noisy = False
        self.ports = []
        for _ in range(2):
            port = reactor.listenTCP(0, factory, interface="127.0.0.1")
            self.addCleanup(port.stopListening)
            self.ports.append(port.getHost().port)
        self.addCleanup(self.site.release)

    def url(self, host: int, n: int) -> str:
        return f"http://127.0.0.1:{self.ports[host]}/item/{n}.html"

    def clocked(self, clock: Clock, **overrides: Any) -> WorkerService:
        service = WorkerService(reactor, self.config(**overrides), self.fetcher, self.parser(), self.store,
                                self.shipper, clock=clock)
        service.startService()
        self.addCleanup(lambda: service.stopService() if service.running else None)
        self.api = "http://%s:%d" % service.address
        return service

    @defer.inlineCallbacks
    def run_job(self, jobid: str, urls: list[str], *settings: str) -> Any:
        yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("jobid", jobid),
                            ("setting", "DISTRIBUTED_START_URLS=" + json.dumps(urls)),
                            *(("setting", s) for s in settings))

    @defer.inlineCallbacks
    def test_concurrency_settings(self) -> Any:
        """CONCURRENT_REQUESTS caps the job's URLs in flight and CONCURRENT_REQUESTS_PER_DOMAIN its requests per host;
        the worker's own concurrency and per-host limit bound both."""
        service = self.worker(concurrency=10, job_concurrency=0, per_host_concurrency=4)
        self.site.hold = True
        urls = [self.url(n % 2, 10 + n // 2) for n in range(8)]  # two hosts, in turn
        yield self.run_job("capped", urls, "CONCURRENT_REQUESTS=3", "CONCURRENT_REQUESTS_PER_DOMAIN=2")
        yield self.site.arrival(3)
        self.site.release(1)
        yield self.site.arrival(4)
        self.assertEqual((len(self.site.held), self.site.most, self.site.most_per_host), (3, 3, 2))
        self.site.hold = False
        self.site.release()
        job = yield service.runner.when_done("capped")
        self.assertEqual((job.stats["pages"], self.site.most, self.site.most_per_host), (8, 3, 2))
        yield service.stopService()
        self.site.seen.clear()
        self.site.most = self.site.most_per_host = 0
        service = self.worker(concurrency=2, job_concurrency=0, per_host_concurrency=1)
        self.site.hold = True
        yield self.run_job("bounded", urls, "CONCURRENT_REQUESTS=100", "CONCURRENT_REQUESTS_PER_DOMAIN=100")
        yield self.site.arrival(2)
        self.site.hold = False
        self.site.release()
        job = yield service.runner.when_done("bounded")
        self.assertEqual((job.stats["pages"], self.site.most, self.site.most_per_host), (8, 2, 1))

    @defer.inlineCallbacks
    def test_download_delay(self) -> Any:
        """DOWNLOAD_DELAY spaces the job's request starts to a host, from each actual start; where the worker's
        own per-host delay is larger, that one applies."""
        clock = Clock()
        clock.advance(1000)
        slow_host = f"127.0.0.1:{self.ports[1]}"
        service = self.clocked(clock, host_overrides={slow_host: (8.0, 4)})
        yield self.run_job("delayed", [self.url(0, n) for n in (10, 11, 12)], "DOWNLOAD_DELAY=5")
        yield self.site.arrival(1)
        self.assertEqual((len(self.site.seen), [c.getTime() for c in clock.getDelayedCalls()]), (1, [1005.0]))
        clock.advance(5)
        yield self.site.arrival(2)
        self.assertEqual([c.getTime() for c in clock.getDelayedCalls()], [1010.0])
        clock.advance(5)
        yield self.site.arrival(3)
        yield service.runner.when_done("delayed")
        yield self.run_job("slower-host", [self.url(1, n) for n in (10, 11)], "DOWNLOAD_DELAY=5")
        yield self.site.arrival(4)
        start = clock.seconds()
        self.assertEqual([c.getTime() - start for c in clock.getDelayedCalls()], [8.0])  # the worker's, the larger
        clock.advance(5)  # this job's own delay is over: not yet
        self.assertEqual(len(self.site.seen), 4)
        clock.advance(3)
        yield self.site.arrival(5)
        job = yield service.runner.when_done("slower-host")
        self.assertEqual(job.stats["pages"], 2)

    @defer.inlineCallbacks
    def test_adaptive_delay(self) -> Any:
        """With [fetch] delay_factor, the pipeline holds a host's next request after each fetch by the rule (a
        loopback fetch takes milliseconds, so min_delay, 4 s from the fetch's end, applies); a host whose own rule
        is off is not held."""
        clock = Clock()
        clock.advance(1000)
        off_host = f"127.0.0.1:{self.ports[1]}"
        service = self.clocked(clock, per_host_concurrency=1, adaptive=AdaptiveDelay(3.0, 4.0, 10.0),
                               adaptive_overrides={off_host: AdaptiveDelay()})
        yield self.run_job("adaptive", [self.url(0, n) for n in (10, 11)])
        yield self.site.arrival(1)
        yield booked(clock)
        self.assertEqual((len(self.site.seen), [c.getTime() for c in clock.getDelayedCalls()]), (1, [1004.0]))
        clock.advance(3.99)
        self.assertEqual(len(self.site.seen), 1)
        clock.advance(0.01)
        yield self.site.arrival(2)
        job = yield service.runner.when_done("adaptive")
        self.assertEqual(job.stats["pages"], 2)
        yield self.run_job("not-held", [self.url(1, n) for n in (10, 11)])
        job = yield service.runner.when_done("not-held")
        self.assertEqual((job.stats["pages"], len(self.site.seen), clock.getDelayedCalls()), (2, 4, []))

    @defer.inlineCallbacks
    def test_user_agent_and_robots(self) -> Any:
        """USER_AGENT is sent with the job's requests and picks their robots.txt group; ROBOTSTXT_OBEY=False
        skips the check; a job that sets neither is as before."""
        service = self.worker()
        agent = "jobbot/1.0 (+https://example.org/bot)"
        urls = [self.url(0, n) for n in (1, 2, 3)]
        yield self.run_job("agent", urls, f"USER_AGENT={agent}")
        agent_job = yield service.runner.when_done("agent")
        self.assertEqual(sorted(self.site.seen), [(self.ports[0], "/item/1.html", agent),
                                                  (self.ports[0], "/item/3.html", agent)])
        self.site.seen.clear()
        yield self.run_job("unchecked", urls, "ROBOTSTXT_OBEY=False")
        unchecked = yield service.runner.when_done("unchecked")
        self.assertEqual(sorted(p for _, p, _ in self.site.seen), ["/item/1.html", "/item/2.html", "/item/3.html"])
        self.assertEqual({ua for _, _, ua in self.site.seen}, {UA})
        self.site.seen.clear()
        yield self.run_job("default", urls)
        default = yield service.runner.when_done("default")
        self.assertEqual(sorted(self.site.seen), [(self.ports[0], "/item/1.html", UA),
                                                  (self.ports[0], "/item/2.html", UA)])
        self.assertEqual([j.stats.get("status_robots", 0) for j in (agent_job, unchecked, default)], [1, 0, 1])
        _, body, _ = yield self.call("GET", "/logs/spiderd/demo-shop/agent.log")
        self.assertIn(f"started: 3 URLs; settings: USER_AGENT={agent!r}".encode(), body)

    @defer.inlineCallbacks
    def test_feeds_setting(self) -> Any:
        """Scrapy's FEEDS dict with one JSON-lines feed names the job's feed file; its options that a spiderd job
        does not use are listed as ignored; FEED_FORMAT jsonlines is taken."""
        service = self.worker()
        feeds = {f"file://{self.feeds}/%(batch)s_from_feeds.jl": {"format": "jsonlines", "encoding": "UTF-8",
                                                                   "fields": ["url"], "overwrite": True}}
        yield self.run_job("feeds", [self.url(0, 1)], "FEEDS=" + json.dumps(feeds), "FEED_FORMAT=jsonlines")
        yield service.runner.when_done("feeds")
        yield self.shipper.settled()
        with open(os.path.join(self.feeds, "feeds_from_feeds.jl"), encoding="utf-8") as f:
            self.assertEqual([json.loads(line)["url"] for line in f], [self.url(0, 1)])
        _, jobs, _ = yield self.call("GET", "/listjobs.json")
        self.assertEqual(jobs["finished"][0]["ignored_settings"], ["FEEDS:fields", "FEEDS:overwrite"])

    @defer.inlineCallbacks
    def test_bad_values_are_refused(self) -> Any:
        """Each honoured setting's value is checked as Scrapy reads it, and refused with a message naming it."""
        self.worker()
        feed = f"file://{self.feeds}/%(batch)s.jl"
        bools = "supported values for boolean settings are 0/1, True/False, '0'/'1', 'True'/'False' and 'true'/'false'"
        cases = [
            ("DOWNLOAD_DELAY=-1", "DOWNLOAD_DELAY is invalid: expected seconds from 0 to 300, got '-1'"),
            ("DOWNLOAD_DELAY=nan", "DOWNLOAD_DELAY is invalid: expected seconds from 0 to 300, got 'nan'"),
            ("DOWNLOAD_DELAY=301", "DOWNLOAD_DELAY is invalid"),
            ("DOWNLOAD_DELAY=fast", "DOWNLOAD_DELAY is invalid"),
            ("CONCURRENT_REQUESTS=0", "CONCURRENT_REQUESTS is invalid: expected a whole number from 1 to 100000, "
                                      "got '0'"),
            ("CONCURRENT_REQUESTS=1.5", "CONCURRENT_REQUESTS is invalid"),
            ("CONCURRENT_REQUESTS_PER_DOMAIN=-2", "CONCURRENT_REQUESTS_PER_DOMAIN is invalid"),
            ("USER_AGENT=", "USER_AGENT is invalid: expected one line of printable ASCII, 1 to 512 characters"),
            ("USER_AGENT=bot\r\nX-Injected: 1", "USER_AGENT is invalid"),
            ("USER_AGENT=" + "b" * 513, "USER_AGENT is invalid"),
            ("ROBOTSTXT_OBEY=no", f"ROBOTSTXT_OBEY is invalid: 'no': {bools}"),
            ("FEED_FORMAT=csv", "FEED_FORMAT is invalid: 'csv': a spiderd job writes JSON lines only (jsonlines)"),
            ("FEEDS={", "FEEDS is invalid: not JSON"),
            ("FEEDS=[]", 'FEEDS is invalid: expected a JSON object {"URI": {"format": "jsonlines"}}'),
            ("FEEDS=" + json.dumps({feed: {"format": "csv"}}),
             f"FEEDS is invalid: '{feed}' has format 'csv': a spiderd job writes JSON lines only (jsonlines)"),
            ("FEEDS=" + json.dumps({feed: {}}), f"FEEDS is invalid: '{feed}' has no format"),
            ("FEEDS=" + json.dumps({feed: "jsonlines"}), f"FEEDS is invalid: the options of '{feed}' are not"),
            ("FEEDS=" + json.dumps({feed: {"format": "jl", "encoding": "latin-1"}}),
             f"FEEDS is invalid: '{feed}' has encoding 'latin-1': a spiderd job writes UTF-8"),
            ("FEEDS=" + json.dumps({feed: {"format": "jsonlines"}, feed + "2": {"format": "jsonlines"}}),
             "FEEDS is invalid: 2 feeds; a spiderd job writes one, in JSON lines"),
            ("FEEDS=" + json.dumps({"ftp://u:" + SECRET + "@h/x.jl": {"format": "xml"}}),
             "FEEDS is invalid: 'ftp://u:***@h/x.jl' has format 'xml'"),
            ("FEEDS=" + json.dumps({"file:///etc/%(batch)s.jl": {"format": "jsonlines"}}),
             "FEED_URI is invalid: 'file:///etc/%(batch)s.jl' writes outside this worker's feed directories"),
        ]
        for setting, message in cases:
            _, answer, _ = yield self.call("POST", "/schedule.json", [
                ("project", "spiderd"), ("spider", "demo-shop"), ("setting", setting)])
            self.assertEqual(answer["status"], "error", setting)
            self.assertTrue(answer["message"].startswith(message), (setting, answer["message"]))
            self.assertNotIn(SECRET, answer["message"])
        _, answer, _ = yield self.call("POST", "/schedule.json", [
            ("project", "spiderd"), ("spider", "demo-shop"), ("setting", f"FEED_URI={feed}x"),
            ("setting", "FEEDS=" + json.dumps({feed: {"format": "jsonlines"}}))])
        self.assertEqual(answer["message"], "FEEDS is invalid: 2 feeds (with FEED_URI); a spiderd job writes one, "
                                            "in JSON lines")
        self.assertEqual(self.job_files(), {})
        for value in ("True", "False", "1", "0", "true", "false"):
            yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", f"ROBOTSTXT_OBEY={value}"),
                                ("setting", "DOWNLOAD_DELAY=0.1"), ("setting", "USER_AGENT=Mozilla/5.0 (X11) bot/1"),
                                ("setting", f"FEED_URI={feed}"),
                                ("setting", "FEEDS=" + json.dumps({feed: {"format": "jl"}})))

    @defer.inlineCallbacks
    def test_ignored_settings_are_listed_and_logged(self) -> Any:
        """Settings a spiderd job does not honour are in its listjobs.json entry and a warning line (the worker's
        log and the job's); ROBOTSTXT_OBEY is one of them on a worker that checks no robots.txt."""
        self.site.hold = True
        with capturedLogs() as events:
            service = self.worker(max_jobs=1)
            yield self.run_job("first", [self.url(0, 1)], "LOG_LEVEL=DEBUG", "DEPTH_LIMIT=3", "DOWNLOAD_DELAY=0")
            yield self.site.arrival(1)
            yield self.run_job("second", [], "RANDOMIZE_DOWNLOAD_DELAY=False")
            _, jobs, _ = yield self.call("GET", "/listjobs.json")
        self.assertEqual([j["ignored_settings"] for j in jobs["running"] + jobs["pending"]],
                         [["DEPTH_LIMIT", "LOG_LEVEL"], ["RANDOMIZE_DOWNLOAD_DELAY"]])
        warnings = [formatEvent(e) for e in events if e["log_level"] == LogLevel.warn and "ignored" in formatEvent(e)]
        self.assertEqual(len(warnings), 2)
        self.assertTrue(warnings[0].startswith("Worker: job first: settings ignored: DEPTH_LIMIT, LOG_LEVEL (a spiderd "
                                               "job honours DISTRIBUTED_START_URLS, FEED_URI, FEEDS,"), warnings[0])
        self.site.hold = False
        self.site.release()
        job = yield service.runner.when_done("second")
        _, body, _ = yield self.call("GET", "/logs/spiderd/demo-shop/first.log")
        self.assertIn(b"WARNING: " + warnings[0].encode(), body)
        _, jobs, _ = yield self.call("GET", "/listjobs.json")
        self.assertEqual({j["id"]: j["ignored_settings"] for j in jobs["finished"]},
                         {"first": ["DEPTH_LIMIT", "LOG_LEVEL"], "second": ["RANDOMIZE_DOWNLOAD_DELAY"]})
        self.assertEqual(job.ignored_settings, ["RANDOMIZE_DOWNLOAD_DELAY"])
        yield service.stopService()
        self.fetcher.robots = None  # [fetch] robots = false
        service = self.worker()
        yield self.run_job("no-robots", [], "ROBOTSTXT_OBEY=True")
        yield service.runner.when_done("no-robots")
        _, jobs, _ = yield self.call("GET", "/listjobs.json")
        self.assertEqual({j["id"]: j["ignored_settings"] for j in jobs["finished"]}["no-robots"], ["ROBOTSTXT_OBEY"])


@defer.inlineCallbacks
def booked(clock: Clock, within: float = 60.0) -> Any:
    """Fires once a timer is booked on ``clock`` (the worker answered a page over real loopback I/O, which the
    test cannot wait on otherwise): the real reactor turns meanwhile, for at most ``within`` seconds of real time
    (a bound on a loaded machine's I/O, not a timer of the test's), no timer of the test's is waited for."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if clock.getDelayedCalls():
            return
        yield task.deferLater(reactor, 0.001, lambda: None)
    raise AssertionError("no timer booked on the clock")
