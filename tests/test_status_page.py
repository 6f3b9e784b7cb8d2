"""The status page in a real headless Chromium: it shows the API's figures and follows them as they change."""

from __future__ import annotations

import json
import shutil
import tempfile
from typing import Any, Callable, Generator

from treq import content
from twisted.internet import defer, reactor, threads
from twisted.internet.task import Clock
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers

from spiderd.ops.web import Auth

from . import services
from .webnode import make_node, start_api

Gen = Generator[Any, Any, Any]
TOKEN = "page-token"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1280,1000")


def start_browser(profile: str) -> Any:
    """Debian's Chromium through Debian's chromedriver (never a downloaded browser or driver)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = services.CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=services.CHROMEDRIVER), options=options)


class StatusPageTests(TestCase):
    """The page polls /api/status and /api/history; the browser runs in a thread, the API in this reactor."""

    timeout = 120

    def setUp(self) -> None:
        services.need_chromium()
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.node = make_node(self.clock)
        self.api = start_api(reactor, self.node, self.clock, Auth(token=TOKEN))
        self.addCleanup(self.api.stopService)
        profile = tempfile.mkdtemp(prefix="spiderd-chromium-")
        self.addCleanup(shutil.rmtree, profile, True)
        self.browser: Any = None
        self.profile = profile

    @defer.inlineCallbacks
    def open_browser(self) -> Gen:
        self.browser = yield threads.deferToThread(start_browser, self.profile)
        self.addCleanup(threads.deferToThread, self.browser.quit)

    def in_browser(self, function: Callable[..., Any], *args: Any) -> defer.Deferred[Any]:
        return threads.deferToThread(function, *args)

    def text_of(self, key: str) -> str:
        return self.browser.find_element("css selector", f'[data-key="{key}"]').text

    def wait(self, predicate: Callable[[], Any], what: str) -> defer.Deferred[Any]:
        """Poll the page (bounded): the browser's rendering, not a timer of ours."""
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.support.ui import WebDriverWait

        waiter = WebDriverWait(self.browser, 30, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,))
        return self.in_browser(waiter.until, lambda _: predicate(), what)

    def wait_text(self, key: str, expected: str) -> defer.Deferred[Any]:
        return self.wait(lambda: self.text_of(key) == expected,
                         f"{key} to show {expected!r} (it shows {self.text_of(key)!r})")

    @defer.inlineCallbacks
    def api_status(self) -> Gen:
        agent = Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False))
        headers = Headers({b"Authorization": [f"Bearer {TOKEN}".encode()]})
        response = yield agent.request(b"GET", (self.api.url + "api/status").encode(), headers)
        return json.loads((yield content(response)))

    @defer.inlineCallbacks
    def test_page_shows_and_follows_the_figures(self) -> Gen:
        """Without a token the page asks for one; then it shows the API's figures, the chart, and their changes."""
        pool, stats = self.node.pool, self.node.stats
        yield pool.addmany([f"http://a.example/{i}" for i in range(3)] + ["http://b.example/1"])
        stats.fetched(200, 2000, 0.5)
        stats.fetched(-4, 0, 30.0)
        yield self.open_browser()
        yield self.in_browser(self.browser.get, self.api.url)
        login = yield self.in_browser(self.browser.find_element, "id", "login")
        yield self.wait(login.is_displayed, "the token prompt")
        field = yield self.in_browser(self.browser.find_element, "id", "token")
        yield self.in_browser(field.send_keys, TOKEN + "\n")

        status = yield self.api_status()
        yield self.wait_text("pool.waiting", str(status["pool"]["waiting"]))
        assert status["pool"]["waiting"] == 4
        figures = {"pool.pending": "0", "pool.done": "0", "pages": "1", "crawler.state": "running",
                   "crawler.fetching": "3", "batches.spooled": "2", "feeds.shipped": "7", "worker.jobs_pending": "2",
                   "store.pending": "4", "role": "all", "version": status["version"]}
        for key, shown in figures.items():
            assert self.text_of(key) == shown, (key, self.text_of(key))
        assert self.browser.find_element("id", "errors").text == "timeout 1"
        assert self.browser.find_element("id", "login").is_displayed() is False
        chart = self.browser.find_element("id", "chart")
        assert "collecting samples" in chart.text

        yield pool.addmany([f"http://c.example/{i}" for i in range(1230)])
        for _ in range(3):  # three samples of the history, 10 s apart on the sampler's clock
            stats.counts["pages"] += 400
            self.clock.advance(10)
        self.node.crawler.pause()
        yield self.wait_text("pool.waiting", "1,234")
        yield self.wait_text("pages", "1,201")
        yield self.wait_text("crawler.state", "paused")
        status = yield self.api_status()
        assert self.text_of("rates.pages_per_min_last_minute") == f"{status['rates']['pages_per_min_last_minute']:,.1f}"
        yield self.wait(lambda: self.browser.find_element("id", "chart").get_attribute("data-samples") == "3",
                        "three samples in the chart")
        points = self.browser.find_element("id", "rate-line").get_attribute("points").split()
        assert len(points) == 3 and len(self.browser.find_elements("id", "queue-line")) == 1
        assert self.browser.find_element("id", "resume").is_displayed()
        # The axis zooms to the data: 30 s of it fill a minute's axis (a fixed hour drew them in 4 px at the edge).
        assert self.browser.find_element("id", "chart").get_attribute("data-span") == "60"
        xs = [float(p.split(",")[0]) for p in points]
        assert max(xs) - min(xs) > 200, xs
        day = yield self.in_browser(self.browser.find_element, "id", "range-day")
        yield self.in_browser(day.click)
        yield self.wait(lambda: self.browser.find_element("id", "chart-title").text == "Last 24 hours", "the 24 h view")
        yield self.wait(lambda: self.browser.find_element("id", "chart").get_attribute("data-samples") == "0",
                        "no 5-minute sample yet")

    @defer.inlineCallbacks
    def test_no_horizontal_scroll_on_a_laptop_or_a_phone(self) -> Gen:
        """At 1280x900 and 390x844 the page fits its width (a long page store path wraps), every panel and table
        is there (jobs, batches per target, feed files, hosts, recent failures) and the chart is drawn; a
        screenshot of each goes to a temporary directory."""
        self.node.store.where = "mysql://crawler@db-shard-01.internal.example:3306/" + "very_long_database_name_" * 4
        pool = self.node.pool
        long_host = "a-rather-long-host-name-of-a-content-delivery-network.example"
        yield pool.addmany(["http://gone.example/" + "long-path-segment/" * 12 + "page.html", "http://busy.example/1"]
                           + [f"http://{long_host}/{i}" for i in range(3)])
        yield pool.pop(10)
        yield pool.set_status("http://gone.example/" + "long-path-segment/" * 12 + "page.html", 404)
        yield pool.throttle("http://busy.example/1", self.clock.seconds() + 120, 429)
        self.node.batcher.values["targets"] = [
            {"target": "http://scrapyd-worker-07.batch.internal.example:6800", "waiting": 4, "in_flight": 1, "sent": 12,
             "urls_sent": 12000, "failures": 3, "last_error": "Connection was refused by other side: 111: Connection "
             "refused.", "last_accepted": None},
            {"target": "http://127.0.0.1:6800", "waiting": 0, "in_flight": 0, "sent": 30, "urls_sent": 30000,
             "failures": 0, "last_error": "", "last_accepted": self.clock.seconds()}]
        self.node.shipper.values["files"] = [
            {"name": "1712345678-batch-000123_demo-shop_2024-04-05T10-11-12.jl", "target":
             "ftp://feeds:***@analytics-ingest.internal.example/incoming/very/deep/directory/1.jl", "state": "refused",
             "attempts": 0, "since": self.clock.seconds(), "next_attempt_in": None,
             "error": "BadFeedError: line 2: not a JSON object (Infinity or NaN where a number belongs)"},
            {"name": "2.jl", "target": "file:///srv/feeds/2.jl", "state": "retrying", "attempts": 5,
             "since": self.clock.seconds(), "next_attempt_in": 16.0, "error": "OSError: [Errno 28] No space left"}]
        job = {"id": "0f1e2d3c4b5a69788796a5b4c3d2e1f0", "spider": "demo-shop", "batch": "123", "state": "finished",
               "urls": 1000, "done": 1000, "items": 987, "failed": 13, "start_time": None, "end_time": None,
               "error": None, "feed": {"state": "spooled", "uri": "ftp://feeds:***@analytics-ingest.internal.example/"
                                                              "incoming/123_demo-shop_2024-04-05T10-11-12.jl"}}
        self.node.worker.jobs_table = lambda limit=50: [job]
        for _ in range(3):
            self.node.stats.counts["pages"] += 100
            self.clock.advance(10)
        shots = tempfile.mkdtemp(prefix="spiderd-screens-")
        yield self.open_browser()
        for width, height in ((1280, 900), (390, 844)):
            yield self.in_browser(self.browser.set_window_size, width, height)
            yield self.in_browser(self.browser.get, f"{self.api.url}?token={TOKEN}")
            yield self.wait(lambda: self.browser.find_element("id", "chart").get_attribute("data-samples") == "3",
                            "the chart drawn")
            yield self.wait(lambda: "http 404" in self.browser.find_element("id", "failures").text,
                            "the recent failures table")
            tables = {"hosts": "throttled (429/503) until", "targets": "scrapyd-worker-07", "feedfiles": "refused",
                      "jobs": "spooled → ftp://"}
            for table, shown in tables.items():
                yield self.wait(lambda t=table, s=shown: s in self.browser.find_element("id", t).text, f"the {table} table")
            hosts = self.browser.find_element("id", "hosts").find_elements("css selector", "tr")
            assert [r.find_elements("css selector", "td")[0].text for r in hosts[1:]] == ["busy.example", long_host]
            assert "No space left" in self.browser.find_element("id", "feedfiles").text
            scroll = self.browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
            assert scroll[0] <= scroll[1], (width, scroll)
            panels = self.browser.find_elements("css selector", "section.panel, div.panel")
            assert len(panels) >= 5 and all(p.size["width"] <= scroll[1] for p in panels)
            path = f"{shots}/status-{width}x{height}.png"
            yield self.in_browser(self.browser.save_screenshot, path)
            with open(path, "rb") as f:
                assert f.read(8) == b"\x89PNG\r\n\x1a\n"

    @defer.inlineCallbacks
    def test_token_in_the_address(self) -> Gen:
        """/?token= works for the page, and the token leaves the address bar at once."""
        yield self.open_browser()
        yield self.in_browser(self.browser.get, f"{self.api.url}?token={TOKEN}")
        yield self.wait_text("role", "all")
        assert self.browser.current_url == self.api.url
        assert self.browser.find_element("id", "banner").is_displayed() is False
