"""Sitemaps in a crawl, against a real twisted.web site on 127.0.0.1: robots.txt names a sitemap index, the index two
sitemaps (one gzip-compressed), the sitemaps ten pages that no page links; plus the reader alone, with an injected
clock: files read once, hostile indexes, the file limit, lastmod on a later read, the settings that turn it off."""

from __future__ import annotations

import gzip
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from twisted.internet import defer, reactor
from twisted.internet.task import Clock, deferLater
from twisted.trial import unittest
from twisted.web import resource, server

from spiderd.config import settings as cfg
from spiderd.core.blocking import Lane
from spiderd.core.stats import CrawlStats
from spiderd.fetch.fetcher import Fetcher, FetchConfig
from spiderd.frontier.pool import open_memory_pool
from spiderd.fetch.extract import Rules
from spiderd.frontier.sitemapservice import SitemapService, sitemap_service

from .test_crawl import node_settings, run_crawl

SITES = [{"name": "maps", "allowed_hosts": ["127.0.0.1"], "list_urls": [r"/$", r"/c/"], "detail_urls": [r"/p/\d+$"],
          "fields": {"title": "//h1/text()"}}]
PAGES = [f"/p/{i}" for i in range(1, 11)]


def urlset(root: str, paths: list[str], lastmod: dict[str, str] | None = None) -> bytes:
    entries = []
    for path in paths:
        mod = (lastmod or {}).get(path)
        url = path if path.startswith("http") else root + path
        entries.append(f"<url><loc>{url}</loc>{f'<lastmod>{mod}</lastmod>' if mod else ''}</url>")
    return (f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f'{"".join(entries)}</urlset>').encode()


def index(root: str, paths: list[str]) -> bytes:
    entries = "".join(f"<sitemap><loc>{root + p}</loc></sitemap>" for p in paths)
    return f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</sitemapindex>'.encode()


