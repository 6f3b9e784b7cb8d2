"""How the worker's jobs flow: shared URL slots, no timer in a job's path, fresh items for rescheduled URLs."""

from __future__ import annotations

import json
import os
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial import unittest
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site
from zope.interface import directlyProvides, providedBy

from spiderd.demo.pages import render
from spiderd.feed.shipper import FeedShipper
from spiderd.fetch.fetcher import FetchConfig, Fetcher
from spiderd.store import open_store
from spiderd.core.urls import fingerprint
from spiderd.worker import WorkerService
from spiderd.worker.itemized import Itemized

from .test_worker import WorkerTestBase
from .test_worker_scrapyd import booked


class ZeroOnlyReactor:
    """The real reactor, except that timers with a delay land on a Clock that nobody advances.

    Whatever waits on such a timer never goes on: a job that finishes under it had no timer in its path.
    """

    def __init__(self, real: Any) -> None:
        self._real = real
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.seconds = self.clock.seconds
        directlyProvides(self, providedBy(real))

    def callLater(self, delay: float, f: Any, *args: Any, **kwargs: Any) -> Any:
        if delay <= 0:
            return self._real.callLater(0, f, *args, **kwargs)
        return self.clock.callLater(delay, f, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class Holding(Resource):
    """Detail pages of the demo site; ``/item/<n>.html`` with n >= 1000 are held until ``release``."""

    isLeaf = True

    def __init__(self, spec: Any) -> None:
        super().__init__()
        self.spec = spec
        self.held: list[Request] = []
        self._over: dict[int, Deferred[None]] = {}  # id(request) -> fires when it is finished or its client gone
        self.requests = 0
        self._waiters: list[tuple[int, Deferred[None]]] = []

    def render_GET(self, request: Request) -> bytes | int:
        path = request.path.decode()
        if not path.startswith("/item/"):
            request.setResponseCode(404)  # robots.txt: allow all
            return b""
        self.requests += 1
        number = int(path.rsplit("/", 1)[1].split(".")[0])
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        if number < 1000:
            return render(self.spec, f"/item/{number}.html")[2]
        self.held.append(request)
        over = self._over[id(request)] = request.notifyFinish()
        over.addErrback(lambda _: None)
        for count, d in list(self._waiters):
            if len(self.held) >= count:
                self._waiters.remove((count, d))
                d.callback(None)
        return NOT_DONE_YET

    def holding(self, count: int) -> Deferred[None]:
        """Fires once ``count`` requests are held in all."""
        d: Deferred[None] = Deferred()
        self._waiters.append((count, d))
        if len(self.held) >= count:
            self._waiters.remove((count, d))
            d.callback(None)
        return d

    def release(self) -> None:
        """Answer every held request (with the page of item 1)."""
        held, self.held = self.held, []
        for request in held:
            if not self._over.pop(id(request)).called:
                request.write(render(self.spec, "/item/1.html")[2])
                request.finish()


class FlowTests(WorkerTestBase):
    """Jobs share the worker's slots and never wait on a timer they did not ask for."""

    def setUp(self) -> None:
        super().setUp()
        self.gate.open()
        self.holding = Holding(self.spec)
        port = reactor.listenTCP(0, Site(self.holding), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.hold_root = f"http://127.0.0.1:{port.getHost().port}"

    def batch(self, number: str, urls: str) -> Deferred[str]:
        """Schedule a job of the demo spider: batch ``number``, its feed in the feeds directory, ``urls`` (a
        DISTRIBUTED_START_URLS setting)."""
        return self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                             ("batch", number), ("setting", urls))

    def held_urls(self, start: int, count: int) -> str:
        return "DISTRIBUTED_START_URLS=" + json.dumps(
            [f"{self.hold_root}/item/{n}.html" for n in range(1000 + start, 1000 + start + count)])

    @defer.inlineCallbacks
    def test_no_timer_in_a_jobs_path(self) -> Any:
        """A job runs to its shipped feed with every timer of the worker, the store, the fetcher and the shipper
        frozen: nothing in the path waits on one (the store's flush timer included: the job's tail flushes)."""
        frozen = ZeroOnlyReactor(reactor)
        fetcher = Fetcher(frozen, FetchConfig(user_agent="spiderd-test", timeout=20, connect_timeout=5))
        self.addCleanup(fetcher.close)
        store = open_store("sqlite:///frozen.sqlite3", self.data, frozen, batch_size=1000)
        store.startService()
        self.addCleanup(store.stopService)
        shipper = FeedShipper(frozen, os.path.join(self.data, "frozen-spool"), stop_timeout=5.0)
        shipper.startService()
        self.addCleanup(shipper.stopService)
        service = WorkerService(frozen, self.config(job_concurrency=0), fetcher, self.parser(), store, shipper)
        service.startService()
        self.addCleanup(lambda: service.stopService() if service.running else None)
        self.api = "http://%s:%d" % service.address
        paths = self.good(0, 12)
        jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                    ("batch", "1"), ("setting", self.urls(*paths)))
        job = yield service.runner.when_done(jobid)
        yield shipper.settled()
        self.assertEqual(job.state, "finished")
        self.assertEqual(len(self.feed_items("1")), len(self.ok_finals(paths)))
        self.assertEqual((yield store.count()), len(self.ok_finals(paths)))

    @defer.inlineCallbacks
    def test_jobs_share_the_workers_slots(self) -> Any:
        """One job alone takes every slot of the worker; two jobs share them, never more in flight in all."""
        service = self.worker(concurrency=3, job_concurrency=0, per_host_concurrency=10)
        a = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.held_urls(0, 5)))
        yield self.holding.holding(3)
        b = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.held_urls(10, 5)))
        yield service.runner.runs[b].items.open()  # the second job is running (its file is open)
        self.assertEqual((self.holding.requests, service.runner._pipeline.in_flight), (3, 3))
        self.holding.release()
        yield self.holding.holding(3)
        self.assertEqual(self.holding.requests, 6)  # the freed slots went to both jobs, still three at a time
        while self.holding.requests < 10:
            self.holding.release()
            yield self.holding.holding(min(3, 10 - self.holding.requests))
        self.holding.release()
        jobs = yield defer.gatherResults([service.runner.when_done(a), service.runner.when_done(b)])
        self.assertEqual([j.stats["requests"] for j in jobs], [5, 5])

    @defer.inlineCallbacks
    def test_a_job_waiting_on_its_retries_lets_the_next_job_fetch(self) -> Any:
        """With max_jobs = 1, a job whose last URL waits on its retry delay (on a Clock nobody turns yet) does not
        hold the worker: the next job starts, fetches and ships meanwhile; the first ends once its retries do."""
        clock = Clock()
        config = self.config(max_jobs=1, failure_threshold=2, retry_delay=1.0)
        service = WorkerService(reactor, config, self.fetcher, self.parser(), self.store, self.shipper, clock=clock)
        service.startService()
        self.addCleanup(lambda: service.stopService() if service.running else None)
        self.api = "http://%s:%d" % service.address
        error = sorted(self.spec.expected().server_error)[0]
        first = yield self.batch("1", self.urls(error, *self.good(0, 1)))
        yield booked(clock)  # its 500 waits on its retry: nothing else of it is left
        second = yield self.batch("2", self.urls(*self.good(1, 2)))
        job = yield service.runner.when_done(second)
        self.assertEqual((job.state, job.stats["pages"], service.runner.jobs[first].state),
                         ("finished", 2, "running"))
        clock.advance(1.0)  # the first retry: 500 again, the second one is booked
        yield booked(clock)
        clock.advance(2.0)
        job = yield service.runner.when_done(first)
        self.assertEqual((job.state, job.stats["pages"], job.stats["failed"], job.stats["requests"]),
                         ("finished", 1, 1, 4))

    @defer.inlineCallbacks
    def test_a_job_whose_last_urls_are_in_flight_lets_the_next_job_fetch(self) -> Any:
        """With max_jobs = 1, a job whose URLs are all handed out (its last page held by a slow server) leaves its
        place while URL slots are free: the next job fetches and ships meanwhile; the first ends with its page."""
        service = self.worker(max_jobs=1, concurrency=3, job_concurrency=0, per_host_concurrency=10)
        first = yield self.batch("1", self.held_urls(0, 1))
        yield self.holding.holding(1)  # its one page is in flight on a slow server: nothing of it is left to start
        second = yield self.batch("2", self.urls(*self.good(1, 2)))
        job = yield service.runner.when_done(second)
        self.assertEqual((job.state, job.stats["pages"], service.runner.jobs[first].state),
                         ("finished", 2, "running"))
        self.holding.release()
        job = yield service.runner.when_done(first)
        self.assertEqual((job.state, job.stats["requests"]), ("finished", 1))

    @defer.inlineCallbacks
    def test_a_shipping_job_leaves_its_place(self) -> Any:
        """With max_jobs = 1, the next job fetches while the one before is still handing over its feed."""
        shipped: list[Deferred[None]] = []
        both_shipping: Deferred[None] = Deferred()
        real_ship = self.shipper.ship

        def slow_ship(path: str, uri: str, *args: Any, **kwargs: Any) -> Deferred[None]:
            d: Deferred[None] = Deferred()
            shipped.append(d)
            d.addCallback(lambda _: real_ship(path, uri, *args, **kwargs))
            if len(shipped) == 2:
                both_shipping.callback(None)
            return d

        self.shipper.ship = slow_ship  # type: ignore[method-assign]
        service = self.worker(max_jobs=1)
        first = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                    ("batch", "1"), ("setting", self.urls(*self.good(0, 2))))
        second = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"),
                                     ("setting", self.feed_setting()), ("batch", "2"),
                                     ("setting", self.urls(*self.good(2, 2))))
        yield both_shipping  # the second job ran to its own ship while the first one's was held
        self.assertEqual(service.runner.jobs[first].state, "running")
        for d in shipped:
            d.callback(None)
        jobs = yield defer.gatherResults([service.runner.when_done(first), service.runner.when_done(second)])
        self.assertEqual([j.state for j in jobs], ["finished", "finished"])

    @defer.inlineCallbacks
    def test_rescheduled_urls_make_fresh_items(self) -> Any:
        """The same URLs scheduled twice, the second while the first job runs: each job's feed has every item."""
        service = self.worker()
        paths = self.good(0, 4)
        first = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                    ("batch", "1"), ("setting", self.urls(*paths)))
        second = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"),
                                     ("setting", self.feed_setting()), ("batch", "2"), ("setting", self.urls(*paths)))
        yield defer.gatherResults([service.runner.when_done(first), service.runner.when_done(second)])
        third = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                    ("batch", "3"), ("setting", self.urls(*paths)))
        yield service.runner.when_done(third)
        yield self.shipper.settled()
        for batch in ("1", "2", "3"):
            self.assertEqual(sorted(i["url"] for i in self.feed_items(batch)), sorted(self.ok_finals(paths)))

    @defer.inlineCallbacks
    def test_a_batch_sent_again_runs_once(self) -> Any:
        """The same job id for the same request (a frontier resending its spool) is the same job, even after a
        restart and after its file was pruned; the same id for another request is refused while it runs."""
        service = self.worker(finished_to_keep=0)
        batch = [("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()), ("batch", "4"),
                 ("jobid", "b4"), ("setting", self.urls(*self.good(0, 3)))]
        yield self.schedule(*batch)
        again = yield self.schedule(*batch)
        self.assertEqual(again, "b4")
        yield service.runner.when_done("b4")
        yield service.stopService()
        service = self.worker(finished_to_keep=0)
        self.assertEqual((yield self.schedule(*batch)), "b4")
        yield self.shipper.settled()
        self.assertEqual(len(self.feed_items("4")), 3)
        self.assertEqual(service.runner.pending(), [])
        self.assertEqual(service.runner._pipeline.totals["requests"], 0)

    @defer.inlineCallbacks
    def test_job_urls_live_on_disk_and_are_capped(self) -> Any:
        """A job's start URLs are in a file beside it, not in the job kept in memory, and go when it ends; a job
        with more than max_job_urls is refused with the reason."""
        service = self.worker(max_jobs=1, max_job_urls=5)
        held = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.held_urls(0, 1)))
        yield self.holding.holding(1)  # the one job slot is taken: the next job stays pending
        paths = self.good(0, 3)
        jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                    ("batch", "5"), ("setting", self.urls(*paths)))
        job = service.runner.jobs[jobid]
        self.assertEqual((job.url_count, "DISTRIBUTED_START_URLS" in job.settings), (3, False))
        urls_file = service.job_store.urls_path(jobid)
        with open(urls_file) as f:
            self.assertEqual(json.load(f), [self.root + p for p in paths])
        code, answer, _ = yield self.call("POST", "/schedule.json", [("project", "spiderd"), ("spider", "demo-shop"),
                                                                     ("setting", self.urls(*self.good(0, 6)))])
        self.assertEqual(answer["status"], "error")
        self.assertIn("6 URLs, at most 5 in one job (worker.max_job_urls)", answer["message"])
        self.holding.release()
        yield service.runner.when_done(held)
        yield service.runner.when_done(jobid)
        yield self.shipper.settled()
        self.assertEqual(len(self.feed_items("5")), len(self.ok_finals(paths)))
        self.assertFalse(os.path.exists(urls_file))

    @defer.inlineCallbacks
    def test_a_long_url_list_is_checked_in_chunks(self) -> Any:
        """5,000 start URLs are checked CHUNK at a time (each chunk a turn of the reactor), not in one go, and the
        job gets all of them, repeats dropped."""
        from spiderd.worker import validate

        service = self.worker(max_jobs=1, max_job_urls=10_000, concurrency=1)  # no free slot: the held job counts
        sizes: list[int] = []
        check = service.validator._check_urls
        service.validator._check_urls = lambda urls, site, rules: (sizes.append(len(urls)), check(urls, site, rules))[1]
        held = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.held_urls(0, 1)))
        yield self.holding.holding(1)  # the one job slot is taken: the big job stays pending
        sizes.clear()
        urls = [f"{self.root}/item/{i}.html" for i in range(4999)] + [f"{self.root}/item/0.html"]
        big = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"),
                                  ("setting", "DISTRIBUTED_START_URLS=" + json.dumps(urls)))
        self.assertEqual(sizes, [validate.CHUNK, validate.CHUNK, 5000 - 2 * validate.CHUNK])
        self.assertEqual(service.runner.jobs[big].url_count, 4999)
        code, answer, _ = yield self.call("POST", "/cancel.json", [("project", "spiderd"), ("job", big)])
        self.assertEqual(answer["prevstate"], "pending")
        self.holding.release()
        yield service.runner.when_done(held)

    @defer.inlineCallbacks
    def test_the_jobs_table_in_the_api_and_spiderctl(self) -> Any:
        """GET /api/jobs and `spiderctl jobs`: the running job first with URLs done of total, then the pending one,
        then the ended ones newest first, each with its feed's state and where it goes (password redacted)."""
        from twisted.internet import threads

        from spiderd.ops import ctl
        from spiderd.ops.web.node import Node

        from .webnode import start_api

        service = self.worker(max_jobs=1, concurrency=3)  # the held job's 3 URLs take every slot: it counts
        done = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                   ("batch", "7"), ("setting", self.urls(*self.good(0, 2))))
        yield service.runner.when_done(done)
        yield self.shipper.settled()  # uploaded: "shipped"
        held = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"),
                                   ("setting", self.held_urls(0, 3)), ("jobid", "held"))
        yield self.holding.holding(3)
        waiting = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"),
                                      ("setting", "FEED_URI=ftp://feeds:s3cret@127.0.0.1:2121/in/%(batch)s.jl"),
                                      ("setting", self.urls(*self.good(2, 1))), ("jobid", "waiting"))
        api = start_api(reactor, Node("worker", Clock(), worker=service), Clock())
        self.addCleanup(api.stopService)
        code, out = yield threads.deferToThread(_ctl, ctl, ["--url", api.url, "jobs", "--json"])
        rows = json.loads(out)["jobs"]
        self.assertEqual(code, 0)
        self.assertEqual([(r["id"], r["state"]) for r in rows],
                         [(held, "running"), (waiting, "pending"), (done, "finished")])
        self.assertEqual((rows[0]["done"], rows[0]["urls"], rows[0]["feed"]["state"]), (0, 3, "writing"))
        self.assertEqual((rows[2]["done"], rows[2]["urls"], rows[2]["batch"], rows[2]["feed"]["state"]),
                         (2, 2, "7", "shipped"))
        self.assertEqual(rows[2]["items"], len(self.ok_finals(self.good(0, 2))))
        self.assertNotIn("s3cret", out)
        code, text = yield threads.deferToThread(_ctl, ctl, ["--url", api.url, "jobs", "--limit", "2"])
        self.assertEqual(text.splitlines()[0].split(), ["STATE", "JOB", "SPIDER", "BATCH", "URLS", "ITEMS", "FAILED",
                                                        "FEED"])
        self.assertEqual([line.split()[0] for line in text.splitlines()[1:]], ["running", "pending"])
        self.assertIn("0/3", text.splitlines()[1])
        code, _ = yield threads.deferToThread(_ctl, ctl, ["--url", api.url, "jobs", "--limit", "0"])
        self.assertEqual(code, 1)  # refused by the API: 'limit' must be 1..1000
        self.holding.release()
        yield service.runner.when_done(held)

    @defer.inlineCallbacks
    def test_a_feed_not_uploaded_yet_is_spooled(self) -> Any:
        """A finished job whose feed the shipper could not upload yet (its FTP server is down) shows "spooled" in
        the jobs table, not "shipped"; the shipper's files say why."""
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        service = self.worker()
        done = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("jobid", "down"),
                                   ("setting", f"FEED_URI=ftp://feeds:s3cret@127.0.0.1:{closed}/in/%(batch)s.jl"),
                                   ("setting", self.urls(*self.good(0, 1))))
        yield service.runner.when_done(done)
        yield self.shipper.settled()  # its first upload failed: a retry is due
        (job,) = service.jobs_table()
        self.assertEqual((job["state"], job["feed"]["state"]), ("finished", "spooled"))
        (entry,) = self.shipper.status()["files"]
        self.assertEqual((entry["name"], entry["state"], entry["attempts"]), ("down.jl", "retrying", 1))
        self.assertNotIn("s3cret", json.dumps([job, entry]))

    @defer.inlineCallbacks
    def test_an_empty_job_ships_an_empty_file(self) -> Any:
        """A job whose URLs make no item (404s only) ships an empty feed file: done, with nothing in it."""
        service = self.worker()
        missing = sorted(self.spec.expected().not_found)[:2]
        jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                    ("batch", "9"), ("setting", self.urls(*missing)))
        job = yield service.runner.when_done(jobid)
        yield self.shipper.settled()
        self.assertEqual((job.state, job.stats.get("items", 0)), ("finished", 0))
        self.assertEqual(self.feed_items("9"), [])


