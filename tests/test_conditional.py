"""Conditional GET on recrawl: a page's ETag and Last-Modified, kept by the pool for the pages it hands out again,
sent back as If-None-Match / If-Modified-Since; a 304 is done and unchanged (not parsed, stored or linked again).

The parts first (sans I/O), then the fetcher and whole crawls against a real twisted.web site on 127.0.0.1, the
recrawl interval on a Clock.
"""

from __future__ import annotations

import email.utils
import json
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from twisted.internet import defer, reactor, task
from twisted.internet.task import Clock
from twisted.trial import unittest
from twisted.web import http, resource, server

from spiderd.engine.steps import PageSteps
from spiderd.config import settings as cfg
from spiderd.core import conditional as cg
from spiderd.core.conditional import Validators
from spiderd.core.stats import CrawlStats
from spiderd.feed.items import ItemWriter
from spiderd.fetch.fetcher import FetchConfig, Fetcher
from spiderd.fetch.parsepool import ParsePool
from spiderd.frontier.crawler import CrawlService
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool import open_memory_pool
from spiderd.frontier.scheduler import RecrawlPolicy, Recrawler
from spiderd.ops.web import Node

from .helpers import ClockedReactor, rules_of
from .test_pool_contract import RedisKeys
from .webnode import start_api

T = 1_700_000_000  # Tue, 14 Nov 2023 22:13:20 GMT


def http_date(when: float) -> str:
    return email.utils.formatdate(when, usegmt=True)


class Parts(unittest.SynchronousTestCase):
    """Validators read from an answer's headers, sent back, and kept in a few bytes by both pools."""

    def test_read_from_headers(self) -> None:
        self.assertEqual(cg.from_headers(b'"abc"', http_date(T).encode()), Validators('"abc"', T))
        self.assertEqual(cg.from_headers('W/"v2"', None), Validators('W/"v2"'))
        self.assertEqual(cg.from_headers(None, " " + http_date(T) + " "), Validators(None, T))
        self.assertEqual(cg.from_headers("unquoted-tag", None), Validators("unquoted-tag"))
        for tag, date in ((None, None), ("", ""), ('"with space"', "yesterday"), ('"' + "x" * 200 + '"', None),
                          ('"\x7f"', "Mon, 99 Foo 2024 00:00:00 GMT"), (None, "Thu, 01 Jan 1970 00:00:00 -0000")):
            self.assertIsNone(cg.from_headers(tag, date), (tag, date))

    def test_each_date_text_parsed_once(self) -> None:
        """Pages that share a Last-Modified (a site's static files, a second's dynamic pages) cost one parse of it:
        a date text read before is not parsed again, and gives the same seconds (a bad one None, each time)."""
        parsed: list[str] = []
        real = email.utils.parsedate_to_datetime
        self.patch(email.utils, "parsedate_to_datetime", lambda text: parsed.append(text) or real(text))
        date = http_date(T + 17)
        for _ in range(3):
            self.assertEqual(cg.from_headers(None, date.encode()), Validators(None, T + 17))
            self.assertIsNone(cg.from_headers(None, "Mon, 99 Foo 2024 00:00:17 GMT"))
        self.assertEqual(parsed, [date, "Mon, 99 Foo 2024 00:00:17 GMT"])

    def test_request_headers(self) -> None:
        self.assertEqual(Validators('"abc"', T).headers(), [(b"If-None-Match", b'"abc"'),
                                                           (b"If-Modified-Since", b"Tue, 14 Nov 2023 22:13:20 GMT")])
        self.assertEqual(Validators(None, T).headers(), [(b"If-Modified-Since", http_date(T).encode())])
        self.assertEqual(Validators('"a"').headers(), [(b"If-None-Match", b'"a"')])

    def test_a_304_may_update_them(self) -> None:
        old = Validators('"a"', T)
        self.assertEqual(old.updated(None), old)
        self.assertEqual(old.updated(Validators('"b"')), Validators('"b"', T))
        self.assertEqual(old.updated(Validators(None, T + 5)), Validators('"a"', T + 5))

    def test_kept_in_a_few_bytes_both_ways(self) -> None:
        for v in (Validators('"abc"', T), Validators('W/"x"'), Validators(None, T), Validators("a", 1)):
            self.assertEqual(cg.unpack(cg.pack(v)), v)
            self.assertEqual(cg.from_text(cg.to_text(v)), v)
        self.assertEqual(len(cg.pack(Validators('"5f2b-1a"', T))), 4 + 9)
        self.assertEqual(cg.to_text(Validators('"5f2b-1a"', T)), '1700000000 "5f2b-1a"')
        for empty in (None, b"", b"\x00\x00\x00\x00"):
            self.assertIsNone(cg.unpack(empty))
        for bad in (None, "", b"", "- ", "x "):
            self.assertIsNone(cg.from_text(bad))


