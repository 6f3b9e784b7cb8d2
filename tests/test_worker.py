"""The worker role: Scrapyd 1.6's API on 127.0.0.1, persistent jobs, fetching the generated demo site, shipping feeds."""

from __future__ import annotations

import json
import lzma
import os
import shutil
import sqlite3
import stat
import tempfile
import threading
import time
from typing import Any
from urllib.parse import urlencode

import treq
from twisted.internet import defer, reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, UNIXClientEndpoint, connectProtocol
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock, deferLater
from twisted.logger import capturedLogs, formatEvent
from twisted.trial import unittest
from twisted.web.client import Agent, HTTPConnectionPool
from treq.client import HTTPClient

from spiderd.config import settings as cfg
from spiderd.core.blocking import Lane
from spiderd.core.net import forms, serving
from spiderd.core.net.listener import Listen
from spiderd.demo.config import DEMO
from spiderd.demo.pages import PRIVATE, SiteSpec, render
from spiderd.demo.site import listen, port_of
from spiderd.core.itemline import json_line
from spiderd.feed.shipper import FeedShipper
from spiderd.fetch.fetcher import FetchConfig, Fetcher
from spiderd.fetch.parsepool import ParseError, ParsePool
from spiderd.fetch.robots import Robots
from spiderd.store import open_store
from spiderd.core.urls import fingerprint, to_signed64
from spiderd.worker import WorkerConfig, WorkerService, worker_config
from spiderd.core.secrets import is_loopback
from spiderd.core.rules import AdaptiveDelay
from spiderd.worker import files
from spiderd.worker.files import ItemsFile
from spiderd.worker.jobs import Job, JobStore, safe_name, write_atomically
from spiderd.worker.pipeline import retryable

from spiderd.core.lifecycle import wait_until

from .helpers import ClockedReactor, rules_of

SECRET = "s3cr3t-Pw"
UA = "spiderd-test"


class Gate(Clock):
    """The demo site's timer for slow pages: holds them until opened, and says when they arrive."""

    def __init__(self) -> None:
        super().__init__()
        self.is_open = False
        self.arrived = 0
        self._waiters: list[tuple[int, Deferred[None]]] = []

    def callLater(self, delay: float, f: Any, *args: Any, **kw: Any) -> Any:  # type: ignore[override]
        self.arrived += 1
        ready = [d for n, d in self._waiters if n <= self.arrived]
        self._waiters = [(n, d) for n, d in self._waiters if n > self.arrived]
        for d in ready:
            reactor.callLater(0, d.callback, None)
        if self.is_open:
            return reactor.callLater(0, f, *args, **kw)
        return super().callLater(delay, f, *args, **kw)

    def arrival(self, count: int = 1) -> Deferred[None]:
        """Fires once ``count`` slow requests have reached the site in all."""
        d: Deferred[None] = Deferred()
        if self.arrived >= count:
            d.callback(None)
        else:
            self._waiters.append((count, d))
        return d

    def open(self) -> None:
        """Release the held pages, and let later ones through at once."""
        self.is_open = True
        self.advance(3600)


class Raw(Protocol):
    """A raw TCP client: collects what the server says until it closes."""

    def __init__(self) -> None:
        self.data = b""
        self.done: Deferred[bytes] = Deferred()

    def dataReceived(self, data: bytes) -> None:
        self.data += data

    def connectionLost(self, reason: Any = None) -> None:
        self.done.callback(self.data)


def assert_fires_after(case: unittest.SynchronousTestCase, clock: Clock, d: Deferred[Any], seconds: float) -> None:
    """``d`` has no result 0.1 s before ``clock`` has turned ``seconds`` more, and fires then."""
    clock.advance(seconds - 0.1)
    case.assertNoResult(d)
    clock.advance(0.1)
    case.successResultOf(d)


def site_rules(name: str, **keys: Any) -> list[dict[str, Any]]:
    return [dict(DEMO["sites"][0], name=name, **keys)]


