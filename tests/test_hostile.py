"""A whole node crawls a hostile site: every trap ends, every bad page is a clear status, the good pages come out."""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.trial import unittest
from twisted.web import resource, server

from spiderd.config import settings as cfg

from .test_crawl import run_crawl

GOOD = [f"/ok/{i}.html" for i in range(5)]


def page(*links: str, title: str = "x") -> bytes:
    anchors = "".join(f'<a href="{link}">l</a>' for link in links)
    return f"<html><head><title>{title}</title></head><body><h1 class='title'>{title}</h1>{anchors}</body></html>".encode()


class Hostile(resource.Resource):
    """Traps, bombs and lies, plus five honest detail pages."""

    isLeaf = True

    def render_GET(self, request: Any) -> bytes:
        path = request.path.decode()
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        if path == "/":
            targets = ["/ok/0.html", "/huge", "/bomb", "/badutf8", "/liar", "/loop", "/png", "/many", "/deep/1/",
                       "/grow?x=a", "/cal?day=0", "/nul", "/" + "l" * 5000]
            return page(*targets)
        if path.startswith("/ok/"):
            return page(title=path)
        return getattr(self, "_" + path.strip("/").split("/")[0], self._missing)(request, path)

    def _huge(self, request: Any, path: str) -> bytes:
        return page(*GOOD[:2]) + b"<p>" + b"x" * 3_000_000 + b"</p>"

    def _bomb(self, request: Any, path: str) -> bytes:
        request.setHeader(b"content-encoding", b"gzip")
        return gzip.compress(b" " * 20_000_000)

    def _badutf8(self, request: Any, path: str) -> bytes:
        return page("/ok/1.html").replace(b"<body>", b"<body>\xff\xfe\xc3\x28 broken \xed\xa0\x80")

    def _liar(self, request: Any, path: str) -> bytes:
        return page("/ok/2.html").replace(b"<body>", "<body>caf\xe9 na\xefve".encode("latin-1"))

    def _loop(self, request: Any, path: str) -> bytes:
        request.setResponseCode(302)
        request.setHeader(b"location", b"/loop2" if path == "/loop" else b"/loop")
        return b""

    _loop2 = _loop

    def _png(self, request: Any, path: str) -> bytes:
        request.setHeader(b"content-type", b"image/png")
        return b"\x89PNG\r\n\x1a\n" + b"\0" * 1000

    def _many(self, request: Any, path: str) -> bytes:
        junk = [f"javascript:go({i})" for i in range(20_000)] + [f"mailto:x{i}@y" for i in range(20_000)]
        return page(*junk, "/ok/3.html", "/ok/4.html")

    def _deep(self, request: Any, path: str) -> bytes:
        return page(path + "d/")  # one level deeper, for ever

    def _grow(self, request: Any, path: str) -> bytes:
        x = request.args.get(b"x", [b"a"])[0].decode()
        return page(f"/grow?x={x}a")  # a longer URL, for ever

    def _cal(self, request: Any, path: str) -> bytes:
        day = int(request.args.get(b"day", [b"0"])[0])
        return page(f"/cal?day={day + 1}", f"/cal?day={day - 1}")  # a calendar: next and previous day, for ever

    def _nul(self, request: Any, path: str) -> bytes:
        return page("/ok/0.html").replace(b"<body>", b"<body>\0\0\0")

    def _missing(self, request: Any, path: str) -> bytes:
        request.setResponseCode(404)
        return b"no"


class HostileCrawlTests(unittest.TestCase):
    """The crawl ends by itself; the limits, not luck, end the traps."""

    timeout = 120

    @defer.inlineCallbacks
    def test_hostile_site(self) -> Any:
        """Traps end (here the per-host budget ends them first; test_extract covers the URL-length and
        path-depth limits on their own); bombs, loops and lies are statuses; skipped links are counted."""
        site = server.Site(Hostile())
        site.noisy = False
        port = reactor.listenTCP(0, site, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        root = f"http://127.0.0.1:{port.getHost().port}/"
        data = Path(tempfile.mkdtemp(prefix="spiderd-hostile-"))
        self.addCleanup(shutil.rmtree, data, True)
        settings = cfg.from_dict({
            "spiderd": {"data_dir": str(data), "log_interval": 3600},
            "pool": {"backend": "memory", "seeds": [root], "failure_threshold": 1, "max_url_length": 300,
                     "max_path_depth": 8, "pending_threshold": 60, "max_urls_per_host": 150},
            "fetch": {"concurrency": 8, "per_host_concurrency": 8, "timeout": 20, "max_body_size": 2_000_000,
                      "max_redirects": 3, "robots": False},
            "parse": {"workers": 0}, "store": {"url": "none"}, "batch": {"targets": []}, "api": {"port": 0},
            "sites": [{"name": "hostile", "allowed_hosts": ["127.0.0.1"], "detail_urls": [r"/ok/\d+\.html$"],
                       "fields": {"title": "css:h1.title::text"}}],
        }, "<test>")
        crawler, stats = yield run_crawl(settings)
        items = [json.loads(line) for f in (data / "items").glob("*.jl") for line in f.open()]
        self.assertEqual(sorted(i["url"][len(root) - 1 :] for i in items), GOOD)
        statuses = crawler.stats.statuses
        self.assertEqual(statuses["too-large"], 2)  # /huge and /bomb
        self.assertEqual(statuses["redirects"], 1)  # /loop
        self.assertLessEqual(stats["done"] + stats["failed"], 150 + 5)  # the budget, plus redirect targets
        self.assertGreater(stats["rejected"].get("host-full", 0), 0)
        self.assertEqual((stats["waiting"], stats["pending"]), (0, 0))
        self.assertGreater(crawler.stats.counts["links_skipped"], 40_000)  # javascript:, mailto:, the 5000-char link
