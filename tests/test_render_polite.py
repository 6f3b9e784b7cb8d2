"""A rendered page's sub-requests keep spiderd's guarantees (spiderd.engine.subrequests), on real Chromium: they go to
the site's own hosts only (or its render_hosts), obey robots.txt, are paced by per_host_delay after their page, and
a throttling answer blocks the host and has the page fetched again; images are not loaded."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.trial import unittest
from twisted.web import server

from spiderd.config import settings as cfg

from . import services
from .shop import Shop, shop_site
from .test_crawl import node_settings, run_crawl, run_with_worker
from .test_render import read_items


class Clocked(Shop):
    """The shop, noting when each request came (reactor time) and from which kind of request."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.arrivals: list[tuple[float, str]] = []

    def render_GET(self, request: Any) -> bytes | int:
        self.arrivals.append((reactor.seconds(), request.path.decode()))
        return super().render_GET(request)


class SubRequestTests(unittest.TestCase):
    """Sub-requests under the site's hosts, robots.txt, per_host_delay and throttles."""

    timeout = 120

    def setUp(self) -> None:
        services.need_playwright()
        self.shop = Clocked(lists=1, per_list=3)
        self.port = reactor.listenTCP(0, server.Site(self.shop), interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.root = f"http://127.0.0.1:{self.port.getHost().port}/"
        self.other = Shop()
        self.other_port = reactor.listenTCP(0, server.Site(self.other), interface="127.0.0.2")
        self.addCleanup(self.other_port.stopListening)
        self.data = Path(tempfile.mkdtemp(prefix="spiderd-subs-"))
        self.addCleanup(shutil.rmtree, self.data, True)

    def settings(self, fetch: dict[str, Any] | None = None, **site: Any) -> cfg.Settings:
        return node_settings(str(self.data), self.root, sites=[shop_site("always", **site)],
                             render={"browsers": 1, "pages_per_browser": 2, "idle_time": 0.2},
                             fetch={"robots": True, **(fetch or {})}, batch={"targets": []})

    def items(self) -> list[tuple[str, Any, Any]]:
        return sorted((i["url"][len(self.root) - 1:], i.get("title"), i.get("price"))
                      for i in read_items(self.data / "items"))

    def offsite_detail(self, render_hosts: list[str]) -> cfg.Settings:
        other = f"http://127.0.0.2:{self.other_port.getHost().port}"

        def detail(request: Any) -> bytes:
            request.setHeader(b"content-type", b"text/html")
            return (f'<html><body><h1 id="title">here</h1><span id="price"></span><script>'
                    f'fetch("{other}/api/p/7.json").then(r => r.json()).then(p => '
                    f'{{ document.getElementById("price").textContent = p.price; }});</script></body></html>').encode()

        self.shop.pages["/p/1"] = detail
        return self.settings(render_hosts=render_hosts)

    @defer.inlineCallbacks
    def test_offsite_sub_request_refused(self) -> Any:
        """A script's fetch to a host that is not the site's is refused: that host sees no request, the field it
        would fill stays empty."""
        yield run_crawl(self.offsite_detail([]))
        self.assertEqual(sum(self.other.requests.values()), 0)
        self.assertIn(("/p/1", "here", None), self.items())

    @defer.inlineCallbacks
    def test_render_hosts_let_it_through(self) -> Any:
        """The same fetch to a host the site names in render_hosts goes, and fills its field."""
        yield run_crawl(self.offsite_detail(["127.0.0.2"]))
        self.assertEqual(self.other.requests["/api/p/7.json"], 1)
        self.assertIn(("/p/1", "here", "7.99"), self.items())

    @defer.inlineCallbacks
    def test_robots_disallow_on_the_xhr_path(self) -> Any:
        """robots.txt disallows /api/: no XHR reaches it, the pages are rendered without the fields it gives."""
        self.shop.robots = b"User-agent: *\nDisallow: /api/\n"
        yield run_crawl(self.settings())
        self.assertEqual([p for p in self.shop.requests if p.startswith("/api/")], [])
        self.assertEqual(self.items(), [(f"/p/{n}", None, None) for n in (1, 2, 3)])
        self.assertEqual(self.shop.requests["/static/detail.js"], 3)

    def assert_spaced(self, delay: float, since: str = "/") -> None:
        """Every request to the shop (but robots.txt), from the first whose path starts with ``since``, came at
        least ``delay`` (less a margin for the clock's grain) after the one before it, whatever its kind."""
        arrivals = [(at, path) for at, path in self.shop.arrivals if path != "/robots.txt"]
        first = next(n for n, (_, path) in enumerate(arrivals) if path.startswith(since))
        arrivals = arrivals[first:]
        for (before, _), (at, path) in zip(arrivals, arrivals[1:]):
            self.assertGreaterEqual(at - before, delay - 0.05, (path, arrivals))

    @defer.inlineCallbacks
    def test_per_host_delay_counts_pages_and_sub_requests_alike(self) -> Any:
        """The crawler, two requests at a time per host, per_host_delay 0.5: the pages it takes from its pool and
        their sub-requests share the host's one politeness, so no request of either kind comes sooner than 0.5 s
        after the one before it (a page is not taken while its host's delay runs from a sub-request)."""
        yield run_crawl(self.settings({"per_host_delay": 0.5, "per_host_concurrency": 2}))
        self.assertEqual(len(self.items()), 3)
        self.assertEqual(sum(1 for _, path in self.shop.arrivals if path.startswith("/api/")), 3)
        self.assert_spaced(0.5)

    @defer.inlineCallbacks
    def test_per_host_delay_in_the_worker(self) -> Any:
        """The same in the worker's jobs (detail pages sent in batches to the node's own worker): from its first
        page on, its pages and their sub-requests come per_host_delay apart."""
        settings = node_settings(str(self.data), self.root, sites=[shop_site("always")],
                                 render={"browsers": 1, "pages_per_browser": 2, "idle_time": 0.2},
                                 fetch={"robots": True, "per_host_delay": 0.5, "per_host_concurrency": 2},
                                 batch={"targets": ["local"], "size": 3},
                                 worker={"feed_template": f"file://{self.data}/shipped/%(batch)s_%(name)s_%(time)s.jl"})
        yield run_with_worker(settings)
        self.assertEqual(len(read_items(self.data / "shipped")), 3)
        self.assert_spaced(0.5, since="/p/")

    @defer.inlineCallbacks
    def test_per_host_delay(self) -> Any:
        """With per_host_delay 0.5 and one request at a time per host, every sub-request (scripts, XHRs) comes at
        least the delay after the request before it (its page's main document or another sub-request)."""
        yield run_crawl(self.settings({"per_host_delay": 0.5, "per_host_concurrency": 1}))
        self.assertEqual(len(self.items()), 3)
        subs = 0
        for (before, _), (at, path) in zip(self.shop.arrivals, self.shop.arrivals[1:]):
            if path.startswith(("/static/", "/api/")):
                subs += 1
                self.assertGreaterEqual(at - before, 0.45, (path, self.shop.arrivals))
        self.assertEqual(subs, 7)  # list.js, then detail.js and the XHR of each detail page

    @defer.inlineCallbacks
    def test_throttled_sub_request_blocks_the_host(self) -> Any:
        """An XHR answered 429 (Retry-After: 1): the page is fetched again once the host's block ends, and makes
        its item with its fields; nothing reaches the host during the block."""
        busy: list[float] = []

        def api(request: Any) -> bytes:
            if not busy:
                busy.append(reactor.seconds())
                request.setResponseCode(429)
                request.setHeader(b"retry-after", b"1")
                return b"busy"
            request.setHeader(b"content-type", b"application/json")
            return b'{"title": "Product 2", "price": "2.99"}'

        self.shop.pages["/api/p/2.json"] = api
        crawler, _ = yield run_crawl(self.settings({"per_host_concurrency": 1}))
        self.assertEqual(self.items(), [(f"/p/{n}", f"Product {n}", f"{n}.99") for n in (1, 2, 3)])
        self.assertEqual(crawler.stats.errors["throttled"], 1)
        self.assertEqual(self.shop.requests["/p/2"], 2)
        after = [at for at, _ in self.shop.arrivals if at > busy[0]]
        self.assertGreaterEqual(min(after) - busy[0], 0.95)
