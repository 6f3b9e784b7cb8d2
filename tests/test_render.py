"""Pages built by JavaScript, rendered in headless Chromium (spiderd.engine.render) through both roles: a shop whose
list pages write their links by script and whose detail pages fill their fields from an XHR, on 127.0.0.1."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.logger import globalLogPublisher
from twisted.trial import unittest
from twisted.web import server
from twisted.web.client import Agent, readBody

from spiderd import tap
from spiderd.config import settings as cfg

from . import services
from .shop import Shop, shop_site
from .test_crawl import node_settings, run_crawl, run_with_worker

RENDER = {"browsers": 1, "pages_per_browser": 3, "idle_time": 0.2}
WAIT = "#list a, #ready, #price:not(:empty)"  # a list page's links, /p/1's last element, a filled price


def read_items(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for p in sorted(folder.glob("*.jl")) for line in p.open()]


class ShopTests(unittest.TestCase):
    """The shop crawled without rendering, and rendered in both roles."""

    timeout = 120

    def setUp(self) -> None:
        services.need_playwright()
        self.shop = Shop(lists=1, per_list=5)
        self.port = reactor.listenTCP(0, server.Site(self.shop), interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.root = f"http://127.0.0.1:{self.port.getHost().port}/"
        self.data = Path(tempfile.mkdtemp(prefix="spiderd-render-"))
        self.addCleanup(shutil.rmtree, self.data, True)

    def settings(self, render: str = "always", targets: list[str] | None = None, **sections: Any) -> cfg.Settings:
        feeds = self.data / "shipped"
        sections.setdefault("render", RENDER)
        return node_settings(str(self.data), self.root, sites=[shop_site(render)],
                             batch={"targets": targets or [], "size": 3},
                             worker={"feed_template": f"file://{feeds}/%(batch)s_%(name)s_%(time)s.jl"}, **sections)

    def expected(self) -> list[tuple[str, str, str]]:
        return sorted((f"{self.root}p/{n}", f"Product {n}", f"{n}.99") for n in range(1, self.shop.details + 1))

    @staticmethod
    def fields(items: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        return sorted((item["url"], item["title"], item["price"]) for item in items)

    @defer.inlineCallbacks
    def test_without_rendering_no_item_and_a_hint(self) -> Any:
        """A site that does not render finds no detail link on the scripted list page: no item, and a logged hint
        that names [[sites]] render."""
        said: list[str] = []

        def observe(event: dict[str, Any]) -> None:
            said.append(str(event.get("log_format", "")))

        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)
        yield run_crawl(self.settings("never"))
        self.assertEqual(read_items(self.data / "items"), [])
        self.assertTrue(any('render = "auto"' in s and "JavaScript" in s for s in said), said[-20:])

    @defer.inlineCallbacks
    def test_always_renders_every_item_in_the_crawler(self) -> Any:
        """render = "always", the crawler fetching its detail pages itself: every item with the fields the XHR
        filled, marked rendered; no image was loaded."""
        yield run_crawl(self.settings())
        items = read_items(self.data / "items")
        self.assertEqual(self.fields(items), self.expected())
        self.assertTrue(all(item["rendered"] is True for item in items))
        self.assertEqual([p for p in self.shop.requests if p.startswith("/img/")], [])

    @defer.inlineCallbacks
    def test_always_renders_every_item_in_the_worker(self) -> Any:
        """render = "always", detail pages sent in batches to the node's own worker: every item, right fields."""
        yield run_with_worker(self.settings(targets=["local"]))
        items = read_items(self.data / "shipped")
        self.assertEqual(self.fields(items), self.expected())
        self.assertTrue(all(item["rendered"] is True for item in items))

    @defer.inlineCallbacks
    def test_contexts_replaced_as_pages_go(self) -> Any:
        """pages_per_context 2: the browser's context is replaced every two pages or so (its old one closed after
        its last page), and every page renders right across the changes."""
        # render_wait: the test is about contexts, so a page is done once its fields are in, not after idle_time,
        # which a loaded machine can let pass before the XHR is sent
        settings = node_settings(str(self.data), self.root, sites=[shop_site("always", render_wait=WAIT)],
                                 batch={"targets": []}, render={**RENDER, "pages_per_context": 2})
        top = tap.build(settings, reactor)
        crawler, pool = top.getServiceNamed("crawler"), top.getServiceNamed("render")
        top.startService()
        try:
            yield crawler.finished
        finally:
            yield top.stopService()
        self.assertEqual(self.fields(read_items(self.data / "items")), self.expected())
        self.assertGreaterEqual(pool.status()["contexts_replaced"], 2)
        self.assertEqual(pool.status()["failed"], 0)

    @defer.inlineCallbacks
    def test_warc_keeps_the_response_and_the_rendered_dom(self) -> Any:
        """Each rendered detail page: a response record with the body as fetched (no product in it) and a
        conversion record of the rendered DOM (its title and price) that refers to that response."""
        from .test_warc import records

        yield run_crawl(self.settings(items={"format": "both"}))
        found = [r for p in (self.data / "items").glob("*.warc.gz") for r in records(p)]
        responses = {r["warc"]["WARC-Record-ID"]: r for r in found if r["type"] == "response"}
        conversions = [r for r in found if r["type"] == "conversion"]
        self.assertEqual(len(conversions), 1 + self.shop.details)  # the list page and every detail page
        for record in conversions:
            fetched = responses[record["warc"]["WARC-Refers-To"]]
            self.assertEqual(fetched["warc"]["WARC-Target-URI"], record["warc"]["WARC-Target-URI"])
            self.assertEqual(record["warc"]["Content-Type"], "text/html; charset=utf-8")
            path = record["warc"]["WARC-Target-URI"][len(self.root) - 1:]
            if path.startswith("/p/"):
                n = path.rsplit("/", 1)[1].encode()
                self.assertNotIn(b"Product " + n, fetched["content"])
                self.assertIn(b"Product " + n + b"</h1>", record["content"])
                self.assertIn(n + b".99</span>", record["content"])
    @defer.inlineCallbacks
    def test_render_wait_selector(self) -> Any:
        """A detail page that fills its fields by a timer, with no request (network idle comes first): with
        render_wait naming the element it adds last (or, on the others, what their scripts fill), each page is
        taken once that is there, fields filled."""
        def late(request: Any) -> bytes:
            request.setHeader(b"content-type", b"text/html")
            return (b'<html><body><h1 id="title"></h1><span id="price"></span><script>setTimeout(function () {'
                    b'document.getElementById("title").textContent = "Late"; document.getElementById("price")'
                    b'.textContent = "9.99"; document.body.appendChild(document.createElement("i")).id = "ready";'
                    b'}, 800);</script></body></html>')

        self.shop.pages["/p/1"] = late
        settings = node_settings(str(self.data), self.root, sites=[shop_site("always", render_wait=WAIT)],
                                 render=RENDER, batch={"targets": []})
        yield run_crawl(settings)
        items = self.fields(read_items(self.data / "items"))
        self.assertEqual(items, [(f"{self.root}p/1", "Late", "9.99"), *self.expected()[1:]])


