"""The HTTP API on 127.0.0.1: every endpoint, every error, auth on and off, metrics, history, export and import."""

from __future__ import annotations

import base64
import json
from io import BytesIO
from typing import Any, Generator

from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from treq import content
from twisted.logger import formatEvent, globalLogPublisher
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, FileBodyProducer, HTTPConnectionPool
from twisted.web.http_headers import Headers

from spiderd.ops.web import Auth
from spiderd.ops.web.api import ADD_CHUNK, MAX_URLS

from .webnode import CoreOnlyPool, make_node, start_api

Gen = Generator[Any, Any, Any]


class Answer:
    """One HTTP answer: code, headers, body (and the body as JSON when it is)."""

    def __init__(self, code: int, headers: Headers, body: bytes) -> None:
        self.code = code
        self.headers = headers
        self.body = body

    def header(self, name: str) -> str | None:
        values = self.headers.getRawHeaders(name.encode())
        return values[0].decode() if values else None

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class ApiCase(TestCase):
    """An API over a fresh node; ``call`` makes one request on a non-persistent connection."""

    auth = Auth()
    worker_role = False

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.node = make_node(self.clock, self.worker_role)
        self.api = start_api(reactor, self.node, self.clock, self.auth)
        self.addCleanup(self.api.stopService)
        self.base = self.api.url.rstrip("/")
        self.agent = Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False))

    @defer.inlineCallbacks
    def call(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
             raw: bytes | None = None) -> Gen:
        sent = {"Content-Type": "application/json", **(headers or {})}
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        producer = FileBodyProducer(BytesIO(data)) if data is not None else None
        hdrs = Headers({k.encode(): [v.encode()] for k, v in sent.items()})
        response = yield self.agent.request(method.encode(), (self.base + path).encode(), hdrs, producer)
        body = yield content(response)
        return Answer(response.code, response.headers, body)