# -- a real site --------------------------------------------------------------------------------------------


class Versioned(resource.Resource):
    """Pages whose validator is an ETag (paths under /e/), a Last-Modified (/m/) or none (/n/), each in a version
    the test can change (``bump``); a conditional GET that matches gets 304 from twisted.web's own ``setETag`` and
    ``setLastModified``.  Logs each request: path and its If-None-Match and If-Modified-Since."""

    isLeaf = True

    def __init__(self, pages: dict[str, Callable[[int], bytes]]) -> None:
        super().__init__()
        self.pages = pages
        self.versions: Counter[str] = Counter()
        self.log: list[tuple[str, str | None, str | None]] = []

    def bump(self, path: str) -> None:
        self.versions[path] += 1

    def requests(self, path: str) -> list[tuple[str | None, str | None]]:
        return [(tag, date) for p, tag, date in self.log if p == path]

    def render_GET(self, request: Any) -> bytes:
        path = request.path.decode()
        header = request.getHeader
        self.log.append((path, header("if-none-match"), header("if-modified-since")))
        if path not in self.pages:
            request.setResponseCode(404)
            return b"no"
        version = self.versions[path]
        if path.startswith("/e/") and request.setETag(f'"{path.strip("/")}-v{version}"'.encode()) == http.CACHED:
            return b""
        if path.startswith("/m/") and request.setLastModified(T + 1000 * version) == http.CACHED:
            return b""
        request.setHeader(b"content-type", b"text/html")
        return self.pages[path](version)


def serve(test: unittest.TestCase, site: resource.Resource) -> str:
    factory = server.Site(site)
    factory.noisy = False
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    test.addCleanup(port.stopListening)
    return f"http://127.0.0.1:{port.getHost().port}"


def page(body: str) -> Callable[[int], bytes]:
    return lambda version: f"<html><body><h1>v{version}</h1>{body}</body></html>".encode()


class FetcherTests(unittest.TestCase):
    """The fetcher reads a 200's validators and sends them back; the site answers 304."""

    timeout = 10

    def setUp(self) -> None:
        self.site = Versioned({"/e/1": page(""), "/m/1": page(""), "/n/1": page("")})
        self.base = serve(self, self.site)
        self.fetcher = Fetcher(reactor, FetchConfig(timeout=5))
        self.addCleanup(self.fetcher.close)

    @defer.inlineCallbacks
    def test_etag_sent_back_gets_304(self) -> Any:
        first = yield self.fetcher.fetch(self.base + "/e/1")
        self.assertEqual((first.status, first.validators), (200, Validators('"e/1-v0"')))
        again = yield self.fetcher.fetch(self.base + "/e/1", validators=first.validators)
        self.assertEqual((again.status, again.body, again.validators), (304, b"", Validators('"e/1-v0"')))
        self.assertEqual(self.site.requests("/e/1"), [(None, None), ('"e/1-v0"', None)])
        self.site.bump("/e/1")
        changed = yield self.fetcher.fetch(self.base + "/e/1", validators=first.validators)
        self.assertEqual((changed.status, changed.validators), (200, Validators('"e/1-v1"')))
        self.assertIn(b"v1", changed.body)

    @defer.inlineCallbacks
    def test_last_modified_sent_back_gets_304(self) -> Any:
        first = yield self.fetcher.fetch(self.base + "/m/1")
        self.assertEqual((first.status, first.validators), (200, Validators(None, T)))
        again = yield self.fetcher.fetch(self.base + "/m/1", validators=first.validators)
        self.assertEqual(again.status, 304)
        self.assertEqual(self.site.requests("/m/1")[1], (None, http_date(T)))

    @defer.inlineCallbacks
    def test_no_validators_no_conditional_request(self) -> Any:
        first = yield self.fetcher.fetch(self.base + "/n/1")
        self.assertEqual((first.status, first.validators), (200, None))
        yield self.fetcher.fetch(self.base + "/n/1")
        self.assertEqual(self.site.requests("/n/1"), [(None, None), (None, None)])


# -- whole crawls: the hub and recrawl intervals on a Clock ------------------------------------------------