class WorkerTestBase(unittest.TestCase):
    """A demo site (slow pages behind a gate), a fetcher, a SQLite store, a feed shipper and an API client."""

    timeout = 60

    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="spiderd-worker-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.data = os.path.join(self.tmp, "data")
        self.feeds = os.path.join(self.tmp, "feeds")
        self.spec = SiteSpec(lists=2, details=40, slow_delay=1.0)
        self.gate = Gate()
        port = listen(self.spec, reactor, clock=self.gate)
        self.addCleanup(port.stopListening)
        self.root = f"http://127.0.0.1:{port_of(port)}"
        self.fetcher = Fetcher(reactor, FetchConfig(user_agent=UA, timeout=20, connect_timeout=5))
        self.fetcher.robots = Robots(self.fetcher.fetch_raw, reactor, UA)
        self.addCleanup(self.fetcher.close)
        self.store = open_store("sqlite:///pages.sqlite3", self.data, reactor, batch_size=1)
        self.store.startService()
        self.addCleanup(self.store.stopService)
        self.shipper = FeedShipper(reactor, os.path.join(self.data, "spool"), stop_timeout=5.0)
        self.shipper.startService()
        self.addCleanup(self.shipper.stopService)
        pool = HTTPConnectionPool(reactor, persistent=True)
        self.addCleanup(pool.closeCachedConnections)
        self.http = HTTPClient(Agent(reactor, pool=pool))
        self._parsers: dict[str, ParsePool] = {}

    # -- helpers ------------------------------------------------------------------------------------------

    def parser(self, spider: str = "demo-shop", **site: Any) -> ParsePool:
        """The parser of a site named ``spider`` (the demo site's rules, with ``site``'s keys)."""
        if spider not in self._parsers:
            settings = cfg.from_dict({"parse": {"workers": 0}, "sites": site_rules(spider, **site)}, "<test>")
            parser = self._parsers[spider] = ParsePool(reactor, rules_of(settings.raw), 0)
            parser.startService()
            self.addCleanup(parser.stopService)
        return self._parsers[spider]

    def config(self, **overrides: Any) -> WorkerConfig:
        options: dict[str, Any] = dict(data_dir=self.data, listen=Listen("tcp:0:interface=127.0.0.1"),
                                       failure_threshold=1, retry_delay=0.0,
                                       job_concurrency=4, per_host_concurrency=4, stop_timeout=10.0,
                                       node_name="test-node", feed_dirs=(self.feeds,))
        options.update(overrides)
        return WorkerConfig(**options)

    def child_parser(self) -> Deferred[ParsePool]:
        """The demo site's parser with one child process, once the child is ready (the workers' parser)."""
        settings = cfg.from_dict({"parse": {"workers": 1}, "sites": site_rules("demo-shop")}, "<test>")
        parser = self._parsers["demo-shop"] = ParsePool(reactor, rules_of(settings.raw), 1)
        parser.startService()
        self.addCleanup(parser.stopService)
        return parser.ready().addCallback(lambda _: parser)

    def worker(self, spider: str = "demo-shop", site: dict[str, Any] | None = None, **overrides: Any) -> WorkerService:
        service = WorkerService(reactor, self.config(**overrides), self.fetcher, self.parser(spider, **(site or {})),
                                self.store, self.shipper)
        service.startService()
        self.addCleanup(lambda: service.stopService() if service.running else None)
        self.api = "http://%s:%d" % service.address
        return service

    @defer.inlineCallbacks
    def call(self, method: str, endpoint: str, data: Any = None, **kwargs: Any) -> Any:
        """(code, decoded JSON or raw bytes, response) of one API call."""
        response = yield self.http.request(method, self.api + endpoint, data=data, **kwargs)
        body = yield response.content()
        try:
            decoded = json.loads(body) if body else None
        except ValueError:
            decoded = body
        return response.code, decoded, response

    @defer.inlineCallbacks
    def schedule(self, *pairs: tuple[str, str], **kwargs: Any) -> Any:
        """Schedule a job of ``pairs`` (an empty URL list unless they give one); returns its id."""
        if not any(k == "setting" and v.startswith("DISTRIBUTED_START_URLS=") for k, v in pairs):
            pairs += (("setting", "DISTRIBUTED_START_URLS=[]"),)
        code, answer, _ = yield self.call("POST", "/schedule.json", list(pairs), **kwargs)
        self.assertEqual((code, answer["status"]), (200, "ok"), answer)
        return answer["jobid"]

    def urls(self, *paths: str) -> str:
        return "DISTRIBUTED_START_URLS=" + json.dumps([self.root + p for p in paths])

    def feed_setting(self) -> str:
        return f"FEED_URI=file://{self.feeds}/%(batch)s_%(name)s_%(time)s.jl"

    def feed_items(self, batch: str, spider: str = "demo-shop") -> list[dict[str, Any]]:
        names = [n for n in os.listdir(self.feeds) if n.startswith(f"{batch}_{spider}_")]
        self.assertEqual(len(names), 1, os.listdir(self.feeds))
        with open(os.path.join(self.feeds, names[0]), encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    def stored(self) -> list[str]:
        with sqlite3.connect(os.path.join(self.data, "pages.sqlite3")) as db:
            return sorted(row[0] for row in db.execute("SELECT url FROM crawler_html"))

    def job_files(self) -> dict[str, dict[str, Any]]:
        directory = os.path.join(self.data, "worker", "jobs")
        found = {}
        for name in os.listdir(directory):
            if name.endswith(".json"):  # a job's start URLs are in <id>.urls beside it
                with open(os.path.join(directory, name), encoding="utf-8") as f:
                    found[name[: -len(".json")]] = json.load(f)
        return found

    def slow(self) -> str:
        """A page the gate holds until opened."""
        return sorted(self.spec.expected().slow)[0]

    def good(self, start: int, count: int) -> list[str]:
        """``count`` well-behaved detail pages (200 at once), from the ``start``-th on."""
        expected = self.spec.expected()
        ok = sorted(expected.details_ok - expected.slow, key=lambda p: int(p.split("/")[-1].split(".")[0]))
        return ok[start:start + count]

    def ok_finals(self, paths: list[str]) -> set[str]:
        """The URLs of the good pages the paths end on (after redirects)."""
        expected = self.spec.expected()
        return {self.root + expected.final(p) for p in paths if expected.final(p) in expected.details_ok}


def items(n: int) -> list[str]:
    return [f"/item/{i}.html" for i in range(1, n + 1)]


class BatchTests(WorkerTestBase):
    """Batches as the seed's middleware sends them run to completion."""

    @defer.inlineCallbacks
    def test_seed_middleware_batch(self) -> Any:
        """The seed's POST: every URL fetched (5xx retried, robots obeyed), pages stored, one feed, one item per page."""
        self.gate.open()
        service = self.worker()
        paths = items(40) + [PRIVATE]
        data = [("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()), ("batch", "1")]
        data.append(("setting", self.urls(*paths)))
        response = yield treq.post(self.api + "/schedule.json", data=data, timeout=5, persistent=False)  # as the seed
        answer = yield response.json()
        self.assertEqual((response.code, answer["status"], answer["node_name"]), (200, "ok", "test-node"))
        job = yield service.runner.when_done(answer["jobid"])
        yield self.shipper.settled()
        expected, good = self.spec.expected(), self.ok_finals(paths)
        self.assertEqual(job.state, "finished")
        found = self.feed_items("1")
        self.assertEqual(sorted(i["url"] for i in found), sorted(good))
        for item in found:
            self.assertTrue(item["title"] and item["price"] and item["tags"])
            self.assertEqual((item["urlhash"], item["status"]), (to_signed64(fingerprint(item["url"])), 200))
            self.assertIsInstance(item["fetched_at"], float)
        self.assertEqual(self.stored(), sorted(good))
        stats = job.stats
        self.assertEqual(stats["status_404"], len(expected.not_found))
        self.assertEqual(stats["status_500"], 2 * len(expected.server_error))  # failure_threshold=1: two tries
        self.assertEqual(stats["status_robots"], 1)
        self.assertEqual(stats["status_200"], 40 - len(expected.not_found) - len(expected.server_error))
        self.assertEqual(stats["requests"], len(paths) + len(expected.server_error))
        self.assertEqual(stats["duplicates"], stats["status_200"] - len(good))
        self.assertEqual(os.listdir(self.shipper.incoming_dir), [])
        self.assertFalse([n for n in os.listdir(self.feeds) if not n.endswith(".jl")])

    @defer.inlineCallbacks
    def test_pages_compressed_by_parse_workers(self) -> Any:
        """With a parser child process, each page is compressed there and stored as the site served it."""
        self.gate.open()
        parser = yield self.child_parser()
        seen: list[tuple[Any, bool]] = []
        parse = parser.parse

        def spy(*args: Any, **kwargs: Any) -> Any:
            def record(extracted: Any) -> Any:
                seen.append((kwargs.get("compress"), extracted.compressed is not None))
                return extracted

            return parse(*args, **kwargs).addCallback(record)

        parser.parse = spy  # type: ignore[method-assign]
        service = self.worker()
        paths = self.good(0, 3)
        jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.urls(*paths)))
        yield service.runner.when_done(jobid)
        self.assertEqual(seen, [(self.store.preset, True)] * 3)
        with sqlite3.connect(os.path.join(self.data, "pages.sqlite3")) as db:
            rows = dict(db.execute("SELECT url, html_lzma FROM crawler_html"))
        self.assertEqual({u: lzma.decompress(b) for u, b in rows.items()},
                         {self.root + p: render(self.spec, p)[2] for p in paths})

    @defer.inlineCallbacks
    def test_item_lines_encoded_by_parse_workers(self) -> Any:
        """With a parser child process, each item's line is encoded there: the job's file gets the child's line, the
        worker encodes none, and the line is json_line's of the item, byte for byte."""
        self.gate.open()
        parser = yield self.child_parser()
        encoded: list[dict[str, Any]] = []
        self.patch(files, "json_line", lambda item: encoded.append(item) or json_line(item))
        service = self.worker()
        paths = self.good(0, 3)
        jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("batch", "9"),
                                    ("setting", self.feed_setting()), ("setting", self.urls(*paths)))
        yield service.runner.when_done(jobid)
        yield self.shipper.settled()
        self.assertEqual(encoded, [])
        [name] = [n for n in os.listdir(self.feeds) if n.startswith("9_demo-shop_")]
        with open(os.path.join(self.feeds, name), "rb") as f:
            lines = f.read().decode("utf-8").splitlines(keepends=True)
        self.assertEqual(len(lines), 3)
        self.assertEqual(lines, [json_line(json.loads(line)) for line in lines])

    @defer.inlineCallbacks
    def test_a_page_whose_parse_fails_is_fetched_again(self) -> Any:
        """A page whose parse fails is counted (``processing_errors``), logged, and fetched again: its retry makes
        the item (the job's claim on the page was undone), once."""
        self.gate.open()
        parser = self.parser()
        parse, failed = parser.parse, []

        def once(url: str, *args: Any, **kwargs: Any) -> Any:
            if not failed:
                failed.append(url)
                return defer.fail(ParseError("the parse child died"))
            return parse(url, *args, **kwargs)

        parser.parse = once  # type: ignore[method-assign]
        service = self.worker()
        paths = self.good(0, 2)
        jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("batch", "7"),
                                    ("setting", self.feed_setting()), ("setting", self.urls(*paths)))
        job = yield service.runner.when_done(jobid)
        yield self.shipper.settled()
        self.assertEqual(len(self.flushLoggedErrors(ParseError)), 1)
        self.assertEqual((job.state, job.stats["processing_errors"], job.stats["requests"], job.stats["items"]),
                         ("finished", 1, 3, 2))
        self.assertEqual(sorted(item["url"] for item in self.feed_items("7")), sorted(self.root + p for p in paths))
        self.assertIn(failed[0], [self.root + p for p in paths])

    @defer.inlineCallbacks
    def test_items_without_a_page_store(self) -> Any:
        """With no page store, each page's item is written at once; an item that cannot be written is logged
        (not lost without a word), and the job still settles."""
        self.gate.open()
        service = WorkerService(reactor, self.config(), self.fetcher, self.parser(), None, self.shipper)
        service.startService()
        self.addCleanup(lambda: service.stopService() if service.running else None)
        self.api = "http://%s:%d" % service.address
        write, refused = ItemsFile.write, []

        def write_once(items: ItemsFile, item: dict[str, Any], line: str | None = None) -> None:
            if not refused:
                refused.append(item["url"])
                raise OSError("no room for the line")
            write(items, item, line)

        self.patch(ItemsFile, "write", write_once)
        paths = self.good(0, 3)
        jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("batch", "8"),
                                    ("setting", self.feed_setting()), ("setting", self.urls(*paths)))
        job = yield service.runner.when_done(jobid)
        yield self.shipper.settled()
        self.assertEqual(len(self.flushLoggedErrors(OSError)), 1)
        self.assertEqual((job.state, job.stats["pages"], job.stats["items"]), ("finished", 3, 2))
        self.assertEqual(sorted(item["url"] for item in self.feed_items("8")),
                         sorted(self.root + p for p in paths if self.root + p not in refused))

    @defer.inlineCallbacks
    def test_listjobs_after_a_job(self) -> Any:
        """A finished job shows in listjobs.json, status.json and daemonstatus.json with Scrapyd 1.6's fields."""
        self.gate.open()
        service = self.worker()
        jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("jobid", "job-1"),
                                    ("setting", self.urls(*self.good(0, 1))))
        self.assertEqual(jobid, "job-1")
        yield service.runner.when_done(jobid)
        code, answer, response = yield self.call("GET", "/listjobs.json")
        self.assertEqual(code, 200)
        self.assertEqual(response.headers.getRawHeaders("content-type"), ["application/json"])
        self.assertEqual((answer["status"], answer["node_name"], answer["pending"], answer["running"]),
                         ("ok", "test-node", [], []))
        [finished] = answer["finished"]
        self.assertEqual(set(finished), {"id", "project", "spider", "start_time", "end_time", "log_url", "items_url",
                                         "ignored_settings"})
        self.assertEqual((finished["id"], finished["project"], finished["spider"]), ("job-1", "spiderd", "demo-shop"))
        self.assertLessEqual(finished["start_time"], finished["end_time"])
        _, answer, _ = yield self.call("GET", "/status.json?job=job-1")
        self.assertEqual(answer, {"currstate": "finished", "status": "ok", "node_name": "test-node"})
        _, answer, _ = yield self.call("GET", "/daemonstatus.json")
        self.assertEqual(answer, {"pending": 0, "running": 0, "finished": 1, "status": "ok", "node_name": "test-node"})
        yield self.shipper.settled()
        default_feeds = os.path.join(self.data, "feeds")
        self.assertEqual([n.split("_")[:2] for n in os.listdir(default_feeds)], [["job-1", "demo-shop"]])