class OpenApiTests(ApiCase):
    """No credentials configured (loopback only)."""

    @defer.inlineCallbacks
    def test_status_has_every_part(self) -> Gen:
        """GET /api/status: pool sizes, rates, errors, statuses, crawler, batches, feeds, worker, store, version."""
        yield self.node.pool.addmany(["http://a.example/1", "http://a.example/2", "http://b.example/1"])
        self.node.stats.fetched(200, 1000, 0.2)
        self.node.stats.fetched(-4, 0, 30.0)
        answer = yield self.call("GET", "/api/status")
        assert answer.code == 200 and answer.header("Content-Type").startswith("application/json")
        s = answer.json
        assert s["status"] == "ok" and s["role"] == "all" and s["version"]
        assert (s["pool"]["waiting"], s["pool"]["pending"], s["pool"]["done"], s["pool"]["hosts"]) == (3, 0, 0, 2)
        assert s["pool"]["largest"] == [["a.example", 2], ["b.example", 1]]
        assert s["errors"] == {"timeout": 1} and s["statuses"] == {"200": 1, "timeout": 1}
        assert s["crawler"] == {"state": "running", "paused": False, "fetching": 3, "queued": 0, "processing": 1,
                                "concurrency": 8, "pull_failures": 0, "last_error": ""}
        assert s["batches"]["spooled"] == 2 and s["feeds"]["shipped"] == 7 and s["store"]["pending"] == 4
        assert s["worker"]["jobs_running"] == 1 and "feeds" not in s["worker"]
        assert s["pages"] == 1  # the crawler's and the worker's fetches both count into the node's stats
        assert s["recrawl"] == {"queued": 5, "list": 3, "detail": 2}
        assert set(s["rates"]) == {"pages_per_min_last_minute", "pages_per_min_last_hour"}

    @defer.inlineCallbacks
    def test_seeds(self) -> Gen:
        """POST /api/seeds: how many were added, which were known, which rejected and why."""
        urls = ["http://a.example/1", "http://A.example/1#dup", "ftp://x/", "nohost", "http://a.example/2"]
        answer = yield self.call("POST", "/api/seeds", {"urls": urls})
        assert answer.code == 200, answer.body
        assert (answer.json["added"], answer.json["known"]) == (2, 0)
        assert answer.json["rejected"] == [{"url": "ftp://x/", "reason": "bad-scheme"},
                                           {"url": "nohost", "reason": "bad-scheme"}]
        again = yield self.call("POST", "/api/seeds", {"urls": ["http://a.example/1"]})
        assert (again.json["added"], again.json["known"]) == (0, 1)
        assert (yield self.node.pool.stats())["waiting"] == 2

    @defer.inlineCallbacks
    def test_hostile_urls_rejected(self) -> Gen:
        """A lone surrogate, a NUL in the host and credentials in a URL are rejected with a reason (200, the
        good ones added), and no password comes back."""
        raw = (b'{"urls": ["http://a.example/ok", "http://x.example/\\ud800", "http://127.0.0.1\\u0000.evil.com/",'
               b' "http://user:secretpw@a.example/"]}')
        answer = yield self.call("POST", "/api/seeds", raw=raw)
        assert answer.code == 200, answer.body
        assert answer.json["added"] == 1
        assert [r["reason"] for r in answer.json["rejected"]] == ["unparseable", "bad-host", "credentials"]
        assert b"secretpw" not in answer.body
        assert (yield self.node.pool.stats())["waiting"] == 1

    @defer.inlineCallbacks
    def test_seeds_recrawl(self) -> Gen:
        """recrawl: true queues a done URL again."""
        yield self.node.pool.add("http://a.example/1")
        yield self.node.pool.pop(10)
        yield self.node.pool.set_status("http://a.example/1", 200)
        answer = yield self.call("POST", "/api/seeds", {"urls": ["http://a.example/1"], "recrawl": True})
        assert answer.json["added"] == 1

    @defer.inlineCallbacks
    def test_a_big_add_leaves_the_reactor_between_chunks(self) -> Gen:
        """10,000 URLs are checked and added ADD_CHUNK at a time through the cooperator, never in one turn:
        the pool sees 20 adds of 500, and every URL is counted once (a repeat across chunks is known)."""
        sizes: list[int] = []
        addmany = self.node.pool.addmany

        def counting(urls: Any, **kw: Any) -> Any:
            sizes.append(len(urls))
            return addmany(urls, **kw)

        self.node.pool.addmany = counting
        urls = [f"http://h{i % 50}.example/item/{i}" for i in range(MAX_URLS - 1)] + ["http://h0.example/item/0"]
        answer = yield self.call("POST", "/api/urls", {"urls": urls})
        assert answer.code == 200, answer.body
        assert (answer.json["added"], answer.json["known"]) == (MAX_URLS - 1, 0)
        assert sizes == [ADD_CHUNK] * 19 + [ADD_CHUNK - 1]
        assert (yield self.node.pool.stats())["waiting"] == MAX_URLS - 1

    @defer.inlineCallbacks
    def test_urls_list_and_detail(self) -> Gen:
        """POST /api/urls: list URLs into the pool; detail URLs where the crawler sends details."""
        answer = yield self.call("POST", "/api/urls", {"urls": ["http://shop.example/list/1"]})
        assert (answer.json["added"], answer.json["kind"]) == (1, "list")
        answer = yield self.call("POST", "/api/urls", {"urls": ["http://shop.example/item/1"], "kind": "detail"})
        assert (answer.json["added"], answer.json["kind"]) == (1, "detail")
        assert self.node.crawler.details == ["http://shop.example/item/1"]
        assert (yield self.node.pool.stats())["waiting"] == 1

    @defer.inlineCallbacks
    def test_hubs(self) -> Gen:
        """POST /api/hubs: hubs beside the configured ones, with a refresh span."""
        answer = yield self.call("POST", "/api/hubs", {"urls": ["http://a.example/hub", "http://b.example/hub"],
                                                      "refresh_span": 120})
        assert answer.code == 200 and answer.json["added"] == 2
        assert (yield self.node.pool.stats())["hubs"] == 2
        again = yield self.call("POST", "/api/hubs", {"urls": ["http://a.example/hub"]})
        assert (again.json["added"], again.json["known"]) == (0, 1)

    @defer.inlineCallbacks
    def test_pause_and_resume(self) -> Gen:
        """POST /api/pause and /api/resume drive the crawler; the status says so."""
        answer = yield self.call("POST", "/api/pause")
        assert answer.json == {"status": "ok", "paused": True} and self.node.crawler.paused
        status = yield self.call("GET", "/api/status")
        assert status.json["crawler"]["state"] == "paused"
        answer = yield self.call("POST", "/api/resume")
        assert answer.json["paused"] is False and not self.node.crawler.paused

    @defer.inlineCallbacks
    def test_why(self) -> Gen:
        """GET /api/why: state, host, robots.txt, the site rule and a reason, for each kind of URL."""
        yield self.node.pool.add("http://shop.example/list/1")
        waiting = (yield self.call("GET", "/api/why?url=http://shop.example/list/1")).json
        assert (waiting["state"], waiting["host"], waiting["robots"]) == ("waiting", "shop.example", "allowed")
        assert waiting["rule"] == {"kind": "list", "site": "shop"}
        assert waiting["reason"].startswith("waiting for its turn in the queue of shop.example")
        private = (yield self.call("GET", "/api/why?url=http://shop.example/private/x")).json
        assert private["robots"] == "disallowed" and "robots.txt disallows it" in private["reason"]
        assert "no list_urls or detail_urls pattern" in private["reason"]
        offsite = (yield self.call("GET", "/api/why?url=http://else.example/unknown-robots")).json
        assert offsite["robots"] == "unknown" and "no [[sites]] entry allows host else.example" in offsite["reason"]
        detail = (yield self.call("GET", "/api/why?url=http://shop.example/item/9")).json
        assert "would take it as a detail page" in detail["reason"]
        bad = (yield self.call("GET", "/api/why?url=ftp://x/")).json
        assert bad["state"] == "rejected" and bad["reason"].startswith("rejected")
        yield self.call("POST", "/api/pause")
        paused = (yield self.call("GET", "/api/why?url=http://shop.example/list/1")).json
        assert "the crawler is paused" in paused["reason"]

    @defer.inlineCallbacks
    def test_why_done_pending_failed(self) -> Gen:
        """why() of a done, a failed (with its last failure) and a leased URL, and of a leased one added again."""
        pool = self.node.pool
        yield pool.addmany(["http://a.example/done", "http://b.example/gone", "http://c.example/now"])
        yield pool.pop(10)
        yield pool.set_status("http://a.example/done", 200)
        yield pool.set_status("http://b.example/gone", 404)
        assert "crawled already" in (yield self.call("GET", "/api/why?url=http://a.example/done")).json["reason"]
        gone = (yield self.call("GET", "/api/why?url=http://b.example/gone")).json
        assert gone["reason"] == "failed for good after 1 failure(s), the last: http 404."
        assert gone["last_failure"] == {"reason": "http 404", "at": self.clock.seconds(), "failures": 1}
        now = (yield self.call("GET", "/api/why?url=http://c.example/now")).json
        assert now["state"] == "pending" and now["reason"].startswith("being fetched now")
        yield pool.add("http://c.example/now", always=True)
        now = (yield self.call("GET", "/api/why?url=http://c.example/now")).json
        assert now["queued_again"] is True and "queued again when the lease ends" in now["reason"]

    @defer.inlineCallbacks
    def test_hosts(self) -> Gen:
        """GET /api/hosts: a throttled host first, then the most waiting URLs, with in flight, next turn, delay
        and why, failed fetches; ``limit`` 1-200."""
        pool = self.node.pool
        yield pool.addmany(["http://a.example/1", "http://a.example/2", "http://b.example/1", "http://b.example/2",
                            "http://b.example/3", "http://c.example/1"])
        yield pool.pop(10)
        now = self.clock.seconds()
        yield pool.throttle("http://c.example/1", now + 60, 503)
        answer = yield self.call("GET", "/api/hosts")
        assert answer.code == 200, answer.body
        rows = answer.json["hosts"]
        assert [(r["host"], r["waiting"], r["inflight"], r["delay_why"], r["errors"]) for r in rows] == [
            ("c.example", 1, 0, "throttled", 1), ("b.example", 2, 1, None, 0), ("a.example", 1, 1, None, 0)]
        assert (rows[0]["next_in"], rows[0]["throttled_until"]) == (60.0, now + 60)
        assert [r["host"] for r in (yield self.call("GET", "/api/hosts?limit=1")).json["hosts"]] == ["c.example"]
        for bad in ("0", "201", "x"):
            answer = yield self.call("GET", f"/api/hosts?limit={bad}")
            assert answer.code == 400 and "from 1 to 200" in answer.json["message"], answer.json

    @defer.inlineCallbacks
    def test_history_and_rates(self) -> Gen:
        """A sample every 10 s of the clock: pages/min and queue size; the status's rates follow."""
        assert (yield self.call("GET", "/api/history")).json["samples"] == []
        yield self.node.pool.addmany([f"http://a.example/{i}" for i in range(5)])
        for _ in range(6):
            self.node.stats.counts["pages"] += 20
            self.clock.advance(10)
        history = (yield self.call("GET", "/api/history")).json
        assert history["interval"] == 10 and len(history["samples"]) == 6
        last = history["samples"][-1]
        assert (last["queue"], last["pages"]) == (5, 120)
        assert last["pages_per_min"] == 120.0
        rates = (yield self.call("GET", "/api/status")).json["rates"]
        assert rates["pages_per_min_last_minute"] == 120.0 and rates["pages_per_min_last_hour"] == 120.0
        for _ in range(400):  # more than an hour: only the last 360 samples stay
            self.clock.advance(10)
        history = (yield self.call("GET", "/api/history")).json
        assert len(history["samples"]) == 360
        assert history["day_interval"] == 300 and len(history["day"]) == 406 // 30  # a sample every 5 min
        assert history["day"][0]["t"] == history["started"] + 300 and history["day"][0]["pages_per_min"] == 24.0
        assert (yield self.call("GET", "/api/status")).json["rates"]["pages_per_min_last_minute"] == 0.0

    @defer.inlineCallbacks
    def test_errors(self) -> Gen:
        """Every error is JSON with a 4xx code and a clear message."""
        cases = [
            ("POST", "/api/seeds", None, b"not json", 400, "not valid JSON"),
            ("POST", "/api/seeds", [1], None, 400, "JSON object"),
            ("POST", "/api/seeds", None, b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),
            ("POST", "/api/seeds", {}, None, 400, "'urls' is required"),
            ("POST", "/api/seeds", {"urls": "http://a.example/"}, None, 400, "list of URL strings"),
            ("POST", "/api/seeds", {"urls": ["http://a.example/"], "colour": 1}, None, 400, "unknown field 'colour'"),
            ("POST", "/api/seeds", {"urls": ["http://a.example/"], "recrawl": "yes"}, None, 400, "true or false"),
            ("POST", "/api/urls", {"urls": ["http://a.example/"], "kind": "hub"}, None, 400, "'kind' must be"),
            ("POST", "/api/hubs", {"urls": ["http://a.example/"], "refresh_span": 0}, None, 400, "refresh_span"),
            ("POST", "/api/hubs", None, b'{"urls": ["http://a.example/"], "refresh_span": 1e400}', 400, "refresh_span"),
            ("POST", "/api/hubs", None, b'{"urls": ["http://a.example/"], "refresh_span": NaN}', 400, "refresh_span"),
            ("POST", "/api/hubs", {"urls": ["http://a.example/"], "refresh_span": 1e10}, None, 400, "at most"),
            ("POST", "/api/urls", {"urls": ["http://a.example/"] * (MAX_URLS + 1)}, None, 400, f"at most {MAX_URLS}"),
            ("POST", "/api/seeds", None, b'{"urls": ["' + b"x" * (1024 * 1024) + b'"]}', 413, "too large"),
            ("GET", "/api/why", None, None, 400, "'url' query parameter is required"),
            ("GET", "/api/nothing", None, None, 404, "no such endpoint: /api/nothing"),
            ("GET", "/api/seeds", None, None, 405, "GET not allowed on /api/seeds: use POST"),
            ("POST", "/api/status", {}, None, 405, "use GET"),
        ]
        for method, path, body, raw, code, words in cases:
            answer = yield self.call(method, path, body, raw=raw)
            assert answer.code == code, (path, answer.code, answer.body)
            assert answer.json["status"] == "error" and words in answer.json["message"], (path, answer.json)
        wrong = yield self.call("GET", "/api/seeds")
        assert wrong.header("Allow") == "POST"

    @defer.inlineCallbacks
    def test_site_caps_huge_bodies(self) -> Gen:
        """A body over the site's cap (the import's) is refused with 413 before it is read."""
        self.api.site.max_body_size = 1000
        answer = yield self.call("POST", "/api/import", raw=b"x" * 5000)
        assert answer.code == 413 and "the limit is 1000 bytes" in answer.json["message"]

    @defer.inlineCallbacks
    def test_cross_site_requests_refused(self) -> Gen:
        """A POST from another origin, or (without credentials) a Host that is not loopback, is refused."""
        answer = yield self.call("POST", "/api/pause", headers={"Origin": "http://evil.example"})
        assert answer.code == 403 and "cross-origin" in answer.json["message"] and not self.node.crawler.paused
        answer = yield self.call("GET", "/api/status", headers={"Host": "evil.example:6810"})
        assert answer.code == 403 and "loopback host name" in answer.json["message"]
        same = yield self.call("POST", "/api/pause", headers={"Origin": self.base})
        assert same.code == 200

    @defer.inlineCallbacks
    def test_metrics(self) -> Gen:
        """GET /metrics parses with prometheus_client's parser and has the node's figures."""
        yield self.node.pool.addmany(["http://a.example/1", "http://a.example/2"])
        self.node.stats.fetched(200, 500, 0.3)
        self.node.stats.fetched(404, 100, 0.1)
        self.node.stats.fetched(-4, 0, 30.0)
        self.node.stats.incr("sitemap_urls", 7)
        self.node.crawler.queued = 6  # popped ahead, waiting for a free slot
        self.clock.advance(0.3)  # the lag sampler's first timer (due after 0.05 s) runs 0.25 s late
        answer = yield self.call("GET", "/metrics")
        assert answer.code == 200 and answer.header("Content-Type").startswith("text/plain")
        families = {f.name: f for f in text_string_to_metric_families(answer.body.decode())}
        expected = {
            "spiderd_info", "spiderd_uptime_seconds", "spiderd_requests", "spiderd_pages", "spiderd_bytes",
            "spiderd_items", "spiderd_responses", "spiderd_errors", "spiderd_pool_urls", "spiderd_pool_hosts",
            "spiderd_crawler_fetching", "spiderd_crawler_queued", "spiderd_crawler_paused", "spiderd_batches_sent", "spiderd_batches_spooled",
            "spiderd_batches_in_flight", "spiderd_feed_uploads", "spiderd_feed_files_waiting",
            "spiderd_feed_upload_failures", "spiderd_worker_jobs", "spiderd_store_pending_writes",
            "spiderd_fetch_duration_seconds", "spiderd_pages_per_minute", "spiderd_reactor_lag_seconds",
            "spiderd_sitemap_files", "spiderd_sitemap_urls",
        }
        assert expected <= set(families), expected - set(families)

        def value(name: str, sample: str, **labels: str) -> float:
            return next(s.value for s in families[name].samples if s.name == sample and s.labels == labels)

        assert value("spiderd_pool_urls", "spiderd_pool_urls", state="waiting") == 2
        assert value("spiderd_pages", "spiderd_pages_total") == 2
        assert value("spiderd_crawler_queued", "spiderd_crawler_queued") == 6
        assert value("spiderd_bytes", "spiderd_bytes_total") == 600
        assert (value("spiderd_sitemap_urls", "spiderd_sitemap_urls_total"),
                value("spiderd_sitemap_files", "spiderd_sitemap_files_total")) == (7, 0)
        assert value("spiderd_errors", "spiderd_errors_total", kind="timeout") == 1
        assert value("spiderd_responses", "spiderd_responses_total", status="404") == 1
        assert value("spiderd_worker_jobs", "spiderd_worker_jobs", state="pending") == 2
        assert value("spiderd_fetch_duration_seconds", "spiderd_fetch_duration_seconds_count") == 3
        assert value("spiderd_fetch_duration_seconds", "spiderd_fetch_duration_seconds_bucket", le="0.5") == 2
        assert value("spiderd_reactor_lag_seconds", "spiderd_reactor_lag_seconds_count") == 1
        assert value("spiderd_reactor_lag_seconds", "spiderd_reactor_lag_seconds_bucket", le="0.1") == 0
        status = (yield self.call("GET", "/api/status")).json
        assert status["reactor"]["lag"] == {"p50_ms": 250.0, "p99_ms": 250.0, "max_ms": 250.0, "samples": 1}

    @defer.inlineCallbacks
    def test_metrics_known_skipped_of_a_shared_pool(self) -> Gen:
        """A shared pool's stats carry the links its node did not send (known to the pool): a counter in /metrics;
        the embedded pool's have none, and neither has /metrics."""
        answer = yield self.call("GET", "/metrics")
        assert b"spiderd_pool_known_skipped" not in answer.body
        assert "known_skipped" not in (yield self.call("GET", "/api/status")).json["pool"]
        stats = self.node.pool.stats
        self.node.pool.stats = lambda: stats().addCallback(lambda s: {**s, "known_skipped": 12})
        answer = yield self.call("GET", "/metrics")
        samples = {s.name: s.value for f in text_string_to_metric_families(answer.body.decode()) for s in f.samples}
        assert samples["spiderd_pool_known_skipped_total"] == 12
        assert (yield self.call("GET", "/api/status")).json["pool"]["known_skipped"] == 12

    def test_registries_are_per_daemon(self) -> None:
        """Two APIs in one process have registries of their own (nothing in the global registry)."""
        from prometheus_client import REGISTRY

        other = start_api(reactor, make_node(self.clock), self.clock)
        self.addCleanup(other.stopService)
        assert other.metrics.registry is not self.api.metrics.registry
        assert REGISTRY.get_sample_value("spiderd_fetch_duration_seconds_count") is None

    @defer.inlineCallbacks
    def test_export_and_import(self) -> Gen:
        """GET /api/export streams the pool as JSON lines; POST /api/import of them fills another pool."""
        pool = self.node.pool
        yield pool.addmany([f"http://h{i % 7}.example/{i}" for i in range(2500)])
        yield pool.addmany(["http://shop.example/item/1"], detail=True)
        yield pool.add("http://z.example/done")
        yield pool.claim("http://z.example/done")
        yield pool.set_status("http://z.example/done", 200)
        answer = yield self.call("GET", "/api/export")
        assert answer.code == 200 and answer.header("Content-Type").startswith("application/x-ndjson")
        lines = [json.loads(line) for line in answer.body.splitlines()]
        assert len(lines) == 2502
        assert {r["kind"] for r in lines if "url" in r} == {"list", "detail"}
        assert [r["state"] for r in lines if "fp" in r] == ["done"]

        other_node = make_node(self.clock)
        other = start_api(reactor, other_node, self.clock)
        self.addCleanup(other.stopService)
        body = answer.body + b"not json\n{\"url\": \"ftp://x/\", \"state\": \"waiting\"}\n\n"
        sent = yield self.call_at(other, "/api/import", body)
        assert sent.code == 200, sent.body
        result = sent.json
        assert (result["queued"], result["restored"], result["known"], result["rejected_count"]) == (2501, 1, 0, 2)
        assert [r["line"] for r in result["rejected"]] == [2503, 2504]
        stats = yield other_node.pool.stats()
        assert (stats["waiting"], stats["done"]) == (2501, 1)
        assert (yield other_node.pool.why("http://z.example/done"))["state"] == "done"

    @defer.inlineCallbacks
    def call_at(self, api: Any, path: str, body: bytes) -> Gen:
        base, self.base = self.base, api.url.rstrip("/")
        try:
            return (yield self.call("POST", path, raw=body, headers={"Content-Type": "application/x-ndjson"}))
        finally:
            self.base = base

    @defer.inlineCallbacks
    def test_page_is_served(self) -> Gen:
        """GET / is the self-contained status page: no external script, style or font."""
        answer = yield self.call("GET", "/")
        assert answer.code == 200 and answer.header("Content-Type").startswith("text/html")
        page = answer.body.decode()
        assert "/api/status" in page and "/api/history" in page and "<svg" in page
        assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in page and "src=" not in page

    @defer.inlineCallbacks
    def test_requests_logged_at_debug_only(self) -> Gen:
        """A plain request logs nothing above debug; a change (pause) one info line."""
        events: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        yield self.call("GET", "/api/status")
        yield self.call("POST", "/api/pause")
        api = [e for e in events if e.get("log_namespace", "").startswith(("spiderd.ops.web", "spiderd.core.net"))]
        assert {e["log_level"].name for e in api if "GET /api/status" in formatEvent(e)} == {"debug"}
        assert [formatEvent(e) for e in api if e["log_level"].name == "info"] == ["API: the crawl is paused"]


