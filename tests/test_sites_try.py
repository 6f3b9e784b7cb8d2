"""The template tester: POST /api/sites/NAME/try on a loopback page reports the fields, each selector's matches, the
links by the rule that decided them, and a selector that matches nothing; a costly draft is stopped at its deadline
while the node keeps answering; a draft is never used by the crawl."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor, task
from twisted.internet.task import Clock
from twisted.trial import unittest
from twisted.web import resource, server

from spiderd import tap
from spiderd.config import settings as cfg

from .test_sites_live import call

PRODUCT = b"""<html><head><title>Lamp</title></head><body>
<h1>Desk lamp</h1><p class="price">12 EUR</p><div class="desc"><b>Bright</b> and small</div>
<a href="/p/2">another product</a><a href="/c/lamps">lamps</a><a href="/about">about us</a>
<a href="http://elsewhere.example/x">elsewhere</a><a href="/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!">odd</a>
</body></html>"""


class Pages(resource.Resource):
    isLeaf = True

    def render_GET(self, request: server.Request) -> bytes:
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return PRODUCT


class TryTests(unittest.TestCase):
    timeout = 60

    def setUp(self) -> Any:
        self.port = reactor.listenTCP(0, server.Site(Pages()), interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.root = f"http://127.0.0.1:{self.port.getHost().port}/"
        data = tempfile.mkdtemp(prefix="spiderd-try-")
        self.addCleanup(shutil.rmtree, data, True)
        settings = cfg.from_dict({
            "spiderd": {"role": "frontier", "data_dir": data, "log_interval": 3600},
            "pool": {"pending_threshold": 60}, "fetch": {"robots": False, "timeout": 10},
            "parse": {"workers": 0}, "store": {"url": "none"}, "batch": {"targets": []}, "api": {"port": 0},
            "sites": [{"name": "shop", "allowed_hosts": ["127.0.0.1"], "list_urls": ["/c/"],
                       "detail_urls": [r"/p/\d+$"],
                       "fields": {"title": {"css": "h1::text"}, "price": {"css": "p.price::text"},
                                  "colour": {"css": "span.colour::text"}, "desc": "//div[@class='desc']"}}],
        }, "<test>")
        cfg.check_data_dir(settings)
        self.top = tap.build(settings, reactor)
        self.top.startService()
        self.addCleanup(self.top.stopService)
        self.api = self.top.getServiceNamed("api")
        return self.started()

    @defer.inlineCallbacks
    def started(self) -> Any:
        """Once the pool is open, the services after it start (the API among them)."""
        while not self.api.running:
            yield task.deferLater(reactor, 0.01, lambda: None)

    @defer.inlineCallbacks
    def test_try_reports_matches_links_by_rule_and_a_selector_that_matches_nothing(self) -> Any:
        """The fields as extracted, each selector's matches, links split by rule, warnings."""
        code, got = yield call(self.api, "POST", "/api/sites/shop/try", {"url": self.root + "p/1"})
        self.assertEqual(code, 200, got)
        self.assertEqual(got["page_kind"], "detail")
        self.assertEqual(got["fields"], {"title": "Desk lamp", "price": "12 EUR", "colour": None,
                                         "desc": "Bright and small"})
        self.assertEqual((got["selectors"]["title"]["count"], got["selectors"]["title"]["first"]), (1, ["Desk lamp"]))
        self.assertEqual(got["selectors"]["colour"]["count"], 0)
        self.assertIn("field 'colour': the selector matched nothing", got["warnings"])
        links = {kind: {link["url"].replace(self.root, "/"): link["rule"] for link in got["links"][kind]}
                 for kind in ("list", "detail", "ignored")}
        self.assertEqual(links["detail"], {"/p/2": r"detail_urls '/p/\\d+$'"})
        self.assertEqual(links["list"], {"/c/lamps": "list_urls '/c/'"})
        self.assertEqual(links["ignored"]["/about"], "matches no list_urls or detail_urls")
        self.assertEqual(links["ignored"]["http://elsewhere.example/x"], "off-site: no allowed_hosts entry")

    @defer.inlineCallbacks
    def test_a_draft_is_tried_and_not_used_and_a_bad_draft_says_why(self) -> Any:
        """A draft's field changes the answer, not the site; a bad draft is refused, naming the key."""
        draft = {"allowed_hosts": ["127.0.0.1"], "detail_urls": [r"/p/\d+$"],
                 "fields": {"title": "//title/text()", "desc": "//div[@class='desc']/b"}}
        code, got = yield call(self.api, "POST", "/api/sites/shop/try", {"url": self.root + "p/1", "site": draft,
                                                                         "page": True})
        self.assertEqual(code, 200, got)
        self.assertEqual(got["fields"], {"title": "Lamp", "desc": "Bright"})
        self.assertIn("<h1>Desk lamp</h1>", got["page"])
        code, site = yield call(self.api, "GET", "/api/sites/shop")
        self.assertEqual(site["table"]["fields"]["title"], {"css": "h1::text"})
        code, got = yield call(self.api, "POST", "/api/sites/shop/try",
                               {"url": self.root + "p/1", "site": dict(draft, fields={"title": "//h1["})})
        self.assertEqual(code, 400)
        self.assertIn("sites.shop.fields.title: bad XPath", got["message"])
        code, got = yield call(self.api, "POST", "/api/sites/shop/try", {"url": self.root + "p/1"}, csrf=False)
        self.assertEqual(code, 403)

    @defer.inlineCallbacks
    def test_a_costly_pattern_is_stopped_and_the_node_keeps_answering(self) -> Any:
        """A draft whose pattern backtracks for ever on one of the page's links: the node answers its status
        meanwhile, and the try is stopped at its deadline (the clock's) with a 422 saying why."""
        tester = self.api.node.tester
        tester.clock = clock = Clock()
        draft = {"allowed_hosts": ["127.0.0.1"], "detail_urls": ["^http://[^/]+/(a|aa)+$"]}
        d = call(self.api, "POST", "/api/sites/shop/try", {"url": self.root + "p/1", "site": draft})
        while not clock.getDelayedCalls():  # the report's child is started once the page is fetched
            yield task.deferLater(reactor, 0.01, lambda: None)
        code, status = yield call(self.api, "GET", "/api/status")
        self.assertEqual(code, 200)
        self.assertFalse(d.called)
        clock.advance(tester.timeout)
        code, got = yield d
        self.assertEqual(code, 422, got)
        self.assertIn("took too long", got["message"])

    @defer.inlineCallbacks
    def test_spiderctl_try_prints_the_same(self) -> Any:
        """spiderctl try finds the site by the URL's host, tries a --field draft, prints fields, links, warnings."""
        import io

        from twisted.internet import threads

        from spiderd.ops import ctl

        def run(*argv: str) -> tuple[int, str]:
            out = io.StringIO()
            code = ctl.main(["--url", self.api.url, "try", *argv], out)
            return code, out.getvalue()

        code, text = yield threads.deferToThread(run, self.root + "p/1")
        self.assertEqual(code, 0, text)
        self.assertIn('title = "Desk lamp"  (1 matches', text)
        self.assertIn("warning: field 'colour': the selector matched nothing", text)
        self.assertIn(f"{self.root}p/2  <- detail_urls", text)
        code, text = yield threads.deferToThread(run, self.root + "p/1", "--field", "colour=css:p.price::text")
        self.assertEqual(code, 0, text)
        self.assertIn('colour = "12 EUR"', text)
        self.assertIn("(draft)", text)


def test_a_nested_repeat_is_refused_at_validation() -> None:
    """A pattern such as (a+)+ (exponential backtracking, run on the reactor when URLs are classified) is refused
    with a line naming the key; a repeated group with a delimiter is not."""
    import pytest

    site = {"name": "s", "allowed_hosts": ["s.example"], "detail_urls": [r"/p/(\d+)+$"]}
    with pytest.raises(cfg.ConfigError, match=r"sites\[0\]\.detail_urls: .* can backtrack"):
        cfg.from_dict({"sites": [site]})
    cfg.from_dict({"sites": [dict(site, detail_urls=[r"/(\w+/)*p/\d+$"])]})