class ScrapydCompatibilityTests(WorkerTestBase):
    """Scrapyd's documented curl examples, answered as Scrapyd 1.6 answers them."""

    @defer.inlineCallbacks
    def test_documented_curl_examples(self) -> Any:
        """schedule (plain, with a setting and an argument), listjobs, cancel and daemonstatus."""
        service = self.worker("somespider", {"start_urls": [self.root + self.good(0, 1)[0]]}, project="myproject",
                              max_jobs=1, concurrency=1)  # start URLs of its own: a job sent none fetches them
        # curl http://localhost:6800/schedule.json -d project=myproject -d spider=somespider
        code, plain, _ = yield self.call("POST", "/schedule.json", {"project": "myproject", "spider": "somespider"})
        self.assertEqual((code, plain["status"], plain["node_name"]), (200, "ok", "test-node"))
        self.assertEqual(len(plain["jobid"]), 32)
        # ... -d setting=DOWNLOAD_DELAY=2 -d arg1=val1 (a setting a spiderd job honours), and one it ignores
        with capturedLogs() as events:
            body = "project=myproject&spider=somespider&setting=DOWNLOAD_DELAY=2&arg1=val1&setting=LOG_LEVEL=INFO"
            code, other, _ = yield self.call("POST", "/schedule.json", body.encode(),
                                             headers={"Content-Type": "application/x-www-form-urlencoded"})
        self.assertEqual((code, other["status"]), (200, "ok"))
        [warning] = [formatEvent(e) for e in events if "ignored" in formatEvent(e)]
        self.assertIn(": settings ignored: LOG_LEVEL (a spiderd job honours DISTRIBUTED_START_URLS", warning)
        # both have no URLs and end at once (once their empty feeds are shipped); a job held on a slow page keeps
        # the next one pending
        yield defer.gatherResults([service.runner.when_done(plain["jobid"]), service.runner.when_done(other["jobid"])])
        held = yield self.schedule(("project", "myproject"), ("spider", "somespider"),
                                   ("setting", self.urls(self.slow())))
        yield self.gate.arrival(1)
        queued = yield self.schedule(("project", "myproject"), ("spider", "somespider"), ("setting", "DOWNLOAD_DELAY=2"),
                                     ("arg1", "val1"), ("priority", "1.5"))
        code, jobs, _ = yield self.call("GET", "/listjobs.json?project=myproject")
        self.assertEqual(code, 200)
        self.assertEqual(jobs["pending"], [{"id": queued, "project": "myproject", "spider": "somespider",
                                            "version": None, "settings": {"DOWNLOAD_DELAY": "2"},
                                            "args": {"arg1": "val1"}, "ignored_settings": []}])
        [running] = jobs["running"]
        self.assertEqual(set(running), {"id", "project", "spider", "pid", "start_time", "log_url", "items_url",
                                        "ignored_settings"})
        self.assertEqual((running["id"], running["pid"]), (held, os.getpid()))
        self.assertEqual({j["id"] for j in jobs["finished"]}, {plain["jobid"], other["jobid"]})
        _, status, _ = yield self.call("GET", "/daemonstatus.json")
        self.assertEqual((status["pending"], status["running"], status["finished"]), (1, 1, 2))
        # curl http://localhost:6800/cancel.json -d project=myproject -d job=...
        _, answer, _ = yield self.call("POST", "/cancel.json", {"project": "myproject", "job": queued})
        self.assertEqual(answer, {"prevstate": "pending", "status": "ok", "node_name": "test-node"})
        _, answer, _ = yield self.call("POST", "/cancel.json", {"project": "myproject", "job": held})
        self.assertEqual(answer["prevstate"], "running")
        _, answer, _ = yield self.call("POST", "/cancel.json", {"project": "myproject", "job": held})
        self.assertEqual(answer["prevstate"], None)
        job = yield service.runner.when_done(held)
        self.assertEqual(job.state, "cancelled")
        _, jobs, _ = yield self.call("GET", "/listjobs.json")
        self.assertEqual(jobs["pending"], [])
        self.assertIn(held, [j["id"] for j in jobs["finished"]])  # Scrapyd lists a killed job as finished
        self.assertNotIn(queued, [j["id"] for j in jobs["finished"]])  # and drops a cancelled pending one

    @defer.inlineCallbacks
    def test_project_endpoints(self) -> Any:
        """listprojects, listversions, listspiders, status and OPTIONS."""
        self.worker()
        _, answer, _ = yield self.call("GET", "/listprojects.json")
        self.assertEqual(answer, {"projects": ["spiderd"], "status": "ok", "node_name": "test-node"})
        _, answer, _ = yield self.call("GET", "/listspiders.json?project=spiderd")
        self.assertEqual(answer, {"spiders": ["demo-shop"], "status": "ok", "node_name": "test-node"})
        _, answer, _ = yield self.call("GET", "/listversions.json?project=spiderd")
        [version] = answer["versions"]
        _, answer, _ = yield self.call("GET", "/listspiders.json?" + urlencode({"project": "spiderd",
                                                                                "_version": version}))
        self.assertEqual(answer["spiders"], ["demo-shop"])
        _, answer, _ = yield self.call("GET", "/listversions.json?project=other")
        self.assertEqual(answer["versions"], [])
        _, answer, _ = yield self.call("GET", "/status.json?job=nope")
        self.assertEqual(answer["currstate"], None)
        code, body, response = yield self.call("OPTIONS", "/schedule.json")
        self.assertEqual((code, body), (204, None))
        self.assertEqual(response.headers.getRawHeaders("allow"), ["OPTIONS, HEAD, POST"])
        code, body, _ = yield self.call("HEAD", "/daemonstatus.json")
        self.assertEqual((code, body), (200, None))


