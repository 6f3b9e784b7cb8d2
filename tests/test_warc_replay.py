"""WARC files that replay (issue 34 item 9): every HTTP answer of a fetch archived (robots.txt, each redirect of a
chain), a 304 to a recrawl's conditional GET as a ``revisit`` record that refers to the capture it repeats, and
the worker's ``warcinfo`` naming the file as shipped.  Checked with warcio's and FastWARC's checkers and FastWARC's
CDXJ index (the lookup a replay tool makes).  pywb is not used: installing it replaces the Brotli package's
``brotli`` module (its brotlipy dependency), which spiderd's br decoding needs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer, reactor
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial import unittest

from spiderd import tap
from spiderd.config import settings as cfg
from spiderd.core.lifecycle import wait_idle

from .test_conditional import Versioned, page, serve
from .test_crawl import node_settings
from .test_warc import records

pytest.importorskip("fastwarc", reason="FastWARC is not installed here (it is in spiderd's [test] extras)")

DETAILS = {"/e/p/1": page(""), "/e/p/2": page("")}
LIST = page('<a href="/e/p/1">1</a><a href="/r/p/9">moved</a>')
ROBOTS = b"User-agent: *\nDisallow: /private/\n"


class Site(Versioned):
    """The versioned pages, a robots.txt, and ``/r/p/9``: a 301 to ``/e/p/2``."""

    def render_GET(self, request: Any) -> bytes:
        path = request.path.decode()
        if path == "/robots.txt":
            self.log.append((path, None, None))
            request.setHeader(b"content-type", b"text/plain")
            return ROBOTS
        if path == "/r/p/9":
            self.log.append((path, None, None))
            request.setResponseCode(301)
            request.setHeader(b"location", b"/e/p/2")
            return b"moved"
        return super().render_GET(request)


def bin_path(name: str) -> str:
    return str(Path(sys.executable).parent / name)


class ReplayTests(unittest.TestCase):
    """An all-role node whose detail pages go to its own worker, [items] format "both": the frontier's WARC files
    and the worker's shipped ones; a recrawl of the detail pages (recrawl_detail) asked for by the test."""

    timeout = 90

    def setUp(self) -> None:
        self.site = Site({"/e/list": LIST, **DETAILS})
        self.root = serve(self, self.site)
        self.data = Path(tempfile.mkdtemp(prefix="spiderd-warc-replay-"))
        self.addCleanup(shutil.rmtree, self.data, True)
        self.feeds = self.data / "shipped"

    def settings(self) -> cfg.Settings:
        site = {"name": "versioned", "allowed_hosts": ["127.0.0.1"], "list_urls": [r"/e/list$"],
                "detail_urls": [r"/p/\d+$"], "fields": {"title": "//h1/text()"}, "recrawl_detail": 0.001}
        return node_settings(str(self.data), self.root + "/e/list", sites=[site], items={"format": "both"},
                             batch={"targets": ["local"], "size": 10, "flush_interval": 3600},
                             pool={"recrawl_every": 3600}, fetch={"robots": True},
                             worker={"feed_template": f"file://{self.feeds}/%(batch)s_%(name)s_%(time)s.jl"})

    def shipped(self) -> list[Path]:
        return sorted(self.feeds.glob("*.warc.gz"), key=lambda p: int(p.name.split("_")[0]))

    @defer.inlineCallbacks
    def check(self, path: Path) -> Any:
        """warcio's and FastWARC's checkers pass the file (digests included)."""
        for command in ([bin_path("warcio"), "check", str(path)],
                        [bin_path("fastwarc"), "check", "--verify-payloads", "--quiet", str(path)]):
            out, err, code = yield getProcessOutputAndValue(command[0], command[1:], env={"PATH": "/usr/bin:/bin"})
            self.assertEqual(code, 0, (command, out, err))

    def index(self, path: Path) -> list[dict[str, Any]]:
        """FastWARC's CDXJ index of the file (what a replay tool looks captures up by)."""
        out = subprocess.run([bin_path("fastwarc"), "index", "-f", "warc-type,warc-target-uri,http:status,"
                              "http:location,warc-refers-to-target-uri,warc-refers-to-date", str(path)],
                             check=True, capture_output=True, text=True).stdout
        return [json.loads(line[line.index("{"):]) for line in out.splitlines() if "{" in line]

    @defer.inlineCallbacks
    def test_redirects_robots_and_recrawls_replay(self) -> Any:
        settings = self.settings()
        cfg.check_data_dir(settings)
        top = tap.build(settings, reactor)
        crawler, batcher, worker, recrawler = (top.getServiceNamed(n)
                                               for n in ("crawler", "batcher", "worker", "recrawler"))

        @defer.inlineCallbacks
        def settled() -> Any:
            yield batcher.flush()
            yield wait_idle(reactor, lambda: batcher.idle() and worker.idle(), batcher.settled, worker.settled,
                            interval=3600)

        top.startService()
        try:
            yield crawler.finished
            yield settled()
            self.assertEqual((yield recrawler.run()), 2)  # /e/p/1 (unchanged: a 304) and /r/p/9 (a redirect)
            yield settled()
        finally:
            yield top.stopService()
        url = lambda path: self.root + path  # noqa: E731
        first, second = self.shipped()
        for path in (first, second, *sorted((self.data / "items").glob("*.warc.gz"))):
            yield self.check(path)
        # the worker's files name themselves as shipped, not as the job's file
        for path in (first, second):
            (info, *_) = records(path)
            self.assertEqual((info["type"], info["warc"]["WARC-Filename"]), ("warcinfo", path.name))
        # each redirect of a chain is archived: the 301 of /r/p/9, then the page it led to
        captures = self.index(first)
        responses = {(c["warc-target-uri"], c["http:status"]) for c in captures if c["warc-type"] == "response"}
        self.assertIn((url("/r/p/9"), "301"), responses)
        self.assertIn((url("/e/p/2"), "200"), responses)
        moved = next(c for c in captures if c.get("warc-target-uri") == url("/r/p/9") and c["warc-type"] == "response")
        self.assertEqual(moved["http:location"], "/e/p/2")
        # robots.txt is archived with the first page fetched after it (the frontier's list page here)
        every = [r for p in sorted(self.data.rglob("*.warc.gz")) for r in records(p)]
        robots = [r for r in every if r["type"] == "response" and r["warc"]["WARC-Target-URI"] == url("/robots.txt")]
        self.assertEqual(len(robots), 1)
        self.assertEqual(robots[0]["content"], ROBOTS)
        # the recrawl's 304s: revisit records that refer to the captures of the first job (/r/p/9's recrawl
        # followed its redirect again, conditionally: /e/p/2 had not changed either)
        originals = {r["warc"]["WARC-Target-URI"]: r for r in records(first) if r["type"] == "response"}
        revisits = {r["warc"]["WARC-Target-URI"]: r for r in records(second) if r["type"] == "revisit"}
        self.assertEqual(sorted(revisits), [url("/e/p/1"), url("/e/p/2")])
        self.assertEqual(revisits[url("/e/p/2")]["warc"]["WARC-Refers-To-Date"],
                         originals[url("/e/p/2")]["warc"]["WARC-Date"])
        original, revisit = originals[url("/e/p/1")], revisits[url("/e/p/1")]
        self.assertEqual(revisit["warc"]["WARC-Target-URI"], url("/e/p/1"))
        self.assertEqual(revisit["warc"]["WARC-Profile"],
                         "http://netpreserve.org/warc/1.0/revisit/server-not-modified")
        self.assertEqual(revisit["warc"]["WARC-Refers-To-Target-URI"], url("/e/p/1"))
        self.assertEqual(revisit["warc"]["WARC-Refers-To-Date"], original["warc"]["WARC-Date"])
        self.assertEqual(revisit["status"].split()[0], "304")
        again = self.index(second)
        self.assertIn({"warc-type": "revisit", "warc-target-uri": url("/e/p/1"), "http:status": "304",
                       "warc-refers-to-target-uri": url("/e/p/1"),
                       "warc-refers-to-date": original["warc"]["WARC-Date"]},
                      [{k: v for k, v in c.items() if k not in ("offset", "http:location")} for c in again])