class StartTests(unittest.TestCase):
    """A site that asks to render, on a machine that cannot: the start fails with one line naming the package."""

    def raw(self, **render: Any) -> dict[str, Any]:
        return {"sites": [shop_site("auto", allowed_hosts=["shop.example"])], "render": render}

    def test_no_browser(self) -> None:
        """No browser at render.browser: one line naming Debian's chromium package and the key."""
        with self.assertRaises(cfg.ConfigError) as caught:
            cfg.from_dict(self.raw(browser="/nonexistent/chromium"), "<test>")
        message = str(caught.exception)
        self.assertIn("apt-get install chromium", message)
        self.assertIn("render.browser", message)
        self.assertNotIn("\n", message)

    def test_no_playwright(self) -> None:
        """No playwright package: one line naming the extra to install."""
        import importlib.util

        find = importlib.util.find_spec
        self.patch(importlib.util, "find_spec", lambda name, *a: None if name == "playwright" else find(name, *a))
        with self.assertRaises(cfg.ConfigError) as caught:
            cfg.from_dict(self.raw(), "<test>")
        self.assertIn("pip install 'spiderd[render]'", str(caught.exception))
        self.assertNotIn("\n", str(caught.exception))

    def test_never_needs_nothing(self) -> None:
        """A site that does not render needs no browser, wherever render.browser points."""
        raw = self.raw(browser="/nonexistent/chromium")
        raw["sites"][0]["render"] = "never"
        self.assertEqual(cfg.from_dict(raw, "<test>").sites[0].render, "never")

    def test_bad_mode(self) -> None:
        """A render mode other than never, always, auto is an error naming the key."""
        raw = self.raw()
        raw["sites"][0]["render"] = "sometimes"
        with self.assertRaises(cfg.ConfigError) as caught:
            cfg.from_dict(raw, "<test>")
        self.assertIn("sites[0].render", str(caught.exception))