class ErrorTests(WorkerTestBase):
    """Every refusal is a clear JSON error with the code Scrapyd 1.6 uses, and persists nothing."""

    def threads_of(self, name: str) -> tuple[list[str], list[bool]]:
        """The names of the threads each step of ``serving.<name>`` (a decode) runs on, from now on, and at each
        step whether the reactor has turned since its decode began (patched for the test)."""
        threads: list[str] = []
        turned: list[bool] = []
        real = getattr(serving, name)

        def spy(*args: Any) -> Any:
            began: list[bool] = []
            reactor.callLater(0, began.append, True)  # runs at the reactor's next turn
            for step in real(*args):
                threads.append(threading.current_thread().name)
                turned.append(bool(began))
                yield step

        self.patch(serving, name, spy)
        return threads, turned

    @defer.inlineCallbacks
    def test_a_big_form_is_decoded_in_steps(self) -> Any:
        """A schedule.json form of FORM_IN_STEPS bytes or more is decoded a step per turn of the reactor (on its
        thread: a decode on another thread holds the GIL, and the reactor waits), not in one call, and is
        accepted as a small one is (its job holds every start URL)."""
        threads, turned = self.threads_of("decode_form")
        service = self.worker(max_body_size=16 * serving.FORM_IN_STEPS)
        paths = [f"/item/{i}.html?pad={'x' * 40}" for i in range(4 * serving.FORM_IN_STEPS // 50)]
        jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                    ("setting", self.urls(*paths)))
        self.assertGreaterEqual(len(threads), 4 * serving.FORM_IN_STEPS // forms.STEP)
        self.assertEqual(set(threads), {threading.main_thread().name})
        self.assertTrue(turned[-1])  # over turns of the reactor, not in one call
        job = service.runner.jobs[jobid]
        self.assertEqual(service.job_store.load_urls(job), [self.root + p for p in paths])
        yield service.runner.cancel(jobid)

    @defer.inlineCallbacks
    def test_a_big_multipart_body_is_decoded_in_steps(self) -> Any:
        """A multipart/form-data schedule.json of FORM_IN_STEPS bytes or more is decoded a step per turn of the
        reactor too, on its thread, and is accepted as an urlencoded one is (its job holds every start URL)."""
        threads, turned = self.threads_of("decode_multipart")
        service = self.worker(max_body_size=16 * serving.FORM_IN_STEPS)
        paths = [f"/item/{i}.html?pad={'x' * 40}" for i in range(4 * serving.FORM_IN_STEPS // 50)]
        fields = (("project", "spiderd"), ("spider", "demo-shop"), ("jobid", "big-multi"),
                  ("setting", self.feed_setting()), ("setting", self.urls(*paths)))
        form = "".join(f'--xyz\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields)
        headers = {"Content-Type": "multipart/form-data; boundary=xyz"}
        code, answer, _ = yield self.call("POST", "/schedule.json", (form + "--xyz--\r\n").encode(), headers=headers)
        self.assertEqual((code, answer["status"], answer["jobid"]), (200, "ok", "big-multi"))
        self.assertGreaterEqual(len(threads), 4 * serving.FORM_IN_STEPS // forms.STEP)
        self.assertEqual(set(threads), {threading.main_thread().name})
        self.assertTrue(turned[-1])  # over turns of the reactor, not in one call
        job = service.runner.jobs["big-multi"]
        self.assertEqual(service.job_store.load_urls(job), [self.root + p for p in paths])
        yield service.runner.cancel("big-multi")

    @defer.inlineCallbacks
    def test_a_start_url_list_over_the_cap_is_refused_by_its_length(self) -> Any:
        """A DISTRIBUTED_START_URLS list longer than max_job_urls is refused for its length before its items are
        looked at (a hostile list of millions is not scanned on the reactor thread)."""
        self.worker(max_job_urls=2)
        code, answer, _ = yield self.call("POST", "/schedule.json", [("project", "spiderd"), ("spider", "demo-shop"),
                                                                     ("setting", "DISTRIBUTED_START_URLS=[1, 2, 3]")])
        self.assertEqual((code, answer["status"]), (200, "error"))
        self.assertIn("3 URLs, at most 2 in one job (worker.max_job_urls)", answer["message"])

    @defer.inlineCallbacks
    def test_errors(self) -> Any:
        """Missing or unknown parameters, bad values, wrong methods: HTTP 200, status error, node_name."""
        self.worker()
        base = [("project", "spiderd"), ("spider", "demo-shop")]
        cases: list[tuple[str, str, Any, str]] = [
            ("POST", "/schedule.json", [], "'project' parameter is required"),
            ("POST", "/schedule.json", [("project", "spiderd")], "'spider' parameter is required"),
            ("POST", "/schedule.json", [("project", "nope"), ("spider", "demo-shop")], "project 'nope' not found"),
            ("POST", "/schedule.json", [("project", "spiderd"), ("spider", "nope")], "spider 'nope' not found"),
            ("POST", "/schedule.json", [("project", "spiderd"), ("spider", "../x/demo-shop")],
             "spider '../x/demo-shop' not found"),
            ("POST", "/schedule.json", base + [("_version", "v9")], "version 'v9' not found"),
            ("POST", "/schedule.json", base + [("priority", "high")],
             "priority is invalid: could not convert string to float: 'high'"),
            ("POST", "/schedule.json", base + [("setting", "NOEQUALS")], "setting is invalid: 'NOEQUALS' is not NAME=VALUE"),
            ("POST", "/schedule.json", base + [("setting", "DISTRIBUTED_START_URLS=[\"http://x/\"")],
             "DISTRIBUTED_START_URLS is invalid: not JSON"),
            ("POST", "/schedule.json", base + [("setting", "DISTRIBUTED_START_URLS={\"a\": 1}")],
             "DISTRIBUTED_START_URLS is invalid: expected a JSON list of URL strings"),
            ("POST", "/schedule.json", base + [("setting", "DISTRIBUTED_START_URLS=[\"http://elsewhere.invalid/\"]")],
             "DISTRIBUTED_START_URLS is invalid: 'http://elsewhere.invalid/' is not a URL of spider 'demo-shop'"),
            ("POST", "/schedule.json", base + [("setting", "DISTRIBUTED_START_URLS=[\"mailto:a@b\"]")],
             "DISTRIBUTED_START_URLS is invalid: 'mailto:a@b'"),
            ("POST", "/schedule.json", base + [("jobid", "../../x")], "jobid is invalid: '../../x' is not a plain name"),
            ("POST", "/schedule.json", base + [("jobid", "a/b")], "jobid is invalid"),
            ("POST", "/schedule.json", base + [("batch", "../../x")], "batch is invalid: "),
            ("POST", "/schedule.json", base + [("setting", "FEED_URI=http://x/%(batch)s.jl")], "FEED_URI is invalid"),
            ("POST", "/schedule.json", base + [("setting", "FEED_URI=file:///tmp/%(nope)s.jl")],
             "FEED_URI is invalid: feed URI 'file:///tmp/%(nope)s.jl' needs the parameter 'nope'"),
            ("POST", "/schedule.json", base + [("setting", "FEED_URI=file:///tmp/../etc/%(batch)s.jl")],
             "FEED_URI is invalid"),
            ("POST", "/schedule.json", base + [("setting", "FEED_URI=file:///tmp/%(arg1)s.jl"), ("arg1", "../x")],
             "FEED_URI is invalid"),
            ("POST", "/schedule.json", base + [("setting", f"FEED_URI=file://{self.feeds}/%(batch)200000000s.jl")],
             f"FEED_URI is invalid: feed URI 'file://{self.feeds}/%(batch)200000000s.jl': only %(key)s parameters"),
            ("POST", "/schedule.json", base + [("setting", f"FEED_URI=file://{self.feeds}/%(batch)s.jl"),
                                               ("batch", "b" * 300)],
             "FEED_URI is invalid: feed URI"),
            ("POST", "/schedule.json", base + [("setting", "FEED_URI=file:///etc/cron.d/%(batch)s")],
             "FEED_URI is invalid: 'file:///etc/cron.d/%(batch)s' writes outside this worker's feed directories"),
            ("POST", "/schedule.json", base + [("setting", f"FEED_URI=file://{self.feeds}-evil/%(batch)s.jl")],
             f"FEED_URI is invalid: 'file://{self.feeds}-evil/%(batch)s.jl' writes outside"),
            ("POST", "/schedule.json", [("project", b"\xff"), ("spider", "demo-shop")],
             "project is invalid: 'utf-8' codec can't decode byte 0xff"),
            ("GET", "/schedule.json", None, "UnsupportedMethod: Expected one of [b'HEAD', b'OPTIONS', b'POST']"),
            ("GET", "/cancel.json?project=spiderd&job=x", None, "UnsupportedMethod: Expected one of"),
            ("POST", "/listjobs.json", [], "UnsupportedMethod: Expected one of [b'HEAD', b'OPTIONS', b'GET']"),
            ("POST", "/cancel.json", [("project", "spiderd")], "'job' parameter is required"),
            ("POST", "/cancel.json", [("project", "nope"), ("job", "x")], "project 'nope' not found"),
            ("GET", "/listjobs.json?project=nope", None, "project 'nope' not found"),
            ("GET", "/listspiders.json", None, "'project' parameter is required"),
            ("GET", "/listspiders.json?project=nope", None, "project 'nope' not found"),
            ("GET", "/status.json", None, "'job' parameter is required"),
        ]
        for method, endpoint, data, message in cases:
            code, answer, response = yield self.call(method, endpoint, data)
            where = f"{method} {endpoint} {data!r}: {answer!r}"
            self.assertEqual(code, 200, where)
            self.assertEqual((answer["status"], answer["node_name"]), ("error", "test-node"), where)
            self.assertTrue(answer["message"].startswith(message), where)
            self.assertEqual(response.headers.getRawHeaders("content-type"), ["application/json"])
        code, answer, _ = yield self.call("GET", "/nope.json")
        self.assertEqual((code, answer["status"]), (404, "error"))
        self.assertEqual(self.job_files(), {})

    @defer.inlineCallbacks
    def test_multipart_bodies(self) -> Any:
        """curl -F style bodies are read; a malformed one gets 400 (as from Twisted) with a JSON error."""
        self.worker()
        boundary = "xyz"
        form = "".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'
                       for k, v in (("project", "spiderd"), ("spider", "demo-shop"), ("jobid", "multi"),
                                    ("setting", "DISTRIBUTED_START_URLS=[]")))
        headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
        code, answer, _ = yield self.call("POST", "/schedule.json", (form + f"--{boundary}--\r\n").encode(),
                                          headers=headers)
        self.assertEqual((code, answer["status"], answer["jobid"]), (200, "ok", "multi"))
        code, answer, _ = yield self.call("POST", "/schedule.json", b"garbage", headers=headers)
        self.assertEqual((code, answer["status"], answer["node_name"]), (400, "error", "test-node"))
        self.assertIn("multipart", answer["message"])

    @defer.inlineCallbacks
    def test_duplicate_job_id(self) -> Any:
        """A job id that is pending or running cannot be scheduled again."""
        self.worker(max_jobs=1)
        yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("jobid", "same"),
                            ("setting", self.urls(self.slow())))
        code, answer, _ = yield self.call("POST", "/schedule.json", [("project", "spiderd"), ("spider", "demo-shop"),
                                                                    ("jobid", "same"), ("setting", self.urls())])
        self.assertEqual((code, answer["status"], answer["message"]),
                         (200, "error", "job 'same' already exists (pending or running)"))
        self.gate.open()

    @defer.inlineCallbacks
    def test_huge_bodies(self) -> Any:
        """Bodies over the cap get 413 and a JSON error: declared too big (not read), sent too big, chunked too big."""
        cap = 64 * 1024
        yield self.worker(max_body_size=cap).ready  # its jobs directory made, on its lane
        code, answer, _ = yield self.call("POST", "/schedule.json",
                                          [("project", "spiderd"), ("spider", "demo-shop"), ("x", "a" * (cap + 100))])
        self.assertEqual((code, answer["status"], answer["node_name"]), (413, "error", "test-node"))
        self.assertIn(str(cap), answer["message"])
        host, port = self.api[len("http://"):].split(":")
        head = b"POST /schedule.json HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        declared = yield self.raw(host, int(port), head + b"Content-Length: 1000000000000\r\n\r\nproject=spiderd")
        chunked = yield self.raw(host, int(port), head + b"Transfer-Encoding: chunked\r\n\r\n"
                                 + b"%x\r\n" % (cap + 1) + b"a" * (cap + 1))
        for said in (declared, chunked):
            self.assertTrue(said.startswith(b"HTTP/1.1 413 "), said[:200])
            self.assertEqual(json.loads(said.partition(b"\r\n\r\n")[2])["status"], "error")
        self.assertEqual(self.job_files(), {})

    @defer.inlineCallbacks
    def raw(self, host: str, port: int, request: bytes) -> Any:
        protocol = yield connectProtocol(TCP4ClientEndpoint(reactor, host, port), Raw())
        protocol.transport.write(request)
        said = yield protocol.done
        return said


class SecurityTests(WorkerTestBase):
    """Credentials, secrets and paths."""

    @defer.inlineCallbacks
    def test_basic_auth(self) -> Any:
        """Missing or wrong credentials: 401 with Scrapyd's body, "Unauthorized", and a challenge; right ones:
        answered."""
        with capturedLogs() as events:
            self.worker(username="scrapy", password=SECRET)
            code, answer, response = yield self.call("GET", "/daemonstatus.json")
            self.assertEqual((code, answer), (401, b"Unauthorized"))
            self.assertEqual(response.headers.getRawHeaders("www-authenticate"), ['Basic realm="spiderd"'])
            code, answer, _ = yield self.call("POST", "/schedule.json", {"project": "spiderd", "spider": "demo-shop"},
                                              auth=("scrapy", "wrong-" + SECRET))
            self.assertEqual(code, 401)
            code, answer, _ = yield self.call("GET", "/daemonstatus.json", auth=("scrapy", SECRET))
            self.assertEqual((code, answer["status"]), (200, "ok"))
        self.assertNoSecret(events)
        self.assertEqual(self.job_files(), {})

    @defer.inlineCallbacks
    def test_secrets_never_shown(self) -> Any:
        """Passwords in FEED_URI or in arguments are *** in listjobs.json and never in the logs or error messages."""
        with capturedLogs() as events:
            self.worker(max_jobs=1, concurrency=1)
            yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"),
                                ("setting", self.urls(self.slow())))
            yield self.gate.arrival(1)
            feed = f"FEED_URI=ftp://bob:{SECRET}@127.0.0.1:1/feeds/%(batch)s_%(name)s_%(time)s.jl"
            jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", feed),
                                        ("token", f"see ftp://eve:{SECRET}@h/x"))
            _, jobs, _ = yield self.call("GET", "/listjobs.json")
            [pending] = jobs["pending"]
            self.assertEqual(pending["settings"]["FEED_URI"],
                             "ftp://bob:***@127.0.0.1:1/feeds/%(batch)s_%(name)s_%(time)s.jl")
            self.assertEqual(pending["args"], {"token": "see ftp://eve:***@h/x"})
            _, answer, _ = yield self.call("POST", "/schedule.json", [("project", "spiderd"), ("spider", "demo-shop"),
                                                                      ("setting", f"ftp://u:{SECRET}@h/")])
            self.assertEqual(answer["status"], "error")
            _, answer, _ = yield self.call("POST", "/cancel.json", {"project": "spiderd", "job": jobid})
            self.assertEqual(answer["prevstate"], "pending")
            self.gate.open()
        self.assertNotIn(SECRET, json.dumps(jobs) + json.dumps(answer))
        self.assertNoSecret(events)
        path = os.path.join(self.data, "worker", "jobs", jobid + ".json")
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)

    @defer.inlineCallbacks
    def test_browser_guard(self) -> Any:
        """As the node's API: no CORS headers, a POST from another web origin and (without credentials) a Host
        that is not loopback are refused with 403, and nothing is scheduled."""
        service = self.worker()
        schedule = [("project", "spiderd"), ("spider", "demo-shop")]
        code, answer, response = yield self.call("POST", "/schedule.json", schedule,
                                                 headers={"Origin": "http://evil.example"})
        self.assertEqual((code, answer["status"]), (403, "error"))
        self.assertIn("cross-origin", answer["message"])
        self.assertIsNone(response.headers.getRawHeaders("access-control-allow-origin"))
        code, answer, _ = yield self.call("GET", "/daemonstatus.json", headers={"Host": "evil.example:6800"})
        self.assertEqual(code, 403)
        self.assertIn("loopback host name", answer["message"])
        code, answer, response = yield self.call("GET", "/daemonstatus.json")
        self.assertEqual((code, answer["status"]), (200, "ok"))
        self.assertIsNone(response.headers.getRawHeaders("access-control-allow-origin"))
        self.assertEqual(service.runner.jobs, {})

    @defer.inlineCallbacks
    def test_odd_passwords_masked_in_listjobs(self) -> Any:
        """A FEED_URI password with a space, quotes, a backslash or < is *** in listjobs.json too."""
        self.worker(max_jobs=1)
        yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.urls(self.slow())))
        yield self.gate.arrival(1)
        for secret in ("pa ssLEAK2", "it'sLEAK", 'q"LEAK', "back\\LEAK", "<LEAK>"):
            feed = f"FEED_URI=ftp://feeduser:{secret}@127.0.0.1:2121/in/%(batch)s.jl"
            yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", feed))
        _, jobs, _ = yield self.call("GET", "/listjobs.json")
        self.assertEqual({j["settings"]["FEED_URI"] for j in jobs["pending"]},
                         {"ftp://feeduser:***@127.0.0.1:2121/in/%(batch)s.jl"})
        self.assertNotIn("LEAK", json.dumps(jobs))
        self.gate.open()

    def assertNoSecret(self, events: Any) -> None:
        self.assertTrue(events)
        for event in events:
            text = formatEvent(event) + repr({k: v for k, v in event.items() if not k.startswith("log_")})
            if "log_failure" in event:
                text += event["log_failure"].getTraceback()
            self.assertNotIn(SECRET, text)

    @defer.inlineCallbacks
    def test_path_traversal(self) -> Any:
        """Job ids, batches and spider names that would leave their directories are refused; nothing is written."""
        self.worker()
        base = [("project", "spiderd"), ("spider", "demo-shop")]
        for extra in ([("batch", "../../x")], [("batch", "a/b")], [("batch", "..")], [("jobid", "../jobs/x")],
                      [("jobid", "/etc/passwd")], [("jobid", ".hidden")], [("jobid", "x\x00y")]):
            _, answer, _ = yield self.call("POST", "/schedule.json", base + extra)
            self.assertEqual(answer["status"], "error", extra)
        _, answer, _ = yield self.call("POST", "/schedule.json", [("project", "spiderd"), ("spider", "demo-shop/..")])
        self.assertEqual(answer["message"], "spider 'demo-shop/..' not found")
        self.assertEqual(self.job_files(), {})
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "x")))

    @defer.inlineCallbacks
    def test_symlink_out_of_the_feed_directories(self) -> Any:
        """A file:// FEED_URI through a symbolic link in a feed directory that points outside is refused."""
        outside = os.path.join(self.tmp, "outside")
        os.makedirs(outside)
        os.makedirs(self.feeds)
        os.symlink(outside, os.path.join(self.feeds, "link2"))
        self.worker()
        feed = f"FEED_URI=file://{self.feeds}/link2/escaped.jl"
        _, answer, _ = yield self.call("POST", "/schedule.json", [("project", "spiderd"), ("spider", "demo-shop"),
                                                                  ("setting", feed)])
        self.assertEqual(answer["status"], "error")
        self.assertIn("outside this worker's feed directories", answer["message"])
        self.assertEqual((self.job_files(), os.listdir(outside)), ({}, []))

    def test_upload_never_writes_through_a_planted_link(self) -> None:
        """A symbolic link planted at the temporary name of a local feed delivery is replaced, not followed."""
        from spiderd.core.feeduri import parse_target
        from spiderd.feed.upload import upload

        outside = os.path.join(self.tmp, "victim.txt")
        with open(outside, "w") as f:
            f.write("keep me\n")
        local = os.path.join(self.tmp, "items.jl")
        with open(local, "w") as f:
            f.write('{"a": 1}\n')
        target = parse_target(f"file://{self.feeds}/out.jl")
        os.makedirs(self.feeds)
        os.symlink(outside, os.path.join(self.feeds, target.temp_name))
        upload(local, target)
        with open(outside) as f:
            self.assertEqual(f.read(), "keep me\n")
        with open(os.path.join(self.feeds, "out.jl")) as f:
            self.assertEqual(f.read(), '{"a": 1}\n')

    @defer.inlineCallbacks
    def test_arguments_never_become_settings(self) -> Any:
        """Parameters named like settings are spider arguments: they change neither the feed nor the URLs."""
        service = self.worker()
        jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"),
                                    ("FEED_URI", f"file://{self.tmp}/evil/%(batch)s.jl"),
                                    ("DISTRIBUTED_START_URLS", json.dumps([self.root + "/item/1.html"])),
                                    ("settings", "FEED_URI=x"), ("_job", "other"))
        job = yield service.runner.when_done(jobid)
        self.assertEqual(job.settings, {})
        self.assertEqual(set(job.args), {"FEED_URI", "DISTRIBUTED_START_URLS", "settings", "_job"})
        self.assertEqual((job.id, job.url_count, job.stats.get("requests", 0)), (jobid, 0, 0))
        self.assertTrue(job.feed_uri.startswith(f"file://{self.data}/feeds/"))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "evil")))

    def test_non_loopback_needs_credentials(self) -> None:
        """Binding anything but loopback without credentials refuses to start (at load), with a clear error."""
        for bind in ("0.0.0.0", "", "192.0.2.1", "::"):
            with self.assertRaises(cfg.ConfigError) as raised:
                cfg.from_dict({"worker": {"bind": bind}})
            self.assertIn("worker.bind", str(raised.exception))
            self.assertIn("worker.username and worker.password", str(raised.exception))
        cfg.from_dict({"worker": {"bind": "0.0.0.0", "username": "u", "password": "p"}})
        for bad in (dict(username="u"), dict(password="p"), dict(username="a:b", password="p"), dict(max_jobs=0),
                    dict(feed_template="http://x/%(batch)s.jl"), dict(port=70000)):
            self.assertRaises(cfg.ConfigError, cfg.from_dict, {"worker": bad})


