"""Each step of the page engine (spiderd.engine.steps), through both roles: the same small site crawled by the
all role fetching its detail pages itself (``[batch] targets = []``), and by the all role sending them to its own
worker (``targets = ["local"]``), gives the same outcome step by step: items, stored pages, WARC records, a
throttle, a failure, a redirect to a page given already, noindex and duplicate content."""

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


from .test_crawl import node_settings, run_crawl, run_with_worker
from .test_warc import records

SITES = [{"name": "steps", "allowed_hosts": ["127.0.0.1"], "list_urls": [r"/$"], "detail_urls": [r"/p/"],
          "fields": {"title": "//h1/text()"}}]
DETAILS = ["item", "noindex", "dup-a", "dup-b", "busy", "moved", "gone"]
SAME = b"<html><body><h1>same</h1><p>one content, two URLs</p></body></html>"
PAGES = {
    "/p/item": b"<html><body><h1>item</h1></body></html>",
    "/p/noindex": b'<html><head><meta name="robots" content="noindex"></head><body><h1>hidden</h1></body></html>',
    "/p/dup-a": SAME,
    "/p/dup-b": SAME,
    "/p/busy": b"<html><body><h1>busy</h1></body></html>",
}


class StepsSite(resource.Resource):
    """A list page linking every detail; ``/p/busy`` answers 429 (Retry-After: 0) once, ``/p/moved`` redirects
    to ``/p/item``, ``/p/gone`` is a 500 for good."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.requests: Counter[str] = Counter()

    def render_GET(self, request: Any) -> bytes:
        path = request.path.decode()
        self.requests[path] += 1
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        if path == "/":
            return b"<html><body>" + b"".join(b'<a href="/p/%s">%s</a>' % (d.encode(), d.encode())
                                              for d in DETAILS) + b"</body></html>"
        if path == "/p/busy" and self.requests[path] == 1:
            request.setResponseCode(429)
            request.setHeader(b"retry-after", b"0")
            return b"busy"
        if path == "/p/moved":
            request.redirect(b"/p/item")
            return b""
        if path == "/p/gone":
            request.setResponseCode(500)
            return b"gone"
        body = PAGES.get(path)
        if body is None:
            request.setResponseCode(404)
            return b"no"
        return body


class BothRolesTests(unittest.TestCase):
    """The same steps, the same outcomes, in the crawler's own fetches and in its worker's jobs."""

    timeout = 60

    def setUp(self) -> None:
        self.site = StepsSite()
        self.port = reactor.listenTCP(0, server.Site(self.site), interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.root = f"http://127.0.0.1:{self.port.getHost().port}/"
        self.data = Path(tempfile.mkdtemp(prefix="spiderd-steps-"))
        self.addCleanup(shutil.rmtree, self.data, True)

    def settings(self, targets: list[str]) -> Any:
        feeds = self.data / "shipped"
        return node_settings(str(self.data), self.root, sites=SITES, batch={"targets": targets, "size": 20},
                             pool={"failure_threshold": 0}, fetch={"robots": False},
                             items={"format": "both", "skip_duplicate_content": True},
                             worker={"feed_template": f"file://{feeds}/%(batch)s_%(name)s_%(time)s.jl"})

    @defer.inlineCallbacks
    def outcome(self, targets: list[str]) -> Any:
        """Crawl the site with ``targets``; fires with what each step left: items, stored pages, archived
        answers, the crawl's counters."""
        if targets:
            crawler, _, _ = yield run_with_worker(self.settings(targets))
            out = self.data / "shipped"
        else:
            crawler, _ = yield run_crawl(self.settings(targets))
            out = self.data / "items"
        items = sorted(json.loads(line)["url"][len(self.root) - 1:] for p in out.glob("*.jl") for line in p.open())
        with sqlite3.connect(self.data / "pages.sqlite3") as db:
            stored = sorted(row[0][len(self.root) - 1:] for row in db.execute("SELECT url FROM crawler_html"))
        archived = Counter((r["warc"]["WARC-Target-URI"][len(self.root) - 1:], r["status"].split()[0])
                           for p in out.glob("*.warc.gz") for r in records(p) if r["type"] == "response")
        return items, stored, archived, crawler.stats

    @defer.inlineCallbacks
    def test_each_step_the_same_in_both_roles(self) -> Any:
        """Both roles: an item and a stored page for each page that makes one (the redirect to /p/item gives
        no second one; noindex and the second URL of the same content give neither; the 429 is fetched again and
        makes its item; the 500 none), every detail answer archived (a redirect's too), the throttle and the duplicate
        counted."""
        outcomes = []
        for targets in ([], ["local"]):
            items, stored, archived, stats = yield self.outcome(targets)
            self.assertEqual(len(items), 3, (targets, items))
            self.assertEqual(sorted(set(items) - {"/p/dup-a", "/p/dup-b"}), ["/p/busy", "/p/item"])
            self.assertEqual(stored, items)
            self.assertEqual((stats.errors["throttled"], stats.counts["duplicate_content"]), (1, 1))
            details = {(path, code): n for (path, code), n in archived.items() if path.startswith("/p/")}
            self.assertEqual(details, {("/p/item", "200"): 2, ("/p/noindex", "200"): 1, ("/p/dup-a", "200"): 1,
                                       ("/p/dup-b", "200"): 1, ("/p/busy", "429"): 1, ("/p/busy", "200"): 1,
                                       ("/p/gone", "500"): 1, ("/p/moved", "302"): 1},
                             targets)  # /p/moved: its 302, then its target's answer (#34: WARC files that replay)
            outcomes.append((len(items), stored == items))
            shutil.rmtree(self.data)
            self.data.mkdir()
            self.site.requests.clear()
        self.assertEqual(outcomes[0], outcomes[1])