class ItemizedTests(unittest.SynchronousTestCase):
    """The redirect record: one item per page reached by redirects, within the window."""

    def test_redirect_targets_once_within_the_window(self) -> None:
        """A redirect target makes one item per window over jobs; a URL given to a job always does."""
        clock = Clock()
        record = Itemized(self.mktemp(), clock, window=100.0)
        record.open()
        self.addCleanup(record.close)
        page = fingerprint("http://127.0.0.1/item/49.html")
        self.assertTrue(record.claim(page, "a"))
        self.assertTrue(record.claim(page, "a"))  # the same job again
        self.assertFalse(record.claim(page, "b"))  # another running job
        record.commit("a")
        self.assertFalse(record.claim(page, "b"))  # made within the window
        clock.advance(101)
        self.assertTrue(record.claim(page, "b"))  # a recrawl after the window: a fresh item
        self.assertFalse(record.direct(page, "c"))  # given the URL itself, but a redirect of b's makes its item
        record.commit("b")
        self.assertFalse(record.direct(page, "c"))  # ... within the window
        clock.advance(101)
        self.assertTrue(record.direct(page, "c"))
        self.assertTrue(record.direct(page, "e"))  # two jobs given the same URL both make its item
        self.assertFalse(record.claim(page, "d"))  # and a redirect to it makes none

    def test_released_claims_are_free(self) -> None:
        """An interrupted job's claims go back, so its re-run makes its items."""
        record = Itemized(self.mktemp(), Clock())
        record.open()
        self.addCleanup(record.close)
        self.assertTrue(record.claim(7, "a"))
        record.release("a")
        self.assertTrue(record.claim(7, "b"))


def _ctl(ctl: Any, argv: list[str]) -> tuple[int, str]:
    import io

    out = io.StringIO()
    return ctl.main(argv, out), out.getvalue()
