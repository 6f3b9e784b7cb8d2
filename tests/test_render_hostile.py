"""Hostile pages and a dying browser under the render pool (spiderd.engine.render), on real Chromium: each page is cut
or failed at its bound with a reason while the node keeps answering /api/status, and a browser SIGKILLed
mid-page costs no page and duplicates none."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.defer import Deferred
from twisted.logger import globalLogPublisher
from twisted.trial import unittest
from twisted.web import server
from twisted.web.client import Agent, readBody

from spiderd import tap
from spiderd.config import settings as cfg
from spiderd.core import proctree

from . import services
from .shop import Shop, shop_site
from .test_crawl import node_settings
from .test_render import read_items

HOSTILE = {
    "/p/101": b"<html><body><h1>never</h1><script>fetch('/api/hang.json');</script></body></html>",
    "/p/102": b"<html><body><h1>loop</h1><script>while (true) {}</script></body></html>",
    "/p/103": b"<html><body><h1>popups</h1><a id=d href='/file.bin' download>file</a><script>"
              b"window.open('/p/1'); window.open('/p/2', '_blank', 'noopener'); alert('hi'); confirm('sure?');"
              b"document.getElementById('d').click(); setTimeout(function () { location.href = '/file.bin'; }, 10);"
              b"</script></body></html>",
    "/p/104": b"<html><body><h1>flood</h1><script>for (var i = 0; i < 10000; i++) { fetch('/api/x' + i + '.json'); }"
              b"</script></body></html>",
}


def html(body: bytes) -> Any:
    def page(request: Any) -> bytes:
        request.setHeader(b"content-type", b"text/html")
        return body
    return page


def browser_of(pid: int) -> int | None:
    """The browser's own process (not a renderer, zygote or helper) among the render child ``pid``'s."""
    for child in proctree.descendants(pid):
        command = proctree.command_of(child)
        if command and "chrom" in os.path.basename(command[0]) and not any(a.startswith("--type=") for a in command):
            return child
    return None


class HostileTests(unittest.TestCase):
    """Each hostile page ends at its bound; the node stays responsive; a killed browser loses nothing."""

    timeout = 180

    def setUp(self) -> None:
        services.need_playwright()
        self.shop = Shop(lists=1, per_list=3)
        self.port = reactor.listenTCP(0, server.Site(self.shop), interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.root = f"http://127.0.0.1:{self.port.getHost().port}/"
        self.data = Path(tempfile.mkdtemp(prefix="spiderd-hostile-"))
        self.addCleanup(shutil.rmtree, self.data, True)

    def settings(self, **render: Any) -> cfg.Settings:
        knobs = {"browsers": 1, "pages_per_browser": 3, "idle_time": 0.2, "navigation_timeout": 4,
                 "settle_timeout": 3, "max_subrequests": 25, **render}
        return node_settings(str(self.data), self.root, sites=[shop_site("always")], render=knobs,
                             fetch={"robots": False}, batch={"targets": []})

    @defer.inlineCallbacks
    def crawl(self, settings: cfg.Settings, paths: Any = HOSTILE) -> Any:
        """Crawl to the end; fires with the crawler and the reason each of ``paths`` failed ("": it did not)."""
        cfg.check_data_dir(settings)
        self.top = top = tap.build(settings, reactor)
        crawler = top.getServiceNamed("crawler")
        top.startService()
        reasons = {}
        try:
            yield crawler.finished
            for path in paths:
                why = yield crawler.pool.why(self.root + path.lstrip("/"))
                reasons[path] = (why.get("last_failure") or {}).get("reason", "")
        finally:
            yield top.stopService()
        return crawler, reasons

    @defer.inlineCallbacks
    def test_hostile_pages_end_at_their_bounds(self) -> Any:
        """A page that never settles and one that loops forever fail with their reasons; one that opens pop-ups,
        dialogs and a download, and one that fires 10,000 XHRs, are rendered (cut at max_subrequests) and make
        their items; /api/status answers while the never-settling page renders."""
        for path, body in HOSTILE.items():
            self.shop.pages[path] = html(body)
        links = "".join(f'<a href="{p}">x</a>' for p in [*HOSTILE, "/p/1"])
        self.shop.pages["/"] = html(f"<html><body>{links}</body></html>".encode())
        answered: list[Deferred[Any]] = []

        def hang(request: Any) -> int:
            answered.append(_status(self.top.getServiceNamed("api").address[1]))  # asked while the page renders
            return server.NOT_DONE_YET  # never answered

        self.shop.pages["/api/hang.json"] = hang
        notes: list[str] = []

        def observe(event: dict[str, Any]) -> None:
            if "note" in event:
                notes.append(f"{event['url'][len(self.root) - 1:]}: {event['note']}")

        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)
        _, reasons = yield self.crawl(self.settings())
        items = {item["url"][len(self.root) - 1:]: item for item in read_items(self.data / "items")}
        self.assertEqual(sorted(items), ["/p/1", "/p/103", "/p/104"])
        self.assertIn("did not settle within 3 s", reasons["/p/101"])
        self.assertIn("Timeout", reasons["/p/102"])
        flood = sum(n for p, n in self.shop.requests.items() if p.startswith("/api/x"))
        self.assertLessEqual(flood, 25)
        self.assertEqual((self.shop.requests["/file.bin"], self.shop.requests["/p/2"]), (0, 0))
        self.assertIn("/p/104: cut at 25 sub-requests (9975 more refused)", notes)
        self.assertTrue({"/p/103: pop-up refused", "/p/103: alert dialog dismissed"} <= set(notes), notes)
        status = yield answered[0]
        self.assertIn("crawler", status)

    @defer.inlineCallbacks
    def test_browser_killed_mid_page(self) -> Any:
        """The browser SIGKILLed while it renders a detail page: the page is rendered again by a new browser, and
        every item is written once."""
        killed: list[int] = []

        def api(request: Any) -> Any:
            if not killed:
                render = self.top.getServiceNamed("render")
                browser = browser_of(render.pids()[0])
                assert browser is not None, "no browser process found"
                killed.append(browser)
                os.kill(browser, signal.SIGKILL)
            request.setHeader(b"content-type", b"application/json")
            return json.dumps({"title": "Product 2", "price": "2.99"}).encode()

        self.shop.pages["/api/p/2.json"] = api
        crawler, reasons = yield self.crawl(self.settings(), ["/p/1", "/p/2", "/p/3"])
        items = read_items(self.data / "items")
        self.assertEqual(reasons, {"/p/1": "", "/p/2": "", "/p/3": ""})
        self.assertEqual(len(killed), 1)
        self.assertEqual(sorted((i["url"][len(self.root) - 1:], i["title"]) for i in items),
                         [("/p/1", "Product 1"), ("/p/2", "Product 2"), ("/p/3", "Product 3")])
        render = self.top.getServiceNamed("render")
        self.assertGreaterEqual(render.counts["again"], 1)
        self.assertEqual(crawler.stats.counts["items"], 3)


@defer.inlineCallbacks
def _status(port: int) -> Any:
    response = yield Agent(reactor).request(b"GET", f"http://127.0.0.1:{port}/api/status".encode())
    body = yield readBody(response)
    return json.loads(body)