class WorkerRoleApiTests(ApiCase):
    """A node without a pool: the pool's parts and endpoints are absent."""

    worker_role = True

    @defer.inlineCallbacks
    def test_absent_parts_left_out(self) -> Gen:
        """The status has no pool, crawler or batches, but the jobs' fetches; the pool's endpoints answer 404."""
        s = (yield self.call("GET", "/api/status")).json
        assert s["role"] == "worker" and s["worker"]["jobs_pending"] == 2 and s["feeds"]["waiting"] == 2
        assert not {"pool", "crawler", "batches"} & set(s)
        assert (s["pages"], s["errors"], s["statuses"]) == (1, {"timeout": 1}, {"200": 1, "timeout": 1})
        for method, path in [("POST", "/api/seeds"), ("POST", "/api/pause"), ("GET", "/api/why?url=http://a/"),
                             ("GET", "/api/export"), ("GET", "/api/hosts"), ("GET", "/api/failures")]:
            answer = yield self.call(method, path, {"urls": ["http://a.example/"]})
            assert answer.code == 404 and "worker role" in answer.json["message"], answer.json
        metrics = (yield self.call("GET", "/metrics")).body.decode()
        assert "spiderd_worker_jobs" in metrics and "spiderd_pool_urls" not in metrics
        assert 'spiderd_errors_total{kind="timeout"} 1.0' in metrics
        history = (yield self.call("GET", "/api/history")).json
        self.clock.advance(10)
        history = (yield self.call("GET", "/api/history")).json
        assert history["samples"][0]["queue"] == 2  # pending jobs