class ListeningTests(WorkerTestBase):
    """The Scrapyd API on a UNIX socket, and its deadlines as settings."""

    @defer.inlineCallbacks
    def test_answers_on_a_unix_socket(self) -> Any:
        """A worker listening on ``unix:PATH`` answers Scrapyd's daemonstatus.json there."""
        path = os.path.join(self.tmp, "worker.sock")
        service = WorkerService(reactor, self.config(listen=Listen(f"unix:{path}")), self.fetcher, self.parser(),
                                self.store, self.shipper)
        service.startService()
        self.addCleanup(service.stopService)
        yield service.ready
        client = Raw()
        yield connectProtocol(UNIXClientEndpoint(reactor, path), client)
        client.transport.write(b"GET /daemonstatus.json HTTP/1.0\r\nHost: localhost\r\n\r\n")
        answer = yield client.done
        self.assertEqual(json.loads(answer.partition(b"\r\n\r\n")[2])["status"], "ok")

    @defer.inlineCallbacks
    def test_header_deadline_is_the_setting(self) -> Any:
        """The worker's API closes a connection whose request headers are not complete after
        ``worker.header_timeout`` seconds (on its clock), not before."""
        clock = Clock()
        settings = cfg.from_dict({"worker": {"port": 0, "header_timeout": 5, "idle_timeout": 7}})
        config = worker_config(settings.worker, settings.fetch, data_dir=self.data, feed_format="jsonl")
        self.assertEqual((config.listen.header_timeout, config.listen.idle_timeout), (5.0, 7.0))
        service = WorkerService(ClockedReactor(reactor, clock), config, self.fetcher, self.parser(), self.store,
                                self.shipper)
        service.startService()
        self.addCleanup(service.stopService)
        client = Raw()
        yield connectProtocol(TCP4ClientEndpoint(reactor, *service.address), client)
        client.transport.write(b"GET /daemonstatus.json HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        yield deferLater(reactor, 0.01, lambda: None)  # the bytes reach the worker
        clock.advance(4.9)
        yield deferLater(reactor, 0.01, lambda: None)
        self.assertFalse(client.done.called)
        clock.advance(0.1)
        self.assertEqual((yield client.done), b"")


class PartitionTests(WorkerTestBase):
    """A FEED_URI with partition directories: the job's files land in its hour, and the hour gets its marker."""

    @defer.inlineCallbacks
    def test_job_feed_in_its_hour_then_the_marker(self) -> Any:
        """The job renders %(date)s, %(hour)s, %(site)s and %(node)s at its start and keeps the window in its job
        file; its hour is marked (manifest with the file's records, then _SUCCESS) once its file is shipped."""
        clock = Clock()
        clock.advance(reactor.seconds() + 7200)  # the shipper's clock: the job's hour has passed
        self.shipper = FeedShipper(reactor, os.path.join(self.data, "spool2"), clock=clock, partition_grace=0.0)
        self.shipper.startService()
        self.addCleanup(self.shipper.stopService)
        self.gate.open()
        service = self.worker()
        template = f"FEED_URI=file://{self.feeds}/dt=%(date)s/hour=%(hour)s/%(batch)s_%(site)s_%(node)s.jl"
        job_id = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", template),
                                     ("batch", "7"), ("setting", self.urls(*items(3))))
        job = yield service.runner.when_done(job_id)
        yield self.shipper.settled()
        start = job.feed_window[0]
        hour = time.strftime("dt=%Y-%m-%d/hour=%H", time.gmtime(start))
        self.assertEqual(job.feed_window, [start, start + 3600])
        self.assertEqual(self.job_files()[job_id]["feed_window"], job.feed_window)
        directory = os.path.join(self.feeds, hour)
        self.assertEqual(sorted(os.listdir(directory)), ["7_demo-shop_test-node.jl", "_MANIFEST.json", "_SUCCESS"])
        with open(os.path.join(directory, "_MANIFEST.json"), encoding="utf-8") as f:
            manifest = json.load(f)
        with open(os.path.join(directory, "7_demo-shop_test-node.jl"), "rb") as f:
            lines = f.read().count(b"\n")
        self.assertEqual([(e["name"], e["records"]) for e in manifest["files"]], [("7_demo-shop_test-node.jl", lines)])
        self.assertEqual(lines, len(self.ok_finals(items(3))))