START = float(T)
HUB_SPAN, LIST_EVERY, DETAIL_EVERY = 300.0, 600.0, 1200.0
SITES = [{
    "name": "versioned",
    "allowed_hosts": ["127.0.0.1"],
    "list_urls": [r"/[emn]/list$"],
    "detail_urls": [r"/[emn]/p/\d+$"],
    "fields": {"title": "//h1/text()"},
    "recrawl_list": LIST_EVERY,
    "recrawl_detail": DETAIL_EVERY,
}]
PAGES = {
    "/e/hub": page('<a href="/m/list">m</a><a href="/n/list">n</a>'),  # a hub with an ETag
    "/m/list": page('<a href="/e/p/1">1</a><a href="/m/p/2">2</a>'),  # a list page with a Last-Modified
    "/n/list": page('<a href="/e/p/1">1</a>'),  # a list page without validators
    "/e/p/1": page(""),  # detail pages: an ETag, a Last-Modified
    "/m/p/2": page(""),
}


class RecordingStore:
    """A page store that records what it was asked to save."""

    preset = None

    def __init__(self) -> None:
        self.saved: list[str] = []

    def save(self, url: str, urlhash: int, html: bytes, compressed: Any = None,
             digest: str | None = None) -> defer.Deferred[None]:
        self.saved.append(url)
        return defer.succeed(None)