class MapSite(resource.Resource):
    """A shop whose pages link nowhere; its robots.txt and sitemap files are set by each test (``files``)."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.requests: Counter[str] = Counter()
        self.files: dict[str, tuple[bytes, str]] = {}  # path -> (body, content type)
        self.root = ""

    def render_GET(self, request: Any) -> bytes:
        path = request.uri.decode()
        self.requests[path] += 1
        if path in self.files:
            body, content_type = self.files[path]
            request.setHeader(b"content-type", content_type.encode())
            return body
        if path == "/" or path.startswith(("/p/", "/c/")):
            request.setHeader(b"content-type", b"text/html; charset=utf-8")
            return f"<html><body><h1>{path}</h1><p>no links here</p></body></html>".encode()
        request.setResponseCode(404)
        return b"not here"

    def robots(self, *sitemaps: str) -> None:
        lines = ["User-agent: *", "Disallow: /private/"] + [f"Sitemap: {s}" for s in sitemaps]
        self.files["/robots.txt"] = ("\n".join(lines).encode(), "text/plain")

    def xml(self, path: str, body: bytes, gzipped: bool = False) -> None:
        self.files[path] = (gzip.compress(body) if gzipped else body,
                            "application/x-gzip" if gzipped else "application/xml")

    def fetched_pages(self) -> set[str]:
        return {p for p in self.requests if p.startswith("/p/") or p.startswith("/c/")}


class SitemapSiteTest(unittest.TestCase):
    timeout = 60

    def setUp(self) -> None:
        self.site = MapSite()
        self.port = reactor.listenTCP(0, server.Site(self.site), interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.root = f"http://127.0.0.1:{self.port.getHost().port}"
        self.data = Path(tempfile.mkdtemp(prefix="spiderd-sitemaps-"))
        self.addCleanup(shutil.rmtree, self.data, True)

    def standard_site(self) -> None:
        """robots.txt -> index -> two sitemaps (the second gzip-compressed) -> the ten pages, linked by no page."""
        self.site.robots(self.root + "/sitemap_index.xml")
        self.site.xml("/sitemap_index.xml", index(self.root, ["/sitemaps/a.xml", "/sitemaps/b.xml.gz"]))
        self.site.xml("/sitemaps/a.xml", urlset(self.root, PAGES[:5] + ["/c/shoes"]))
        self.site.xml("/sitemaps/b.xml.gz", urlset(self.root, PAGES[5:]), gzipped=True)


class SitemapCrawlTests(SitemapSiteTest):
    """Whole nodes crawl the site from / to the end."""

    def crawl(self, **sections: Any) -> Any:
        sections.setdefault("pool", {"seeds": [self.root + "/"]})
        return run_crawl(node_settings(str(self.data), self.root + "/", sites=SITES, **sections))

    @defer.inlineCallbacks
    def test_sitemap_only_pages_are_fetched(self) -> Any:
        """All ten pages known only from the sitemaps are fetched (and the sitemap's list page); every sitemap file is
        read once; the crawl ends only after the sitemaps were read."""
        self.standard_site()
        crawler, stats = yield self.crawl()
        self.assertEqual(self.site.fetched_pages(), set(PAGES) | {"/c/shoes"})
        for path in ("/robots.txt", "/sitemap_index.xml", "/sitemaps/a.xml", "/sitemaps/b.xml.gz", *PAGES):
            self.assertEqual(self.site.requests[path], 1, path)
        self.assertEqual((stats["waiting"], stats["pending"], stats["done"]), (0, 0, 12))
        counts = crawler.stats.counts
        self.assertEqual((counts["sitemaps"], counts["sitemap_urls"], counts.get("sitemap_errors", 0)), (3, 11, 0))
        self.assertEqual(counts["items"], 10)

    @defer.inlineCallbacks
    def test_off_site_and_rejected_urls_are_not_fetched(self) -> Any:
        """URLs of another host, URLs the site rules take as neither list nor detail page, robots.txt-disallowed
        URLs (queued, then refused as any link) and non-HTTP URLs never reach the site; the rest do."""
        self.site.robots(self.root + "/sitemap.xml")
        other = f"http://127.0.0.2:{self.port.getHost().port}"
        self.site.xml("/sitemap.xml", urlset(self.root, [
            "/p/1", "/about.html", other + "/p/2", "ftp://127.0.0.1/p/3", "/private/p/4", "/p/5"]))
        crawler, _ = yield self.crawl()
        self.assertEqual(self.site.fetched_pages(), {"/p/1", "/p/5"})
        self.assertEqual(self.site.requests["/about.html"] + self.site.requests["/private/p/4"], 0)
        self.assertEqual(crawler.stats.counts["sitemap_skipped"], 3)

    @defer.inlineCallbacks
    def test_configured_path_and_the_settings_that_turn_it_off(self) -> Any:
        """Without a Sitemap: line, [sitemaps] paths are tried; from_robots = false ignores robots.txt's lines;
        fetch.robots = false reads no sitemap at all."""
        self.site.robots()  # names none
        self.site.xml("/sitemap.xml", urlset(self.root, ["/p/1"]))
        self.site.xml("/other.xml", urlset(self.root, ["/p/2"]))
        yield self.crawl(sitemaps={"paths": ["/sitemap.xml"]})
        self.assertEqual(self.site.fetched_pages(), {"/p/1"})

        shutil.rmtree(self.data)
        self.site.requests.clear()
        self.site.robots(self.root + "/other.xml")
        yield self.crawl(sitemaps={"from_robots": False, "paths": ["/sitemap.xml"]})
        self.assertEqual((self.site.fetched_pages(), self.site.requests["/other.xml"]), ({"/p/1"}, 0))

        shutil.rmtree(self.data)
        self.site.requests.clear()
        yield self.crawl(fetch={"robots": False}, sitemaps={"paths": ["/sitemap.xml"]})
        self.assertEqual((self.site.fetched_pages(), self.site.requests["/sitemap.xml"]), (set(), 0))

class RobotsSitemapLinesTests(SitemapSiteTest):
    """Robots tells its sitemap listeners what each robots.txt names, before the fetches that waited for it go on."""

    @defer.inlineCallbacks
    def test_listeners_hear_each_read(self) -> Any:
        heard: list[tuple[str, list[str]]] = []
        fetcher = Fetcher(reactor, FetchConfig(user_agent="spiderd/1.0", robots=True))
        self.addCleanup(fetcher.close)
        fetcher.robots.add_sitemap_listener(lambda origin, urls: heard.append((origin, urls)))
        fetcher.robots.add_sitemap_listener(lambda origin, urls: 1 / 0)  # a failing listener harms nobody
        self.site.robots(self.root + "/a.xml", "/relative.xml.gz", self.root + "/a.xml")
        allowed = fetcher.robots.allowed(self.root + "/p/1")
        self.assertEqual(heard, [])
        allowed.addCallback(lambda ok: heard.append(("allowed", [str(ok)])))
        yield allowed
        self.assertEqual(heard, [(self.root, [self.root + "/a.xml", self.root + "/relative.xml.gz"]),
                                 ("allowed", ["True"])])
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)
        other = f"http://localhost:{self.port.getHost().port}"
        del self.site.files["/robots.txt"]  # a 404: no sitemaps, all allowed
        yield fetcher.robots.allowed(other + "/p/1")
        self.assertEqual(heard[-1], (other, []))
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)


class SitemapReaderTests(SitemapSiteTest):
    """The reader alone: a real fetcher and site, a memory pool, an injected clock for the refresh."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()

    def reader(self, detail_sink: Callable[[list[str]], Any] | None = None, **sitemaps: Any) -> Any:
        settings = cfg.from_dict({"sitemaps": sitemaps, "sites": SITES, "batch": {"targets": []}}, "<test>")
        fetcher = Fetcher(reactor, FetchConfig(user_agent="spiderd/1.0", robots=True))
        self.addCleanup(fetcher.close)
        self.pool = open_memory_pool(self.clock)
        self.stats = CrawlStats(self.clock)
        service = sitemap_service(settings.sitemaps, settings.fetch, settings.pool, settings.sites, self.clock,
                                  self.pool, fetcher, Lane(reactor, "sitemaps-test"), self.stats, detail_sink=detail_sink)
        self.kicks: list[None] = []
        service.add_listener(lambda: self.kicks.append(None))
        service.startService()
        self.addCleanup(service.stopService)
        self.robots = fetcher.robots
        return service

    @defer.inlineCallbacks
    def read(self, service: Any) -> Any:
        """Fetch robots.txt (as a fetch of any URL of the host does), then wait for the reader."""
        yield self.robots.allowed(self.root + "/")
        self.assertTrue(service.busy())
        yield service.settled()
        self.assertFalse(service.busy())

    @defer.inlineCallbacks
    def state(self, path: str) -> Any:
        return (yield self.pool.why(self.root + path))["state"]

    @defer.inlineCallbacks
    def test_read_once_per_host(self) -> Any:
        """A host's sitemaps are read once: robots.txt read again (its TTL over) reads nothing more; listeners hear."""
        self.standard_site()
        service = self.reader(refresh=0)
        yield self.read(service)
        self.assertEqual((yield self.pool.stats())["waiting"], 11)
        self.assertTrue(self.kicks)
        service.robots_read(self.root, [self.root + "/sitemap_index.xml"])
        self.assertFalse(service.busy())
        self.assertEqual(self.site.requests["/sitemap_index.xml"], 1)

    @defer.inlineCallbacks
    def test_detail_urls_go_where_the_crawler_sends_them(self) -> Any:
        """With a detail sink (the batcher, with batch targets), sitemap detail URLs go there, list URLs to the pool."""
        self.standard_site()
        sent: list[str] = []
        service = self.reader(detail_sink=lambda urls: defer.succeed(sent.extend(urls) or len(urls)))
        yield self.read(service)
        self.assertEqual(sorted(sent), sorted(self.root + p for p in PAGES))
        self.assertEqual(((yield self.pool.stats())["waiting"], (yield self.state("/c/shoes"))), (1, "waiting"))

    @defer.inlineCallbacks
    def test_sitemap_files_off_the_sites_are_not_fetched(self) -> Any:
        """robots.txt naming a sitemap on a host no [[sites]] entry allows: that file is not fetched; an index's
        sitemap off the sites neither."""
        port = self.port.getHost().port
        self.site.robots(f"http://127.0.0.2:{port}/s.xml", self.root + "/i.xml")
        self.site.xml("/i.xml", index(f"http://127.0.0.3:{port}", ["/s.xml"]))
        service = self.reader()
        yield self.read(service)
        self.assertEqual((self.site.requests["/i.xml"], self.site.requests["/s.xml"]), (1, 0))
        self.assertEqual((self.stats.counts["sitemaps"], self.stats.counts.get("sitemap_errors", 0)), (1, 0))
        self.assertEqual(self.stats.counts["sitemap_skipped"], 1)

    @defer.inlineCallbacks
    def test_index_listing_itself_and_nested_indexes(self) -> Any:
        """An index that lists itself, and an index listed by an index, are not read again or at all; the urlset
        beside them is."""
        self.site.robots(self.root + "/i.xml")
        self.site.xml("/i.xml", index(self.root, ["/i.xml", "/nested.xml", "/s.xml"]))
        self.site.xml("/nested.xml", index(self.root, ["/deep.xml"]))
        self.site.xml("/deep.xml", urlset(self.root, ["/p/9"]))
        self.site.xml("/s.xml", urlset(self.root, ["/p/1"]))
        service = self.reader()
        yield self.read(service)
        self.assertEqual([self.site.requests[p] for p in ("/i.xml", "/nested.xml", "/deep.xml", "/s.xml")],
                         [1, 1, 0, 1])
        self.assertEqual(((yield self.state("/p/1")), (yield self.state("/p/9"))), ("waiting", "unknown"))

    @defer.inlineCallbacks
    def test_max_files_and_hostile_files(self) -> Any:
        """At most max_files files per read; a file that is no sitemap, a 404, a DOCTYPE and a gzip bomb cost one
        fetch each and queue nothing; a file with too many entries gives its first max_urls."""
        maps = ["/bomb.xml.gz", "/missing.xml", "/html.xml", "/doctype.xml", "/many.xml", "/late.xml"]
        self.site.robots(*(self.root + m for m in maps))
        self.site.files["/bomb.xml.gz"] = (gzip.compress(urlset(self.root, ["/p/1"])[:-9] + b" " * (8 << 20)),
                                           "application/octet-stream")
        self.site.xml("/html.xml", b"<html><body><a href='/p/2'>2</a></body></html>")
        self.site.xml("/doctype.xml", b'<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]>'
                      + urlset(self.root, ["/p/3"])[38:])
        self.site.xml("/many.xml", urlset(self.root, [f"/p/{i}" for i in range(100, 120)]))
        self.site.xml("/late.xml", urlset(self.root, ["/p/7"]))
        service = self.reader(max_files=5, max_urls=10, max_size=1 << 20)
        yield self.read(service)
        self.assertEqual(self.site.requests["/late.xml"], 0)
        self.assertEqual([self.site.requests[m] for m in maps[:5]], [1] * 5)
        stats = yield self.pool.stats()
        self.assertEqual(stats["waiting"], 11)  # /p/1 from the bomb's first bytes, then /p/100../p/109
        self.assertEqual(((yield self.state("/p/1")), (yield self.state("/p/110"))), ("waiting", "unknown"))
        self.assertEqual(self.stats.counts["sitemap_errors"], 5)

    @defer.inlineCallbacks
    def test_refresh_and_lastmod(self) -> Any:
        """Every refresh seconds the sitemaps are read again: a done URL whose lastmod is after the previous read is
        queued again; one with an older lastmod, or none, stays done; a new URL is queued. With lastmod = false
        none is queued again."""
        for lastmod in (True, False):
            self.site.requests.clear()
            self.site.robots(self.root + "/s.xml")
            self.site.xml("/s.xml", urlset(self.root, ["/p/1", "/p/2", "/p/3"]))
            service = self.reader(refresh=3600, lastmod=lastmod)
            yield self.read(service)
            done = []
            while len(done) < 3:
                popped = yield self.pool.pop(10)  # one URL of the host at a time
                self.assertTrue(popped)
                yield self.pool.set_statuses([(url, 200) for url in popped])
                done += popped
            self.assertEqual((yield self.pool.stats())["done"], 3)
            first = self.clock.seconds()
            newer, older = _w3c(first + 60), _w3c(first - 60)
            self.site.xml("/s.xml", urlset(self.root, ["/p/1", "/p/2", "/p/3", "/p/4"],
                                           {"/p/1": newer, "/p/2": older}))
            self.clock.advance(3599)
            self.assertFalse(service.busy())
            self.clock.advance(1)
            self.assertTrue(service.busy())
            yield service.settled()
            self.assertEqual(self.site.requests["/s.xml"], 2)
            states = []
            for path in ("/p/1", "/p/2", "/p/3", "/p/4"):
                states.append((yield self.state(path)))
            self.assertEqual(states, ["waiting" if lastmod else "done", "done", "done", "waiting"], lastmod)
            yield service.stopService()

    @defer.inlineCallbacks
    def test_files_of_a_host_are_fetched_per_host_delay_apart(self) -> Any:
        """Two sitemap files of one host are fetched one after the other, the host's delay apart on the clock."""
        self.site.robots(self.root + "/a.xml", self.root + "/b.xml")
        self.site.xml("/a.xml", urlset(self.root, ["/p/1"]))
        self.site.xml("/b.xml", urlset(self.root, ["/p/2"]))
        fetcher = Fetcher(reactor, FetchConfig(user_agent="spiderd/1.0", robots=True))
        self.addCleanup(fetcher.close)
        asked: list[defer.Deferred[None]] = [defer.Deferred(), defer.Deferred()]

        def fetch(url: str, max_size: int) -> Any:
            d = fetcher.fetch_raw(url, max_size)
            d.addCallback(lambda result: (asked.pop(0).callback(None), result)[1])
            return d

        settings = cfg.from_dict({"sites": SITES, "fetch": {"per_host_delay": 5}}, "<test>")
        rules = (Rules(settings.sites), Rules(settings.sites))
        pool = open_memory_pool(self.clock)
        service = SitemapService(self.clock, pool, fetcher.robots, fetch, Lane(reactor, "sitemaps-delay"), rules,
                                 settings.sitemaps, CrawlStats(self.clock), fetching=settings.fetch)
        service.startService()
        self.addCleanup(service.stopService)
        first, second = asked
        yield fetcher.robots.allowed(self.root + "/")
        yield first
        while not self.clock.getDelayedCalls():  # the first file is parsed on the lane, then the delay starts
            yield deferLater(reactor, 0, lambda: None)
        self.assertEqual((self.site.requests["/a.xml"], self.site.requests["/b.xml"]), (1, 0))
        self.clock.advance(4.9)
        self.assertEqual(self.site.requests["/b.xml"], 0)
        self.clock.advance(0.1)
        yield second
        yield service.settled()
        self.assertEqual(((yield pool.stats())["waiting"], self.site.requests["/b.xml"]), (2, 1))


def _w3c(seconds: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