class PartTests(WorkerTestBase):
    """[items] rotate_seconds / rotate_idle in the worker: a long job ships its items so far as parts, exactly once
    across a restart, and the rest at its end."""

    def parted_worker(self, clock: Clock, **overrides: Any) -> WorkerService:
        self.clock = clock
        overrides.setdefault("rotate_seconds", 300.0)
        overrides.setdefault("rotate_idle", 60.0)
        service = WorkerService(ClockedReactor(reactor, clock), self.config(**overrides), self.fetcher,
                                self.parser("demo-shop"), self.store, self.shipper)
        service.startService()
        self.addCleanup(lambda: service.stopService() if service.running else None)
        self.api = "http://%s:%d" % service.address
        return service

    def feed_lines(self) -> dict[str, list[str]]:
        found = {}
        for name in sorted(os.listdir(self.feeds)):
            with open(os.path.join(self.feeds, name), encoding="utf-8") as f:
                found[name] = [json.loads(line)["url"] for line in f]
        return found

    @defer.inlineCallbacks
    def start_job(self, service: WorkerService, paths: list[str]) -> Any:
        job_id = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                     ("batch", "5"), ("setting", self.urls(*paths)))
        yield self.until(lambda: job_id in service.runner.runs)
        return job_id

    def until(self, predicate: Any) -> Deferred[None]:
        """Fires once ``predicate()`` holds, running what the worker's clock has due meanwhile (no time passes)."""
        clock = self.clock

        def check() -> bool:
            clock.advance(0)
            return bool(predicate())

        return wait_until(reactor, check, 0.01)

    @defer.inlineCallbacks
    def test_idle_job_ships_a_part_then_the_rest(self) -> Any:
        """Three pages' items, then the job waits on a slow page: after rotate_idle its items so far ship as
        <name>-p00001.jl (once: nothing more happens without items); the rest ships under the name at its end."""
        clock = Clock()
        clock.advance(reactor.seconds())
        service = self.parted_worker(clock)
        good, slow = self.good(0, 3), self.slow()
        job_id = yield self.start_job(service, good + [slow])
        run = service.runner.runs[job_id]
        yield self.until(lambda: run.stats["items"] == 3)
        clock.advance(59)
        self.assertEqual(os.listdir(self.feeds) if os.path.isdir(self.feeds) else [], [])
        clock.advance(1)
        yield self.until(lambda: run.sealing is None and run.next_part == 2)
        yield self.shipper.settled()
        [(part, urls)] = self.feed_lines().items()
        self.assertRegex(part, r"^5_demo-shop_.*-p00001\.jl$")
        self.assertEqual(sorted(urls), sorted(self.ok_finals(good)))
        clock.advance(3600)  # no item since: no empty part
        self.gate.open()
        yield self.until(lambda: service.runner.jobs[job_id].state == "finished")
        job = service.runner.jobs[job_id]
        yield self.shipper.settled()
        lines = self.feed_lines()
        [final] = [n for n in lines if n != part]
        self.assertEqual(final, part.replace("-p00001", ""))
        self.assertEqual(lines[final], sorted(self.ok_finals([slow])))
        self.assertEqual(job.stats["items"], 4)
        self.assertFalse(os.path.exists(os.path.join(self.data, "worker", "jobs", job_id + ".parts")))

    @defer.inlineCallbacks
    def test_part_then_restart_makes_no_item_twice(self) -> Any:
        """A part ships, the worker stops mid-job (the job is pending again), a new worker runs it again: the pages
        of the part make no item again; the part and the rest hold each item once."""
        clock = Clock()
        clock.advance(reactor.seconds())
        service = self.parted_worker(clock, rotate_seconds=5.0, rotate_idle=0.0)  # by age alone this time
        good, slow = self.good(0, 3), self.slow()
        job_id = yield self.start_job(service, good + [slow])
        run = service.runner.runs[job_id]
        yield self.until(lambda: run.stats["items"] == 3)
        clock.advance(5)  # (less than the fetch timeout: the slow page is still held)
        yield self.until(lambda: run.sealing is None and run.next_part == 2)
        stopping = service.stopService()
        yield self.until(lambda: service.runner.stopping)  # (its port closed first)
        clock.advance(10)  # the worker's stop_timeout: the job is interrupted, pending again
        yield stopping
        yield self.shipper.settled()
        self.assertEqual(len(self.feed_lines()), 1, self.feed_lines())
        self.gate.open()
        again = self.parted_worker(clock)
        yield again.ready
        yield self.until(lambda: again.runner.jobs[job_id].state == "finished")
        job = again.runner.jobs[job_id]
        yield self.shipper.settled()
        lines = self.feed_lines()
        self.assertEqual(len(lines), 2, lines)
        every = [url for urls in lines.values() for url in urls]
        self.assertEqual(sorted(every), sorted(self.ok_finals(good + [slow])))  # each once
        self.assertEqual((job.state, job.stats["items"]), ("finished", 1))


