"""A whole node (pool, fetcher, parser, store, items) crawls the generated site on 127.0.0.1 to completion."""

from __future__ import annotations

import json
import lzma
import shutil
import socket
import tempfile
import sqlite3
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.logger import capturedLogs, formatEvent
from twisted.trial import unittest
from twisted.web import resource, server

from spiderd.config import settings as cfg
from spiderd import tap
from spiderd.demo.config import DEMO
from spiderd.demo.pages import SiteSpec, render
from spiderd.demo.site import listen
from spiderd.core.lifecycle import wait_idle


def node_settings(data_dir: str, root: str, **sections: Any) -> cfg.Settings:
    """The demo's rules pointed at ``root``, with test-sized knobs."""
    raw = {
        "spiderd": {"data_dir": data_dir, "log_interval": 3600},
        "pool": {"seeds": [root], "failure_threshold": 1, "pending_threshold": 60},
        "fetch": {"concurrency": 8, "per_host_concurrency": 8, "timeout": 10},
        "parse": {"workers": 0},
        "batch": {"targets": []},
        "store": {"url": "sqlite:///pages.sqlite3", "batch_size": 10},
        "items": {"rotate_count": 25},
        "api": {"port": 0},
        "sites": DEMO["sites"],
    }
    for section, values in sections.items():
        if isinstance(values, dict):
            raw.setdefault(section, {}).update(values)
        else:
            raw[section] = values
    return cfg.from_dict(raw, "<test>")


@defer.inlineCallbacks
def run_crawl(settings: cfg.Settings) -> Any:
    """Build a node from ``settings``, crawl to the end, stop it; fires with (crawler, pool stats)."""
    cfg.check_data_dir(settings)
    top = tap.build(settings, reactor)
    crawler = top.getServiceNamed("crawler")
    top.startService()
    try:
        yield crawler.finished
        stats = yield crawler.pool.stats()
    finally:
        yield top.stopService()
    return crawler, stats


@defer.inlineCallbacks
def run_with_worker(settings: cfg.Settings) -> Any:
    """Build an all-role node whose batches go to its own worker, crawl to the end (every batch accepted, every
    job run, its feed shipped), stop it; fires with (crawler, batcher, worker).  The end is awaited as the
    work settles, never by a timer: at an hour's fallback interval, a missed wake-up fails the test."""
    cfg.check_data_dir(settings)
    top = tap.build(settings, reactor)
    crawler, batcher, worker = (top.getServiceNamed(n) for n in ("crawler", "batcher", "worker"))
    top.startService()
    try:
        yield crawler.finished
        yield batcher.flush()
        yield wait_idle(reactor, lambda: batcher.idle() and worker.idle(), batcher.settled, worker.settled,
                        interval=3600)
    finally:
        yield top.stopService()
    return crawler, batcher, worker