class AutoTests(unittest.TestCase):
    """render = "auto" over the scripted shop and a shop of plain HTML pages on another host."""

    timeout = 120

    def setUp(self) -> None:
        services.need_playwright()
        self.shop, self.plain = Shop(lists=1, per_list=4), Shop(lists=1, per_list=8, plain=True)
        self.ports = [reactor.listenTCP(0, server.Site(self.shop), interface="127.0.0.1"),
                      reactor.listenTCP(0, server.Site(self.plain), interface="127.0.0.2")]
        for port in self.ports:
            self.addCleanup(port.stopListening)
        self.roots = [f"http://127.0.0.{i}:{p.getHost().port}/" for i, p in enumerate(self.ports, 1)]
        self.data = Path(tempfile.mkdtemp(prefix="spiderd-auto-"))
        self.addCleanup(shutil.rmtree, self.data, True)

    @defer.inlineCallbacks
    def test_auto_renders_where_it_gives_more(self) -> Any:
        """Every item of both shops with its fields; the scripted shop's sections stay rendered, the plain shop's
        detail pages stop being rendered after auto_probe pages (as /api/hosts says); an item says whether it was
        rendered."""
        sites = [shop_site("auto"), shop_site("auto", name="plain", allowed_hosts=["127.0.0.2"])]
        settings = node_settings(str(self.data), self.roots[0], sites=sites, pool={"seeds": self.roots},
                                 fetch={"per_host_concurrency": 1}, render={**RENDER, "auto_probe": 2})
        cfg.check_data_dir(settings)
        top = tap.build(settings, reactor)
        top.startService()
        try:
            yield top.getServiceNamed("crawler").finished
            api = top.getServiceNamed("api").address[1]
            response = yield Agent(reactor).request(b"GET", f"http://127.0.0.1:{api}/api/hosts".encode())
            hosts = json.loads((yield readBody(response)))
        finally:
            yield top.stopService()
        items = read_items(self.data / "items")
        got = sorted((i["url"], i["title"], i["price"]) for i in items)
        expected = [(f"{root}p/{n}", f"Product {n}", f"{n}.99")
                    for root, shop in zip(self.roots, (self.shop, self.plain)) for n in range(1, shop.details + 1)]
        self.assertEqual(got, sorted(expected))
        self.assertTrue(all(isinstance(i["rendered"], bool) for i in items))  # the feed's rendered BOOLEAN column
        rendered = [i["url"].startswith(self.roots[0]) for i in items if i["rendered"]]
        self.assertEqual(sorted(rendered), [False] * 2 + [True] * 4)  # the plain shop's two probes, the shop's all
        sections = {row["section"].partition("/")[0].partition(":")[0] + "/" + row["section"].partition("/")[2]: row
                    for row in hosts["render"]}
        self.assertEqual(sections["127.0.0.2/p"], {**sections["127.0.0.2/p"], "render": False, "rendered": 2,
                                                   "plain": 6})
        self.assertEqual(sections["127.0.0.1/p"], {**sections["127.0.0.1/p"], "render": True, "rendered": 4,
                                                   "plain": 0})
        self.assertTrue(sections["127.0.0.1/"]["render"])