class PersistenceTests(WorkerTestBase):
    """Accepted jobs survive stops and crashes; a re-run makes one whole feed file."""

    @defer.inlineCallbacks
    def test_jobs_are_read_on_the_lane_and_requests_wait_for_them(self) -> Any:
        """At start the ledgers and the jobs on disk are read on the worker's lane, not the reactor thread; a
        request that comes meanwhile (here, while the lane is held) is answered once they are read."""
        held: Deferred[None] = Deferred()
        threads: list[str] = []
        lane = Lane(reactor, "worker-io")
        run = lane.run

        def spy(function: Any, *args: Any) -> Any:
            if getattr(function, "__name__", "") == "_recover":
                def recover() -> Any:
                    threads.append(threading.current_thread().name)
                    return function(*args)

                return held.addCallback(lambda _: run(recover))
            return run(function, *args)

        self.patch(lane, "run", spy)
        service = WorkerService(reactor, self.config(), self.fetcher, self.parser("demo-shop"), self.store,
                                self.shipper, lane=lane)
        service.startService()
        self.addCleanup(lambda: service.stopService() if service.running else None)
        self.api = "http://%s:%d" % service.address
        answered: list[Any] = []
        self.call("GET", "/listjobs.json").addCallback(answered.append)
        for _ in range(20):  # the request has come in and waits (a few reactor turns, no timer)
            yield deferLater(reactor, 0, lambda: None)
        self.assertEqual(answered, [])
        held.callback(None)
        yield service.ready
        while not answered:
            yield deferLater(reactor, 0, lambda: None)
        self.assertEqual((answered[0][0], answered[0][1]["status"]), (200, "ok"))
        self.assertEqual(len(threads), 1)
        self.assertNotEqual(threads[0], threading.main_thread().name)

    @defer.inlineCallbacks
    def test_restart_runs_accepted_jobs(self) -> Any:
        """Stopped at the deadline, a running job is persisted pending; a new worker runs it and the queued one."""
        service = self.worker(max_jobs=1, stop_timeout=0.0, job_concurrency=1)  # only the held page in flight
        slow = self.slow()
        first = [slow] + self.good(0, 2)
        second = self.good(2, 3)
        a = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                ("batch", "10"), ("setting", self.urls(*first)))
        yield self.gate.arrival(1)
        b = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                ("batch", "11"), ("setting", self.urls(*second)), ("priority", "-1"))
        yield service.stopService()
        files = self.job_files()
        self.assertEqual((files[a]["state"], files[b]["state"]), ("pending", "pending"))
        self.assertIsNotNone(files[a]["feed_uri"])
        self.assertFalse(os.path.exists(self.feeds))
        self.gate.open()
        again = self.worker(max_jobs=1)
        yield again.ready
        job_a = yield again.runner.when_done(a)
        job_b = yield again.runner.when_done(b)
        yield self.shipper.settled()
        self.assertEqual((job_a.state, job_b.state), ("finished", "finished"))
        self.assertEqual(job_a.feed_uri, files[a]["feed_uri"])  # the name chosen at the first start is kept
        self.assertEqual(sorted(i["url"] for i in self.feed_items("10")), sorted(self.ok_finals(first)))
        self.assertEqual(sorted(i["url"] for i in self.feed_items("11")), sorted(self.ok_finals(second)))
        self.assertEqual(len(os.listdir(self.feeds)), 2)

    @defer.inlineCallbacks
    def test_items_handed_over_before_a_kill_are_recorded_at_the_next_start(self) -> Any:
        """A worker killed after a job's file went to the shipper and before its items were recorded (the fault
        suite's worker-kill9 found a second item so, through a redirect to one of its pages in a later job): the
        job is saved as shipping with its items' fingerprints, and the next start records them."""
        from spiderd.worker.itemized import Itemized

        target, source = "/item/7.html", "/item/27.html"  # (the demo site's /item/27.html redirects to /item/7)
        self.assertEqual(self.spec.expected().final(source), target)
        left: dict[str, Any] = {}
        ship = self.shipper.ship

        def hand_over(path: str, *args: Any, **kwargs: Any) -> Any:  # what a kill right after it leaves on disk
            left.update(self.job_files())
            return ship(path, *args, **kwargs)

        commit = Itemized.commit
        self.patch(self.shipper, "ship", hand_over)
        self.patch(Itemized, "commit", lambda *args, **kwargs: None)  # (killed before it)
        first = self.worker()
        job_id = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                     ("batch", "30"), ("setting", self.urls(target)))
        yield first.runner.when_done(job_id)
        yield first.stopService()
        yield self.shipper.settled()
        self.assertEqual(left[job_id]["itemized"], [[fingerprint(self.root + target), False]])
        write_atomically(os.path.join(self.data, "worker", "jobs", job_id + ".json"), json.dumps(left[job_id]).encode())
        self.patch(self.shipper, "ship", ship)
        self.patch(Itemized, "commit", commit)
        again = self.worker()
        yield again.ready
        self.assertEqual(again.runner.jobs[job_id].state, "finished")
        later = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                    ("batch", "31"), ("setting", self.urls(source)))
        yield again.runner.when_done(later)
        yield self.shipper.settled()
        self.assertEqual([i["url"] for i in self.feed_items("30")], [self.root + target])
        self.assertEqual(self.feed_items("31"), [])  # the redirect made no second item of /item/7.html
        self.assertEqual(self.job_files()[job_id]["itemized"], [])

    @defer.inlineCallbacks
    def test_stop_lets_running_jobs_finish(self) -> Any:
        """Within the deadline, stop waits for the running job, which finishes and ships."""
        service = self.worker(stop_timeout=30.0)
        jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                    ("batch", "7"), ("setting", self.urls(self.slow())))
        yield self.gate.arrival(1)
        stopped = service.stopService()
        self.assertNoResult(stopped)
        self.gate.open()
        yield stopped
        yield self.shipper.settled()
        self.assertEqual(self.job_files()[jobid]["state"], "finished")
        self.assertEqual(len(self.feed_items("7")), 1)

    @defer.inlineCallbacks
    def test_recovery_after_kill(self) -> Any:
        """What a kill -9 leaves: a running job with a torn items file is re-run from scratch; a job that was
        shipping ships its complete file without fetching again, or is done if the shipper took it."""
        jobs_dir = os.path.join(self.data, "worker", "jobs")
        os.makedirs(jobs_dir)
        incoming = self.shipper.incoming_dir
        yield self.shipper.ready  # its spool's directories made (on its lane)
        feed = f"file://{self.feeds}/%(batch)s_%(name)s_%(time)s.jl"
        pages = self.good(0, 2)
        self.crashed_job("torn", pages, feed, shipping=False)
        with open(os.path.join(incoming, "torn.jl"), "w") as f:
            f.write('{"url": "stale"}\n{"url": "half')
        self.crashed_job("ready", self.good(2, 1), feed, shipping=True)
        with open(os.path.join(incoming, "ready.jl"), "w") as f:
            f.write('{"url": "from-before-the-crash"}\n')
        self.crashed_job("taken", self.good(3, 1), feed, shipping=True)
        service = self.worker()
        yield service.ready  # the jobs on disk read (on the worker's lane)
        torn_job = yield service.runner.when_done("torn")
        ready_job = yield service.runner.when_done("ready")
        taken_job = yield service.runner.when_done("taken")
        yield self.shipper.settled()
        self.assertEqual([j.state for j in (torn_job, ready_job, taken_job)], ["finished"] * 3)
        self.assertEqual(sorted(i["url"] for i in self.feed_items("torn")), sorted(self.root + p for p in pages))
        self.assertEqual(self.feed_items("ready"), [{"url": "from-before-the-crash"}])
        self.assertEqual(self.stored(), sorted(self.root + p for p in pages))
        self.assertEqual(len(os.listdir(self.feeds)), 2)

    def crashed_job(self, jobid: str, paths: list[str], feed: str, shipping: bool) -> Job:
        job = Job(jobid, "spiderd", "demo-shop", {"FEED_URI": feed, "DISTRIBUTED_START_URLS": json.dumps(
            [self.root + p for p in paths])}, {"batch": jobid}, state="running", seq=1, start_time=1.0,
            shipping=shipping)
        job.feed_uri = f"file://{self.feeds}/{jobid}_demo-shop_before.jl"
        write_atomically(os.path.join(self.data, "worker", "jobs", jobid + ".json"),
                         json.dumps(job.to_dict()).encode())
        return job

    @defer.inlineCallbacks
    def test_cancel_running_job(self) -> Any:
        """A cancelled running job stops fetching (the held page is abandoned, the rest never asked for),
        ships nothing and ends cancelled."""
        service = self.worker(job_concurrency=1)
        jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                    ("setting", self.urls(self.slow(), *self.good(0, 2))))
        yield self.gate.arrival(1)
        _, answer, _ = yield self.call("POST", "/cancel.json", {"project": "spiderd", "job": jobid})
        self.assertEqual(answer["prevstate"], "running")
        job = yield service.runner.when_done(jobid)
        self.assertEqual((job.state, self.job_files()[jobid]["state"]), ("cancelled", "cancelled"))
        stored = yield self.store.count()
        self.assertEqual((job.stats.get("requests", 0), stored), (0, 0))
        self.assertFalse(os.path.exists(self.feeds))
        self.assertEqual(os.listdir(self.shipper.incoming_dir), [])
        _, answer, _ = yield self.call("GET", "/status.json?job=" + jobid)
        self.assertEqual(answer["currstate"], "finished")
        self.gate.open()

    @defer.inlineCallbacks
    def test_priority_order(self) -> Any:
        """Pending jobs run highest priority first, then in order of arrival."""
        service = self.worker(max_jobs=1, concurrency=1)
        yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"),
                            ("setting", self.urls(self.slow())))
        yield self.gate.arrival(1)
        for jobid, priority in (("low", "0"), ("high", "5"), ("low2", "0")):
            yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("jobid", jobid),
                                ("priority", priority))
        _, jobs, _ = yield self.call("GET", "/listjobs.json")
        self.assertEqual([j["id"] for j in jobs["pending"]], ["high", "low", "low2"])
        self.assertEqual([j.id for j in service.runner.pending()], ["high", "low", "low2"])
        self.gate.open()