class CrawlTests(unittest.TestCase):
    """Crawls of a 60-page site with every fault kind."""

    timeout = 60

    def setUp(self) -> None:
        self.spec = SiteSpec(lists=4, details=60, slow_delay=0.05)
        self.port = listen(self.spec, reactor)
        self.addCleanup(self.port.stopListening)
        self.root = f"http://127.0.0.1:{self.port.getHost().port}/"
        self.data = Path(tempfile.mkdtemp(prefix="spiderd-crawl-"))
        self.addCleanup(shutil.rmtree, self.data, True)

    def crawl(self, **sections: Any) -> Any:
        return run_crawl(node_settings(str(self.data), self.root, **sections))

    def stored(self) -> list[str]:
        with sqlite3.connect(self.data / "pages.sqlite3") as db:
            return [row[0] for row in db.execute("SELECT url FROM crawler_html")]

    def items(self) -> list[dict[str, Any]]:
        lines = []
        for path in sorted((self.data / "items").glob("*.jl")):
            lines += [json.loads(line) for line in path.read_text().splitlines()]
        return lines

    @defer.inlineCallbacks
    def test_crawls_everything_once(self) -> Any:
        """Every good detail page is stored once and gives one item; faults end as their statuses say.

        list_urls is empty, so every allowed non-detail link is a list page: the private page is
        handed out, and robots.txt stops it.
        """
        sites = [dict(DEMO["sites"][0], list_urls=[])]
        crawler, stats = yield self.crawl(sites=sites)
        self.check_everything_once(crawler, stats)

    @defer.inlineCallbacks
    def test_fetch_children_crawl_everything_once(self) -> Any:
        """With fetch children (``[fetch] processes``) the same crawl ends the same way, every fault kind included
        (robots.txt, redirects, 404s, 500s retried, slow pages); the pages were fetched, parsed and compressed there
        (each stored html_lzma is the page as served)."""
        sites = [dict(DEMO["sites"][0], list_urls=[])]
        crawler, stats = yield self.crawl(sites=sites, fetch={"processes": 2})
        self.check_everything_once(crawler, stats)
        self.assertGreater(crawler._processor.steps.fetchers.answered_count, len(self.spec.expected().details_ok))
        with sqlite3.connect(self.data / "pages.sqlite3") as db:
            rows = list(db.execute("SELECT url, html_lzma FROM crawler_html"))
        for url, blob in rows:
            self.assertEqual(lzma.decompress(blob), render(self.spec, url[len(self.root) - 1 :])[2])

    def test_the_fetch_processes_are_built_with_the_node_and_shown_in_its_status(self) -> None:
        """[fetch] processes builds one fetch pool, the engine's steps fetch through it and the API's node shows its
        counters; 0 builds none."""
        for processes in (2, 0):
            settings = node_settings(str(self.data / str(processes)), self.root, fetch={"processes": processes})
            cfg.check_data_dir(settings)
            top = tap.build(settings, reactor)
            node = top.getServiceNamed("api").node
            fetchers = top.getServiceNamed("crawler")._processor.steps.fetchers
            self.assertIs(node.fetchers, fetchers)
            self.assertEqual(fetchers.workers if fetchers is not None else 0, processes)

    def check_everything_once(self, crawler: Any, stats: dict[str, Any]) -> None:
        expected = self.spec.expected()
        paths = sorted(u[len(self.root) - 1 :] for u in self.stored())
        self.assertEqual(paths, sorted(expected.details_ok))
        items = self.items()
        self.assertEqual(sorted(i["url"][len(self.root) - 1 :] for i in items), sorted(expected.details_ok))
        self.assertTrue(all(i["title"] and i["price"] for i in items))
        self.assertEqual((stats["waiting"], stats["pending"]), (0, 0))
        self.assertEqual(stats["failed"], len(expected.not_found) + len(expected.server_error) + len(expected.disallowed))
        statuses = crawler.stats.statuses
        self.assertEqual(statuses["404"], len(expected.not_found))
        self.assertEqual(statuses["500"], 2 * len(expected.server_error))  # failure_threshold=1: two tries
        self.assertEqual(statuses["robots"], len(expected.disallowed))

    @defer.inlineCallbacks
    def test_parser_children_and_no_store(self) -> Any:
        """With parser child processes and no page store, the same items come out."""
        _, stats = yield self.crawl(parse={"workers": 2}, store={"url": "none"})
        self.assertEqual(len(self.items()), len(self.spec.expected().details_ok))
        self.assertFalse((self.data / "pages.sqlite3").exists())

    @defer.inlineCallbacks
    def test_pages_compressed_by_parser_children(self) -> Any:
        """With parser children, pages are compressed there; the stored html_lzma is the page as served."""
        yield self.crawl(parse={"workers": 1})
        with sqlite3.connect(self.data / "pages.sqlite3") as db:
            rows = list(db.execute("SELECT url, html_lzma FROM crawler_html"))
        self.assertEqual(len(rows), len(self.spec.expected().details_ok))
        for url, blob in rows[:5]:
            self.assertEqual(lzma.decompress(blob), render(self.spec, url[len(self.root) - 1 :])[2])

    @defer.inlineCallbacks
    def test_all_role_batches_to_its_own_worker(self) -> Any:
        """pool -> batches -> this node's worker (Scrapyd API on loopback) -> one feed file per batch."""
        feeds = self.data / "shipped"
        other = {"name": "other-shop", "allowed_hosts": ["off.site"], "detail_urls": ["/item/"]}
        settings = node_settings(str(self.data), self.root, batch={"targets": ["local"], "size": 20},
                                 worker={"feed_template": f"file://{feeds}/%(batch)s_%(name)s_%(time)s.jl"},
                                 sites=[*DEMO["sites"], other])
        crawler, batcher, worker = yield run_with_worker(settings)
        files = sorted(feeds.glob("*.jl"))
        items = [json.loads(line) for f in files for line in f.open()]
        expected = self.spec.expected().details_ok
        self.assertEqual(sorted(i["url"][len(self.root) - 1 :] for i in items), sorted(expected))
        self.assertEqual(len(files), batcher.status()["sent"])
        self.assertEqual(len(self.stored()), len(expected))
        self.assertGreater(crawler.stats.statuses["200"], len(expected))  # the worker's fetches count in the stats
        self.assertEqual((batcher._spider_of(self.root + "item/1.html"), batcher._spider_of("http://off.site/item/")),
                         (DEMO["sites"][0]["name"], "other-shop"))  # a URL's site names its batch's spider
        self.assertEqual(crawler._fetcher.robots._fetch_raw.keywords, {"redirects": 5})  # robots.txt redirects
        crawler._fetcher.robots._delay("slow.example", 7.0)  # a Crawl-delay reaches the pool and the worker
        self.assertEqual(max(worker.runner._pipeline.queue.politeness.delays("slow.example")), 7.0)
        self.assertEqual(crawler.pool.politeness.slot("slow.example").delay, 7.0)

    @defer.inlineCallbacks
    def test_all_role_with_fetch_children(self) -> Any:
        """The deployed path (batches to the node's own worker) with fetch children: every good detail page once in
        the feeds and the store; the worker's jobs fetched through the children too."""
        feeds = self.data / "shipped"
        settings = node_settings(str(self.data), self.root, batch={"targets": ["local"], "size": 20},
                                 worker={"feed_template": f"file://{feeds}/%(batch)s_%(name)s_%(time)s.jl"},
                                 fetch={"processes": 2})
        crawler, batcher, worker = yield run_with_worker(settings)
        items = [json.loads(line) for f in sorted(feeds.glob("*.jl")) for line in f.open()]
        expected = self.spec.expected().details_ok
        self.assertEqual(sorted(i["url"][len(self.root) - 1 :] for i in items), sorted(expected))
        self.assertEqual(sorted(u[len(self.root) - 1 :] for u in self.stored()), sorted(expected))
        self.assertGreater(crawler._processor.steps.fetchers.answered_count, len(expected))

    @defer.inlineCallbacks
    def test_item_table_holds_each_item_with_its_page(self) -> Any:
        """With [store] item_table (seed 004's pagebase), each stored page's item is in crawler_item too: its
        site, its fields as JSON (queried in SQL), its fetch time, as in the items file; the feed is still written."""
        yield self.crawl(store={"item_table": True})
        with sqlite3.connect(self.data / "pages.sqlite3") as db:
            rows = db.execute("SELECT url, site, json_extract(fields, '$.title'), fields, fetched_at "
                              "FROM crawler_item").fetchall()
        by_url = {item["url"]: item for item in self.items()}
        self.assertEqual(sorted(row[0] for row in rows), sorted(self.stored()))
        self.assertEqual(sorted(by_url), sorted(self.stored()))
        for url, site, title, fields, fetched_at in rows:
            item = by_url[url]
            self.assertEqual((site, title, fetched_at), (DEMO["sites"][0]["name"], item["title"], item["fetched_at"]))
            self.assertEqual(json.loads(fields), {k: v for k, v in item.items()
                                                  if k not in ("url", "urlhash", "status", "fetched_at", "digest")})

    @defer.inlineCallbacks
    def test_second_run_fetches_nothing_again(self) -> Any:
        """A restart on the same data directory hands out nothing that was done: no page is fetched twice."""
        yield self.crawl()
        crawler, stats = yield self.crawl()
        self.assertEqual(crawler.stats.counts["requests"], 0)
        self.assertEqual(len(self.stored()), len(self.spec.expected().details_ok))