class CoreOnlyPoolApiTests(ApiCase):
    """A pool whose backend has the core contract only (no IURLPoolAdmin): why, export and import answer 404."""

    def setUp(self) -> None:
        super().setUp()
        self.node.pool = CoreOnlyPool(self.node.pool)

    @defer.inlineCallbacks
    def test_admin_endpoints_not_available(self) -> Gen:
        """why, hosts, export and import say the pool lacks them; status and adding URLs work as ever."""
        for method, path, raw in [("GET", "/api/why?url=http://a.example/", None), ("GET", "/api/export", None),
                                  ("GET", "/api/hosts", None),
                                  ("POST", "/api/import", b'{"url": "http://a.example/", "state": "waiting"}\n')]:
            answer = yield self.call(method, path, raw=raw, headers={"Content-Type": "application/x-ndjson"})
            assert answer.code == 404, (path, answer.code, answer.body)
            assert answer.json["message"] == (f"{path.split('?')[0]}: not available for this pool: its backend has "
                                              "no admin interface (why, hosts, export, import)"), answer.json
        added = yield self.call("POST", "/api/urls", {"urls": ["http://a.example/1"]})
        assert (added.code, added.json["added"]) == (200, 1)
        assert (yield self.call("GET", "/api/status")).json["pool"]["waiting"] == 1