class CrawlTests(unittest.TestCase):
    """A CrawlService, its Recrawler, a memory pool, the real fetcher, parser and item writer, the node's API; the
    site on 127.0.0.1, time on a Clock (the hub's span, the recrawl intervals)."""

    timeout = 60

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.site = Versioned(PAGES)
        self.base = serve(self, self.site)
        self.dir = Path(tempfile.mkdtemp(prefix="spiderd-conditional-"))
        self.addCleanup(shutil.rmtree, self.dir, True)

    def open_pool(self, **options: Any) -> defer.Deferred[Any]:
        return defer.succeed(open_memory_pool(self.clock, **options))

    @defer.inlineCallbacks
    def crawl(self, conditional_get: bool = True) -> Any:
        settings = cfg.from_dict({"fetch": {"conditional_get": conditional_get}, "batch": {"targets": []},
                                  "sites": SITES}, "<test>")
        policy = RecrawlPolicy.from_sites(settings.sites)
        self.pool = yield self.open_pool(politeness=Politeness(concurrency=10), recrawl=policy.pairs(),
                                         conditional_get=settings.fetch.conditional_get)
        self.addCleanup(self.pool.close)
        clocked = ClockedReactor(reactor, self.clock)
        self.fetcher = Fetcher(clocked, FetchConfig(timeout=10))
        self.addCleanup(self.fetcher.close)
        parser = ParsePool(reactor, rules_of(settings.raw), 0)
        parser.startService()
        self.addCleanup(parser.stopService)
        self.items = ItemWriter(reactor, str(self.dir / "items"), flush_interval=0.01, pool=self.pool)
        self.items.startService()
        self.addCleanup(self.items.stopService)
        yield self.items.ready
        self.store = RecordingStore()
        self.stats = CrawlStats(self.clock)
        self.crawler = CrawlService(clocked, self.pool, self.fetcher, PageSteps(clocked, parser, self.store), parser.rules,
                                    self.stats, items=self.items, concurrency=4,
                                    conditional_get=settings.fetch.conditional_get)
        self.recrawler = Recrawler(self.clock, self.pool, policy, lambda: self.stats.counts["requests"], every=60,
                                   batch=100)
        yield self.pool.set_hubs([self.base + "/e/hub"], HUB_SPAN)
        for service in (self.recrawler, self.crawler):
            service.startService()
            self.addCleanup(service.stopService)
        yield self.settle(lambda: self.visits() == {path: 1 for path in PAGES})

    def visits(self) -> Counter[str]:
        return Counter(path for path, _, _ in self.site.log)

    def idle(self) -> bool:
        """Nothing under way: no pop, fetch or processing, no item waiting, no recrawl run."""
        crawler = self.crawler
        return (not crawler._popping and crawler.fetching == 0 and crawler.processing == 0 and not self.items._queue
                and not len(self.recrawler._work))

    @defer.inlineCallbacks
    def settle(self, predicate: Callable[[], bool], real_seconds: float = 10.0) -> Any:
        """Turn the real reactor (at least once: Redis answers through it) and run the Clock's due calls until
        ``predicate()`` and nothing is under way."""
        for _ in range(int(real_seconds / 0.005)):
            self.clock.advance(0)
            yield task.deferLater(reactor, 0.002, lambda: None)
            if predicate() and self.idle():
                return
        raise AssertionError(f"timed out waiting; visits {dict(self.visits())}")

    @defer.inlineCallbacks
    def until(self, when: float, step: float = 20.0) -> Any:
        """Let clock time pass up to ``when`` (from START), in steps, the crawl settling after each."""
        while self.clock.seconds() < START + when:
            self.clock.advance(min(step, START + when - self.clock.seconds()))
            yield self.settle(lambda: True)

    def items_written(self) -> list[str]:
        return [json.loads(line)["url"] for p in sorted((self.dir / "items").glob("*.jl*")) for line in p.open()]

    @defer.inlineCallbacks
    def api(self) -> Any:
        node = Node("all", self.clock, stats=self.stats, pool=self.pool, crawler=self.crawler)
        service = start_api(reactor, node, self.clock)
        self.addCleanup(service.stopService)
        status = yield self.fetcher.fetch(service.url + "api/status")
        metrics = yield self.fetcher.fetch(service.url + "metrics")
        return json.loads(status.body), metrics.body.decode()

    @defer.inlineCallbacks
    def test_recrawls_send_the_validators_and_304s_change_nothing(self) -> Any:
        """The hub (its span), the list pages (recrawl_list) and the detail pages (recrawl_detail) come back
        with the ETag or Last-Modified of their last 200; a 304 is done again with no parse, no item, no stored
        page and no link added again, and counted in the status and the metrics; a page without validators is
        fetched in full; a page that changed answers 200 and its new validators replace the old."""
        yield self.crawl()
        url = lambda path: self.base + path  # noqa: E731
        first = (sorted(self.items_written()), sorted(self.store.saved), self.stats.counts["links_list"])
        self.assertEqual(first[:2], ([url("/e/p/1"), url("/m/p/2")], [url("/e/p/1"), url("/m/p/2")]))
        self.assertEqual(self.site.requests("/e/hub"), [(None, None)])
        self.site.bump("/m/p/2")  # changes before its recrawl
        yield self.until(HUB_SPAN + 60)  # the hub's span passed
        self.assertEqual(self.site.requests("/e/hub"), [(None, None), ('"e/hub-v0"', None)])
        self.assertEqual((self.stats.counts["not_modified"], self.stats.counts["links_list"]), (1, first[2]))
        yield self.until(DETAIL_EVERY + 120)  # every recrawl interval passed
        self.assertEqual(self.site.requests("/m/list")[1], (None, http_date(T)))
        self.assertEqual(self.site.requests("/n/list")[1], (None, None))  # no validators: a plain GET, parsed
        self.assertEqual(self.site.requests("/e/p/1")[1], ('"e/p/1-v0"', None))
        self.assertEqual(self.site.requests("/m/p/2")[1], (None, http_date(T)))
        self.assertEqual(self.visits()["/e/p/1"], 2)
        # /e/p/1 answered 304: no second item, not stored again; /m/p/2 changed: a new item, stored again
        self.assertEqual(sorted(self.items_written()), [url("/e/p/1"), url("/m/p/2"), url("/m/p/2")])
        self.assertEqual(sorted(self.store.saved), [url("/e/p/1"), url("/m/p/2"), url("/m/p/2")])
        self.assertEqual(set(self.site.requests("/m/list")[1:]), {(None, http_date(T))})
        not_modified = sum(self.visits()[path] - 1 for path in ("/e/hub", "/m/list", "/e/p/1"))  # all 304s
        self.assertEqual(self.stats.counts["not_modified"], not_modified)
        self.assertEqual(self.stats.statuses["304"], not_modified)
        why = yield self.pool.why(url("/m/p/2"))
        self.assertEqual((why["state"], why["validators"]), ("done", {"etag": None, "last_modified": T + 1000}))
        self.assertEqual((yield self.pool.stats())["done"], 5)
        status, metrics = yield self.api()
        self.assertEqual(status["counts"]["not_modified"], not_modified)
        self.assertIn(f"spiderd_not_modified_total {not_modified}.0", metrics)
        yield self.until(DETAIL_EVERY + 120 + DETAIL_EVERY + 60)  # the new Last-Modified is sent next time
        self.assertEqual(self.site.requests("/m/p/2")[2], (None, http_date(T + 1000)))
        self.assertEqual(len(self.items_written()), 3)

    @defer.inlineCallbacks
    def test_conditional_get_off(self) -> Any:
        """With [fetch] conditional_get = false no validator is kept or sent: every recrawl is a plain GET, parsed."""
        yield self.crawl(conditional_get=False)
        yield self.until(DETAIL_EVERY + 120)
        self.assertTrue(all(visits >= 2 for visits in self.visits().values()), self.visits())
        self.assertEqual({(tag, date) for _, tag, date in self.site.log}, {(None, None)})
        self.assertEqual(self.stats.counts["not_modified"], 0)
        self.assertEqual(len(self.items_written()), 4)
        self.assertNotIn("validators", (yield self.pool.why(self.base + "/e/hub")))


class RedisCrawlTests(RedisKeys, CrawlTests):
    """The same crawls over the Redis pool."""

    def open_pool(self, **options: Any) -> defer.Deferred[Any]:
        politeness = options.pop("politeness")
        return self.open_redis(self.clock, politeness, options)
