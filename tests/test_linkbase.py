"""Seed 004's linkbase end to end: anchors and link paths from extraction, through the parse workers, into the
pool, out of why()."""

from __future__ import annotations

import argparse
import io
import marshal
import shutil
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.trial import unittest

from spiderd.config import settings as cfg
from spiderd import tap
from spiderd.demo.config import DEMO
from spiderd.demo.pages import SiteSpec
from spiderd.demo.site import listen
from spiderd.fetch.extract import Rules, extract
from spiderd.fetch.parseworker import answer, extracted_from

from .test_crawl import node_settings

SITES = cfg.from_dict({"sites": [{"allowed_hosts": ["a.example"], "detail_urls": [r"/item/\d+$"]}]}).sites
PAGE = b"""<html><head><base href="/c/"><link rel="next" href="/c/2"></head><body>
<a href="/c/1">  Shoes
   and <b>boots</b> </a>
<a href="/item/1"><img src="x.jpg" alt="ignored"></a>
<a href="/item/2" title="Red hat"> </a>
<a href="/item/1">Second link to item 1</a>
<map><area href="/item/3" alt="Area link"></map>
<a href="/c/long">""" + b"word " * 100 + b"""</a>
</body></html>"""


def run(anchors: bool) -> Any:
    return extract("http://a.example/c/", PAGE, "text/html", "list", 0.0, 200, Rules(SITES, anchors=anchors))


def test_anchors_are_parallel_to_the_links() -> None:
    """Each kept link has its anchor text: collapsed, cut at 200, title or alt when there is no text."""
    result = run(anchors=True)
    assert result.lists == ["http://a.example/c/2", "http://a.example/c/1", "http://a.example/c/long"]
    assert result.list_anchors == ["", "Shoes and boots", ("word " * 40).strip()]
    assert result.details == ["http://a.example/item/1", "http://a.example/item/2", "http://a.example/item/3"]
    assert result.detail_anchors == ["", "Red hat", "Area link"]


def test_xpaths_are_parallel_to_the_links() -> None:
    """Each kept link has the path of its element (the first one, for a URL linked twice), as seed 004's
    linkinfo keeps the xpath."""
    result = run(anchors=True)
    assert result.list_xpaths == ["/html/head/link", "/html/body/a[1]", "/html/body/a[5]"]
    assert result.detail_xpaths == ["/html/body/a[2]", "/html/body/a[3]", "/html/body/map/area"]


def test_no_anchors_unless_asked() -> None:
    """Without the linkbase, extraction collects no anchors or paths (and costs nothing more)."""
    result = run(anchors=False)
    assert (result.list_anchors, result.detail_anchors) == ([], [])
    assert (result.list_xpaths, result.detail_xpaths) == ([], [])
    assert result.details == run(anchors=True).details


def test_anchors_cross_the_parse_worker_pipe() -> None:
    """A parse worker's answer carries the anchors and the paths; the parent rebuilds the same Extracted."""
    request = (7, "http://a.example/c/", PAGE, "text/html", "list", 0.0, 200, None, None)
    rebuilt = extracted_from(marshal.loads(marshal.dumps(answer(Rules(SITES, anchors=True), 100, request))))
    assert rebuilt == run(anchors=True) and rebuilt.detail_xpaths[2] == "/html/body/map/area"


def test_spiderctl_why_shows_the_linkbase_entry() -> None:
    """spiderctl why prints where a URL was first linked: parent, anchor and xpath."""
    from spiderd.ops import ctl

    class Client:
        def call(self, method: str, path: str) -> dict[str, Any]:
            return {"url": "http://a.example/item/1", "state": "done", "reason": "fetched", "parent":
                    "http://a.example/c/", "anchor": "Red hat", "xpath": "/html/body/a[3]"}

    out = io.StringIO()
    ctl.cmd_why(Client(), argparse.Namespace(target="http://a.example/item/1", json=False), out)  # type: ignore[arg-type]
    assert "first linked from http://a.example/c/ by 'Red hat' at /html/body/a[3]" in out.getvalue()


class LinkbaseCrawlTests(unittest.TestCase):
    """A node with the linkbase on crawls the demo site: why(item) names the list page that linked it."""

    timeout = 60

    def setUp(self) -> None:
        self.spec = SiteSpec(lists=3, details=40, faults=False)
        self.port = listen(self.spec, reactor)
        self.addCleanup(self.port.stopListening)
        self.root = f"http://127.0.0.1:{self.port.getHost().port}/"
        self.data = Path(tempfile.mkdtemp(prefix="spiderd-linkbase-"))
        self.addCleanup(shutil.rmtree, self.data, True)

    @defer.inlineCallbacks
    def test_why_tells_parent_and_anchor(self) -> Any:
        """Every item page has a linkbase entry: a list page as parent, "Item N" as anchor, the link's xpath."""
        settings = node_settings(str(self.data), self.root, pool={"linkbase": True}, parse={"workers": 1},
                                 sites=DEMO["sites"])
        cfg.check_data_dir(settings)
        top = tap.build(settings, reactor)
        crawler = top.getServiceNamed("crawler")
        top.startService()
        try:
            yield crawler.finished
            why = yield crawler.pool.why(self.root + "item/7.html")
            root_why = yield crawler.pool.why(self.root + "list/1.html")
        finally:
            yield top.stopService()
        self.assertEqual(why["state"], "done")
        self.assertRegex(why["parent"], r"/list/\d\.html$")
        self.assertEqual(why["anchor"], "Item 7")
        self.assertRegex(why["xpath"], r"^/html/body/.*a(\[\d+\])?$")
        self.assertEqual((root_why["parent"], root_why["anchor"]), (self.root, "Catalogue page 1"))