FAILING_PAGES = {b"/robots.txt": b"User-agent: *\nDisallow: /private\n", b"/big": b"<html>" + b"x" * 5000 + b"</html>",
                 b"/broken": b"<html>a page its parser chokes on</html>"}


class FailingSite(resource.Resource):
    """A robots.txt that disallows /private, a page of 5 KB at /big, one at /broken, 404 for every other path."""

    isLeaf = True

    def render_GET(self, request: Any) -> bytes:
        page = FAILING_PAGES.get(request.path)
        if page is None:
            request.setResponseCode(404)
            return b"not here"
        return page


class FailureReasonTests(unittest.TestCase):
    """Each way a fetch fails leaves its own reason in the pool's why (a real site and a closed port on 127.0.0.1)."""

    timeout = 60

    def setUp(self) -> None:
        self.port = reactor.listenTCP(0, server.Site(FailingSite()), interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.root = f"http://127.0.0.1:{self.port.getHost().port}/"
        with socket.socket() as s:  # a port nothing listens on: connections are refused at once
            s.bind(("127.0.0.1", 0))
            self.refused = f"http://127.0.0.1:{s.getsockname()[1]}/page"
        self.data = Path(tempfile.mkdtemp(prefix="spiderd-why-"))
        self.addCleanup(shutil.rmtree, self.data, True)

    @defer.inlineCallbacks
    def test_why_tells_each_failure(self) -> Any:
        """A 404, a refused connection, a page over max_body_size, a robots.txt denial and a page whose
        parsing fails: five reasons."""
        urls = {"missing": self.root + "missing", "refused": self.refused, "big": self.root + "big",
                "private": self.root + "private/x", "broken": self.root + "broken"}
        settings = node_settings(str(self.data), self.root, pool={"seeds": list(urls.values())},
                                 fetch={"max_body_size": 1000})
        cfg.check_data_dir(settings)
        top = tap.build(settings, reactor)
        crawler = top.getServiceNamed("crawler")
        parse = crawler._processor.steps._parser.parse  # (the ParsePool the crawl parses with)

        def choke(url: str, *args: Any, **kwargs: Any) -> Any:
            if url.endswith("/broken"):
                return defer.fail(KeyError("no title"))
            return parse(url, *args, **kwargs)

        crawler._processor.steps._parser.parse = choke
        top.startService()
        try:
            yield crawler.finished
            answers = {}
            for name, url in urls.items():
                answers[name] = yield crawler.pool.why(url)
        finally:
            yield top.stopService()
        self.assertEqual({name: a["state"] for name, a in answers.items()}, dict.fromkeys(urls, "failed"))
        reasons = {name: a["last_failure"]["reason"] for name, a in answers.items()}
        self.assertEqual(reasons["missing"], "http 404")
        self.assertTrue(reasons["refused"].startswith("refused: ConnectionRefusedError: "), reasons["refused"])
        self.assertEqual(answers["refused"]["last_failure"]["failures"], 2)  # failure_threshold 1: two tries
        self.assertEqual(reasons["big"], "too large: Content-Length 5013, over the limit of 1000 bytes")
        self.assertEqual(reasons["private"], f"robots: disallowed by {self.root}robots.txt")
        self.assertEqual(reasons["broken"], "processing error: KeyError: 'no title'")
        self.assertEqual(len(self.flushLoggedErrors(KeyError)), 2)  # "Processing ... failed", at each try


class LaneTests(unittest.TestCase):
    """The node's blocking work on the lanes of its one Blocking service."""

    timeout = 60

    @defer.inlineCallbacks
    def test_store_items_and_seeds_work_on_the_nodes_lanes(self) -> Any:
        """The SQLite page store, the items writer and the seeds' file run on the node's ``store``, ``items`` and
        ``seeds`` lanes (of the ``blocking`` service), from their start to their stop."""
        data = Path(tempfile.mkdtemp(prefix="spiderd-lanes-"))
        self.addCleanup(shutil.rmtree, data, True)
        settings = node_settings(str(data), "http://127.0.0.1:9/", pool={"seeds": []})
        cfg.check_data_dir(settings)
        top = tap.build(settings, reactor)
        blocking = top.getServiceNamed("blocking")
        names = ("store", "items", "seeds")
        top.startService()
        try:
            yield top.getServiceNamed("crawler").finished
            self.assertEqual([blocking.lane(n).running for n in names], [True] * len(names))
        finally:
            with capturedLogs() as events:
                yield top.stopService()
        self.assertEqual([blocking.lane(n).running for n in names], [False] * len(names))
        # stopped by their components, not by the blocking service's own stop (the last one), which warns
        self.assertEqual([formatEvent(e) for e in events if "still running at the stop" in formatEvent(e)], [])