class TokenAuthTests(ApiCase):
    """api.token set: bearer token on every API call; the page itself is open (it asks for the token)."""

    auth = Auth(token="s3cret-token")

    @defer.inlineCallbacks
    def test_token(self) -> Gen:
        """No or a wrong token: 401 with a Bearer challenge; the right one: 200 (metrics too)."""
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic " + _b64("a:b")}):
            answer = yield self.call("GET", "/api/status", headers=headers)
            assert answer.code == 401 and answer.json["status"] == "error", headers
            assert answer.header("WWW-Authenticate") == 'Bearer realm="spiderd"'
        good = {"Authorization": "Bearer s3cret-token"}
        assert (yield self.call("GET", "/api/status", headers=good)).code == 200
        assert (yield self.call("GET", "/metrics", headers=good)).code == 200
        assert (yield self.call("GET", "/metrics")).code == 401
        assert (yield self.call("GET", "/api/nothing")).code == 401  # no route is told to strangers
        assert (yield self.call("GET", "/")).code == 200
        assert (yield self.call("GET", "/api/status?token=s3cret-token")).code == 401  # ?token= is for the page only

    @defer.inlineCallbacks
    def test_token_never_logged(self) -> Gen:
        """Neither the token nor the page's ?token= shows in any log event."""
        events: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        yield self.call("GET", "/?token=s3cret-token")
        yield self.call("GET", "/api/status", headers={"Authorization": "Bearer s3cret-token"})
        yield self.call("GET", "/api/status", headers={"Authorization": "Bearer s3cret-wrong"})
        text = "\n".join(formatEvent(e) + repr(e) for e in events)
        assert "s3cret" not in text


