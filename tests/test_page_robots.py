"""Robots directives in pages and canonical URLs, in a whole node's crawl and in a worker's job, against a real
twisted.web site on 127.0.0.1: rel="nofollow", <meta name="robots">, X-Robots-Tag and <link rel="canonical">."""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.trial import unittest
from twisted.web import resource, server

from spiderd.config import settings as cfg
from spiderd.fetch.parsepool import ParsePool

from .helpers import rules_of
from .test_crawl import node_settings, run_crawl
from .test_worker import WorkerTestBase

SITES = [{
    "name": "robots-shop",
    "allowed_hosts": ["127.0.0.1"],
    "list_urls": [],  # every allowed link that is no detail page is a list page
    "detail_urls": [r"/p/\d+$"],
    "fields": {"title": "//h1/text()"},
    "follow_detail_links": True,
}]


def html(head: str = "", body: str = "", title: str = "T") -> bytes:
    """A page with ``head`` in its head, an ``<h1>`` and ``body`` after it."""
    return f"<html><head><title>t</title>{head}</head><body><h1>{title}</h1>{body}</body></html>".encode()


def a(path: str, rel: str = "") -> str:
    return f'<a href="{path}"{f" rel={rel!r}" if rel else ""}>{path}</a>'


PAGES: dict[str, tuple[bytes, dict[str, str]]] = {
    "/": (html(body="".join([
        a("/p/1"), a("/p/2", "nofollow"), a("/c/meta-nofollow"), a("/p/4"), a("/p/5"),
        a("/c/header-nofollow"), a("/p/7"), a("/c/page-nofollow-link", "external nofollow"),
    ])), {}),
    "/p/1": (html(title="one"), {}),
    "/p/2": (html(title="not linked but nofollow"), {}),
    "/c/meta-nofollow": (html('<meta name="robots" content="nofollow">', a("/p/3")), {}),
    "/p/3": (html(title="only behind a nofollow page"), {}),
    "/p/4": (html('<meta name="ROBOTS" content="noindex">', a("/p/10")), {}),
    "/p/10": (html(title="linked from a noindex page"), {}),
    "/p/5": (html(title="header noindex"), {"X-Robots-Tag": "noindex"}),
    "/c/header-nofollow": (html(body=a("/p/6")), {"X-Robots-Tag": "otherbot: noindex\nspiderd: nofollow"}),
    "/p/6": (html(title="only behind a header nofollow page"), {}),
    "/p/7": (html('<link rel="canonical" href="/p/8">', a("/p/8"), title="seven, canonically eight"), {}),
    "/p/8": (html(title="eight"), {}),
    "/c/page-nofollow-link": (html(), {}),
    "/c/late": (html(body=a("/p/8") + a("/p/11")), {}),
    "/p/11": (html(title="eleven"), {}),
}