class PartsTests(unittest.SynchronousTestCase):
    """The small pure parts."""

    def test_safe_names(self) -> None:
        """Plain names pass; separators, dots and control characters do not."""
        for good in ("1", "abc", "6487ec79947edab326d6db28a2d86511", "a.b-c_d"):
            self.assertTrue(safe_name(good), good)
        for bad in ("", ".", "..", ".x", "a/b", "a\\b", "../x", "a..b", "x\x00", "a b", "x" * 129):
            self.assertFalse(safe_name(bad), bad)

    def test_loopback(self) -> None:
        """127/8, ::1 and localhost are loopback; the rest is not."""
        for address in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"):
            self.assertTrue(is_loopback(address), address)
        for address in ("0.0.0.0", "", "::", "10.0.0.1", "example.com"):
            self.assertFalse(is_loopback(address), address)

    def test_retryable(self) -> None:
        """5xx and network errors are retried; 200, 4xx and final failures are not."""
        self.assertEqual([retryable(s) for s in (500, 503, -1, -4, 200, 404, 403, -10, -11)],
                         [True, True, True, True, False, False, False, False, False])

    def test_job_round_trip(self) -> None:
        """A job read back from its file is the job written; junk is set aside."""
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        job = Job("j1", "p", "s", {"FEED_URI": "file:///x/%(batch)s.jl"}, {"batch": "3"}, 2.5, None, 4)
        write_atomically(os.path.join(directory, "j1.json"), json.dumps(job.to_dict()).encode())
        with open(os.path.join(directory, "junk.json"), "w") as f:
            f.write("{not json")
        open(os.path.join(directory, ".j2.json.tmp"), "w").close()
        self.assertEqual(JobStore(directory, lambda *a: None).load(), [job])  # type: ignore[arg-type,return-value]
        self.assertEqual(sorted(os.listdir(directory)), ["j1.json", "junk.json.bad"])

    def test_worker_config_from_settings(self) -> None:
        """build_worker's mapping: the [worker] section's keys, else defaults; pool/fetch values reused."""

        def of(raw: dict[str, Any]) -> WorkerConfig:
            s = cfg.from_dict(raw)
            return worker_config(s.worker, s.fetch, data_dir=s.spiderd.data_dir, role=s.spiderd.role,
                                 failure_threshold=s.pool.failure_threshold, feed_format=s.items.format)

        config = of({"spiderd": {"data_dir": "/d", "role": "worker"}, "pool": {"failure_threshold": 5}})
        self.assertEqual((config.data_dir, config.listen.endpoint, config.failure_threshold),
                         ("/d", "tcp:6800:interface=127.0.0.1:backlog=1024", 5))
        self.assertEqual(of({"spiderd": {"data_dir": "/d"}}).listen.endpoint,  # the all role's: any free port
                         "tcp:0:interface=127.0.0.1:backlog=1024")
        self.assertEqual(config.default_feed_uri, "file:///d/feeds/%(batch)s_%(name)s_%(time)s.jl")
        paced = of({"spiderd": {"data_dir": "/d"}, "fetch": {
            "per_host_delay": 1.5, "hosts": {"slow.example": {"delay": 10, "concurrency": 1}}}})
        self.assertEqual((paced.per_host_delay, dict(paced.host_overrides)), (1.5, {"slow.example": (10.0, 1)}))
        adaptive = of({"spiderd": {"data_dir": "/d"}, "fetch": {
            "delay_factor": 2, "hosts": {"slow.example": {"delay": 1}, "fast.example": {"delay_factor": 0}}}})
        self.assertEqual((adaptive.adaptive, dict(adaptive.adaptive_overrides)),
                         (AdaptiveDelay(2.0, 0.0, 30.0), {"fast.example": AdaptiveDelay(0.0, 0.0, 30.0)}))

        self.assertRaises(cfg.ConfigError, cfg.from_dict, {"worker": {"bind": "0.0.0.0"},
                                                           "fetch": {"per_host_concurrency": 2}})