class BasicAuthTests(ApiCase):
    """api.username and api.password (and a token): the page asks the browser to log in."""

    auth = Auth(token="tok", username="ops", password="pa:ss")

    @defer.inlineCallbacks
    def test_basic(self) -> Gen:
        """Basic credentials or the token work; the page needs one of them (or ?token=)."""
        basic = {"Authorization": "Basic " + _b64("ops:pa:ss")}
        assert (yield self.call("GET", "/api/status", headers=basic)).code == 200
        assert (yield self.call("GET", "/api/status", headers={"Authorization": "Bearer tok"})).code == 200
        wrong = yield self.call("GET", "/api/status", headers={"Authorization": "Basic " + _b64("ops:nope")})
        assert wrong.code == 401 and wrong.header("WWW-Authenticate").startswith('Basic realm="spiderd"')
        page = yield self.call("GET", "/")
        assert page.code == 401 and page.header("WWW-Authenticate").startswith("Basic")
        assert (yield self.call("GET", "/", headers=basic)).code == 200
        assert (yield self.call("GET", "/?token=tok")).code == 200
        assert (yield self.call("GET", "/?token=bad")).code == 401
        bearer_try = yield self.call("GET", "/api/status", headers={"Authorization": "Bearer bad"})
        assert bearer_try.header("WWW-Authenticate") == 'Bearer realm="spiderd"'  # no login dialog for the page

    @defer.inlineCallbacks
    def test_other_hosts_allowed_with_credentials(self) -> Gen:
        """With credentials the Host check is off (the API may be reached by name)."""
        basic = {"Authorization": "Basic " + _b64("ops:pa:ss"), "Host": "crawler1.example:6810"}
        assert (yield self.call("GET", "/api/status", headers=basic)).code == 200


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