class RobotsSite(resource.Resource):
    """Serves PAGES (with their headers), 404 for any other path; counts the requests per path."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.requests: Counter[str] = Counter()

    def render_GET(self, request: Any) -> bytes:
        path = request.path.decode()
        self.requests[path] += 1
        if path not in PAGES:
            request.setResponseCode(404)
            return b"no"
        body, headers = PAGES[path]
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        for name, value in headers.items():
            for line in value.splitlines():
                request.responseHeaders.addRawHeader(name, line)
        return body


class PageRobotsCrawlTests(unittest.TestCase):
    """A node crawls the site from / to the end."""

    timeout = 60

    def setUp(self) -> None:
        self.site = RobotsSite()
        self.port = reactor.listenTCP(0, server.Site(self.site), interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.root = f"http://127.0.0.1:{self.port.getHost().port}/"
        self.data = Path(tempfile.mkdtemp(prefix="spiderd-page-robots-"))
        self.addCleanup(shutil.rmtree, self.data, True)

    def crawl(self, seeds: list[str] | None = None, **fetch: Any) -> Any:
        settings = node_settings(str(self.data), self.root, sites=SITES, fetch=fetch,
                                 pool={"seeds": seeds or [self.root]})
        return run_crawl(settings)

    def url(self, path: str) -> str:
        return self.root + path.lstrip("/")

    def stored(self) -> list[str]:
        with sqlite3.connect(self.data / "pages.sqlite3") as db:
            return sorted(row[0] for row in db.execute("SELECT url FROM crawler_html"))

    def items(self) -> list[dict[str, Any]]:
        lines = []
        for path in sorted((self.data / "items").glob("*.jl")):
            lines += [json.loads(line) for line in path.read_text().splitlines()]
        return lines

    def fetched(self) -> set[str]:
        return {path for path in self.site.requests if path != "/robots.txt"}

    @defer.inlineCallbacks
    def test_directives_and_canonical_honoured(self) -> Any:
        """nofollow links and pages are not followed, noindex pages (meta or header) are done with no item and no
        stored page, the canonical URL is the item's url, is stored under, and is never fetched."""
        crawler, stats = yield self.crawl()
        self.assertEqual(self.fetched(), {"/", "/p/1", "/c/meta-nofollow", "/p/4", "/p/10", "/p/5",
                                          "/c/header-nofollow", "/p/7"})
        self.assertEqual(sorted(i["url"] for i in self.items()), [self.url(p) for p in ("/p/1", "/p/10", "/p/8")])
        self.assertEqual([i["title"] for i in self.items() if i["url"] == self.url("/p/8")],
                         ["seven, canonically eight"])
        self.assertEqual(self.stored(), [self.url(p) for p in ("/p/1", "/p/10", "/p/8")])
        self.assertEqual(crawler.stats.counts["noindex"], 2)
        self.assertEqual((stats["waiting"], stats["pending"], stats["done"]), (0, 0, 9))  # 8 fetched, and /p/8

        # Again on the same pool: the noindex pages were done (seeded again, not fetched again), and so was the
        # canonical URL (a new page links it: it is not fetched).
        yield self.crawl(seeds=[self.url("/c/late"), self.url("/p/4"), self.url("/p/5")])
        self.assertEqual((self.site.requests["/p/4"], self.site.requests["/p/5"]), (1, 1))
        self.assertEqual((self.site.requests["/p/8"], self.site.requests["/p/11"]), (0, 1))

    @defer.inlineCallbacks
    def test_each_setting_turns_its_part_off(self) -> Any:
        """With obey_nofollow, obey_meta_robots and canonical off, the site is crawled as if it had none."""
        crawler, _ = yield self.crawl(obey_nofollow=False, obey_meta_robots=False, canonical=False)
        self.assertEqual(self.fetched(), set(PAGES) - {"/c/late", "/p/11"})
        urls = sorted(i["url"] for i in self.items())
        self.assertEqual(urls, sorted(self.url(p) for p in PAGES if p.startswith("/p/") and p != "/p/11"))
        self.assertEqual(crawler.stats.counts["noindex"], 0)


class PageRobotsWorkerTests(WorkerTestBase):
    """A worker's job over the same site: the pipeline honours noindex and canonical for its detail pages."""

    def setUp(self) -> None:
        super().setUp()
        self.site = RobotsSite()
        port = reactor.listenTCP(0, server.Site(self.site), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.root = f"http://127.0.0.1:{port.getHost().port}"

    def parser(self, spider: str = "demo-shop") -> ParsePool:
        if spider not in self._parsers:
            sites = [dict(SITES[0], name=spider)]
            settings = cfg.from_dict({"parse": {"workers": 0}, "sites": sites}, "<test>")
            parser = self._parsers[spider] = ParsePool(reactor, rules_of(settings.raw), 0)
            parser.startService()
            self.addCleanup(parser.stopService)
        return self._parsers[spider]

    @defer.inlineCallbacks
    def test_noindex_and_canonical_in_a_job(self) -> Any:
        """noindex pages (meta or X-Robots-Tag) give no item and no stored page; a canonical URL is the item's url
        and the stored page's; the job still finishes with every URL done."""
        service = self.worker()
        paths = ["/p/1", "/p/4", "/p/5", "/p/7"]
        jobid = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                    ("setting", self.urls(*paths)), ("batch", "7"))
        job = yield service.runner.when_done(jobid)
        yield self.shipper.settled()
        self.assertEqual(job.state, "finished")
        found = self.feed_items("7")
        self.assertEqual(sorted((i["url"], i["title"]) for i in found),
                         [(self.root + "/p/1", "one"), (self.root + "/p/8", "seven, canonically eight")])
        self.assertEqual(self.stored(), [self.root + "/p/1", self.root + "/p/8"])
        self.assertEqual((job.stats["noindex"], job.stats["status_200"], job.stats.get("failed", 0)), (2, 4, 0))
        self.assertEqual(self.site.requests["/p/8"], 0)
