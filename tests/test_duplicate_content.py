"""Content digests and [items] skip_duplicate_content, in a whole node's crawl against a real twisted.web site on
127.0.0.1 serving two URLs with the same body and one with another: the digest column, the items' digest field,
and with the setting on no second item for the same content, the URL done and counted (status and metrics), in
the crawler's own fetches and in the all role's local worker's jobs."""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.trial import unittest
from twisted.web import resource, server

from spiderd.core.digest import content_digest
from spiderd.fetch.fetcher import FetchConfig, Fetcher
from spiderd.ops.web import Node

from .test_crawl import node_settings, run_crawl, run_with_worker
from .webnode import start_api

SITES = [{"name": "mirrors", "allowed_hosts": ["127.0.0.1"], "list_urls": [], "detail_urls": [r"/p/"],
          "fields": {"title": "//h1/text()"}}]
SAME = b"<html><body><h1>same</h1><p>one page, two URLs</p></body></html>"
OTHER = b"<html><body><h1>other</h1></body></html>"
PAGES = {
    "/": b'<html><body><a href="/p/1">1</a> <a href="/p/1?sid=42">1 again</a> <a href="/p/2">2</a></body></html>',
    "/p/1": SAME,
    "/p/2": OTHER,
}


class MirrorSite(resource.Resource):
    """PAGES by path (the query string ignored, as a session id would be); 404 for anything else."""

    isLeaf = True

    def render_GET(self, request: Any) -> bytes:
        body = PAGES.get(request.path.decode())
        if body is None:
            request.setResponseCode(404)
            return b"no"
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return body


class DuplicateContentTests(unittest.TestCase):
    timeout = 60

    def setUp(self) -> None:
        self.port = reactor.listenTCP(0, server.Site(MirrorSite()), interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.root = f"http://127.0.0.1:{self.port.getHost().port}/"
        self.data = Path(tempfile.mkdtemp(prefix="spiderd-duplicates-"))
        self.addCleanup(shutil.rmtree, self.data, True)

    def crawl(self, **sections: Any) -> Any:
        return run_crawl(node_settings(str(self.data), self.root, sites=SITES, **sections))

    def rows(self) -> dict[str, str | None]:
        with sqlite3.connect(self.data / "pages.sqlite3") as db:
            return dict(db.execute("SELECT url, digest FROM crawler_html").fetchall())

    def items(self) -> dict[str, str]:
        lines = [json.loads(line) for p in sorted((self.data / "items").glob("*.jl")) for line in p.open()]
        return {item["url"]: item["digest"] for item in lines}

    @defer.inlineCallbacks
    def test_digests_stored_and_in_items(self) -> Any:
        """By default every page gives its item; items and stored rows carry the body's digest."""
        crawler, stats = yield self.crawl()
        same, other = content_digest(SAME), content_digest(OTHER)
        expected = {self.root + "p/1": same, self.root + "p/1?sid=42": same, self.root + "p/2": other}
        self.assertEqual(self.items(), expected)
        self.assertEqual(self.rows(), expected)
        self.assertEqual((stats["done"], crawler.stats.counts["duplicate_content"]), (4, 0))

    @defer.inlineCallbacks
    def test_skip_duplicate_content(self) -> Any:
        """With skip_duplicate_content (and parse workers computing the digests), the second URL of the same
        content gives no item and no stored page, is done, and is counted in /api/status and /metrics; a second
        crawl on the same pool (a restart) knows the digests: a new URL of known content gives nothing either."""
        crawler, stats = yield self.crawl(items={"skip_duplicate_content": True}, parse={"workers": 1})
        same, other = content_digest(SAME), content_digest(OTHER)
        items = self.items()
        self.assertEqual(sorted(items.values()), sorted([same, other]))
        self.assertIn(self.root + "p/2", items)
        self.assertEqual(self.rows(), items)
        self.assertEqual((stats["done"], stats["failed"], stats["waiting"]), (4, 0, 0))
        self.assertEqual(crawler.stats.counts["duplicate_content"], 1)
        self.assertEqual(crawler.stats.counts["items"], 2)
        status, metrics = yield self.api(crawler.stats)
        self.assertEqual(status["counts"]["duplicate_content"], 1)
        self.assertIn("spiderd_duplicate_content_total 1.0", metrics)

        again, _ = yield self.crawl(items={"skip_duplicate_content": True}, pool={"seeds": [self.root + "p/1?x=1"]})
        self.assertEqual((again.stats.counts["duplicate_content"], again.stats.counts["items"]), (1, 0))
        self.assertEqual(self.items(), items)

    @defer.inlineCallbacks
    def worker_crawl(self, skip: bool) -> Any:
        """The all role with its own worker (batch targets ["local"]): the detail pages go through its jobs; fires
        with (the node's stats, the shipped items by URL: their digests)."""
        feeds = self.data / "shipped"
        settings = node_settings(str(self.data), self.root, sites=SITES, batch={"targets": ["local"], "size": 20},
                                 items={"skip_duplicate_content": skip},
                                 worker={"feed_template": f"file://{feeds}/%(batch)s_%(name)s_%(time)s.jl"})
        crawler, batcher, worker = yield run_with_worker(settings)
        lines = [json.loads(line) for p in sorted(feeds.glob("*.jl")) for line in p.open()]
        self.assertEqual(batcher.status()["sent"], 1)  # one batch of the three detail URLs
        return crawler.stats, {item["url"]: item["digest"] for item in lines}

    @defer.inlineCallbacks
    def test_local_worker_keeps_every_item_by_default(self) -> Any:
        """Without the setting, the local worker's jobs make an item of each page, same content or not."""
        stats, items = yield self.worker_crawl(False)
        same, other = content_digest(SAME), content_digest(OTHER)
        self.assertEqual(items, {self.root + "p/1": same, self.root + "p/1?sid=42": same, self.root + "p/2": other})
        self.assertEqual(stats.counts["duplicate_content"], 0)

    @defer.inlineCallbacks
    def test_local_worker_skips_duplicate_content(self) -> Any:
        """With skip_duplicate_content, the all role's local worker claims each page's digest in the pool as the
        crawler does: the second URL of the same content makes no item and no stored page, and is counted."""
        stats, items = yield self.worker_crawl(True)
        same, other = content_digest(SAME), content_digest(OTHER)
        self.assertEqual(sorted(items.values()), sorted([same, other]))
        self.assertIn(self.root + "p/2", items)
        self.assertEqual(self.rows(), items)
        self.assertEqual(stats.counts["duplicate_content"], 1)
        status, metrics = yield self.api(stats)
        self.assertEqual(status["counts"]["duplicate_content"], 1)
        self.assertIn("spiderd_duplicate_content_total 1.0", metrics)

    @defer.inlineCallbacks
    def api(self, stats: Any) -> Any:
        clock = Clock()
        service = start_api(reactor, Node("all", clock, stats=stats), clock)
        self.addCleanup(service.stopService)
        fetcher = Fetcher(reactor, FetchConfig(timeout=10))
        self.addCleanup(fetcher.close)
        status = yield fetcher.fetch(service.url + "api/status")
        metrics = yield fetcher.fetch(service.url + "metrics")
        return json.loads(status.body), metrics.body.decode()
