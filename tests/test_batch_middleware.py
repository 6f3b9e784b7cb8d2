"""Seed 003 as a Scrapy spider middleware (issue 34 item 3): spiderd.contrib.scrapy.BatchMiddleware diverts one
CrawlSpider rule's requests into batches POSTed to Scrapyd-compatible nodes.

The parts run in this process against an HTTP stand-in for schedule.json, time on a Clock; whole Scrapy crawls
run as ``scrapy runspider`` processes against a spiderd worker here.  The same crawl against a real Scrapyd is in
tests/test_scrapyd_real.py."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial import unittest

from spiderd.core.lifecycle import wait_idle
from spiderd.core.net.listener import Listen
from spiderd.demo.pages import SiteSpec
from spiderd.demo.site import listen
from spiderd.feed.shipper import FeedShipper
from spiderd.fetch.fetcher import FetchConfig, Fetcher
from spiderd.store import open_store
from spiderd.worker import WorkerService
from spiderd.worker.config import WorkerConfig

from .test_batcher import BatcherCase

pytest.importorskip("scrapy", reason="Scrapy is not installed here (pip install spiderd[scrapy])")

from scrapy import Spider  # noqa: E402
from scrapy.crawler import Crawler  # noqa: E402
from scrapy.http import Request  # noqa: E402

from spiderd.contrib.scrapy import BatchMiddleware, BatchSettingError  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# A user's own CrawlSpider over the demo shop: rule 0 follows the list pages, rule 1 (the detail pages) is the
# rule the middleware sends to workers.
SPIDER = '''
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


class Shop(CrawlSpider):
    name = "demo-shop"
    start_urls = [{root!r}]
    rules = (
        Rule(LinkExtractor(allow=r"/list/\\d+\\.html$"), follow=True),
        Rule(LinkExtractor(allow=r"/item/\\d+\\.html$"), callback="parse_item"),
    )

    def parse_item(self, response):
        raise AssertionError("a detail page was fetched here, not by a worker: " + response.url)
'''


def crawler(**settings: Any) -> Crawler:
    values = {"TELNETCONSOLE_ENABLED": False, "DISTRIBUTED_TARGET_RULE": 1, "BOT_NAME": "shop", **settings}
    return Crawler(Spider, settings=values)


def details(start: int, count: int, rule: int = 1) -> list[Request]:
    return [Request(f"http://shop.example/item/{i}.html", meta={"rule": rule}) for i in range(start, start + count)]


class PartsTests(BatcherCase):
    """The middleware in this process: Scrapy's crawler and signals, the batcher's POSTs to a stand-in."""

    def middleware(self, targets: list[str], **settings: Any) -> tuple[BatchMiddleware, Spider]:
        mw = BatchMiddleware(crawler(DISTRIBUTED_TARGET_HOSTS=targets, **settings), reactor=reactor, clock=self.clock)
        spider = Spider(name="demo-shop")
        mw.spider_opened(spider)
        return mw, spider

    @defer.inlineCallbacks
    def close(self, mw: BatchMiddleware, spider: Spider) -> Any:
        yield defer.Deferred.fromCoroutine(mw.spider_closed(spider, "finished"))

    @defer.inlineCallbacks
    def test_the_rule_s_get_requests_go_in_batches(self) -> Any:
        """Of a response's output, the GET requests of DISTRIBUTED_TARGET_RULE are diverted (deduplicated); items,
        other rules' requests and POSTs go on; a full batch is POSTed at once, as seed 003 does."""
        jobdir = tempfile.mkdtemp(prefix="spiderd-mw-")
        self.addCleanup(shutil.rmtree, jobdir, True)
        mw, spider = self.middleware([self.target()], DISTRIBUTED_BATCH_SIZE=5, JOBDIR=jobdir,
                                     DISTRIBUTED_TARGET_FEED_URL="file:///feeds/%(batch)s_%(name)s_%(time)s.jl")
        other = Request("http://shop.example/list/2.html", meta={"rule": 0})
        post = Request("http://shop.example/item/99.html", method="POST", meta={"rule": 1})
        output = [{"an": "item"}, *details(0, 4), other, post, *details(2, 4)]
        self.assertEqual(list(mw.process_spider_output(None, output, spider)), [{"an": "item"}, other, post])
        yield self.settle(mw.batcher)
        (sent,) = self.nodes[0].batches
        self.assertEqual(sent["urls"], [f"http://shop.example/item/{i}.html" for i in range(5)])
        fields = dict(sent["fields"])
        self.assertEqual((fields["project"], fields["spider"], fields["batch"]), ("shop", "demo-shop", "1"))
        self.assertEqual(sent["settings"]["FEED_URI"], "file:///feeds/%(batch)s_%(name)s_%(time)s.jl")
        yield self.close(mw, spider)
        self.assertEqual(len(self.nodes[0].batches), 2)  # the partial batch at the close
        self.assertEqual(self.nodes[0].batches[1]["urls"], ["http://shop.example/item/5.html"])

    @defer.inlineCallbacks
    def test_async_output_too(self) -> Any:
        """Scrapy's asynchronous callbacks go through process_spider_output_async alike."""
        mw, spider = self.middleware([self.target()])

        async def output() -> Any:
            yield {"an": "item"}
            for request in details(0, 3):
                yield request

        passed = []
        async def drain() -> None:
            async for x in mw.process_spider_output_async(None, output(), spider):
                passed.append(x)

        yield defer.Deferred.fromCoroutine(drain())
        self.assertEqual(passed, [{"an": "item"}])
        yield self.close(mw, spider)
        self.assertEqual(self.nodes[0].batches[0]["urls"], [f"http://shop.example/item/{i}.html" for i in range(3)])

    @defer.inlineCallbacks
    def test_a_partial_batch_goes_on_a_timer(self) -> Any:
        """A partial batch is sent DISTRIBUTED_FLUSH_INTERVAL seconds after its first URL, not only at the close."""
        mw, spider = self.middleware([self.target()], DISTRIBUTED_FLUSH_INTERVAL=10)
        list(mw.process_spider_output(None, details(0, 3), spider))
        yield mw.batcher._lock.run(lambda: None)
        self.clock.advance(9)
        yield self.settle(mw.batcher)
        self.assertEqual(self.nodes[0].batches, [])
        self.clock.advance(1)
        yield self.settle(mw.batcher)
        self.assertEqual(len(self.nodes[0].batches[0]["urls"]), 3)
        yield self.close(mw, spider)

    @defer.inlineCallbacks
    def test_seen_set_batch_numbers_and_spool_persist_in_jobdir(self) -> Any:
        """A second run with the same JOBDIR sends no URL again and numbers its batches on; batches no target
        took in one run are sent by the next."""
        jobdir = tempfile.mkdtemp(prefix="spiderd-mw-")
        self.addCleanup(shutil.rmtree, jobdir, True)
        mw, spider = self.middleware([self.closed_target()], JOBDIR=jobdir, DISTRIBUTED_BATCH_SIZE=2)
        list(mw.process_spider_output(None, details(0, 3), spider))
        yield self.close(mw, spider)
        self.assertEqual(sorted(n for n in os.listdir(os.path.join(jobdir, "spiderd-batches", "spool"))
                                if n.startswith("batch-")), ["batch-1.json", "batch-2.json"])
        mw, spider = self.middleware([self.target()], JOBDIR=jobdir, DISTRIBUTED_BATCH_SIZE=2)
        list(mw.process_spider_output(None, details(0, 5), spider))  # 0-2 seen in the first run
        yield self.close(mw, spider)
        sent = {batch["batch"]: batch["urls"] for batch in self.nodes[0].batches}
        self.assertEqual(sorted(u for urls in sent.values() for u in urls),
                         [f"http://shop.example/item/{i}.html" for i in range(5)])  # each once
        self.assertEqual(sorted(sent), ["1", "2", "3"])
        self.assertEqual(sent["3"], ["http://shop.example/item/3.html", "http://shop.example/item/4.html"])

    @defer.inlineCallbacks
    def test_no_batch_over_the_setting_limit(self) -> Any:
        """A batch whose DISTRIBUTED_START_URLS would exceed DISTRIBUTED_MAX_SETTING_BYTES is split."""
        mw, spider = self.middleware([self.target()], DISTRIBUTED_MAX_SETTING_BYTES=2000)
        list(mw.process_spider_output(None, details(0, 200), spider))
        yield self.close(mw, spider)
        batches = self.nodes[0].batches
        self.assertGreater(len(batches), 2)
        self.assertTrue(all(len("DISTRIBUTED_START_URLS=" + json.dumps(b["urls"])) <= 2000 for b in batches))
        self.assertEqual(sum(len(b["urls"]) for b in batches), 200)

    def test_bad_settings_are_named(self) -> None:
        for name, value in (("DISTRIBUTED_BATCH_SIZE", 0), ("DISTRIBUTED_MAX_SETTING_BYTES", 200_000),
                            ("DISTRIBUTED_FLUSH_INTERVAL", "soon")):
            with self.assertRaises(BatchSettingError) as raised:
                BatchMiddleware(crawler(DISTRIBUTED_TARGET_HOSTS=["h:1"], **{name: value}))
            self.assertTrue(str(raised.exception).startswith(f"{name} is invalid"))


@defer.inlineCallbacks
def run_spider(work: Path, root: str, targets: list[str], feeds: str, project: str, jobdir: str = "",
               **settings: Any) -> Any:
    """``scrapy runspider`` of SPIDER over the site at ``root``, its detail pages sent to ``targets``; fires with
    (exit code, output)."""
    script = work / "shop.py"
    script.write_text(SPIDER.format(root=root))
    values = {"SPIDER_MIDDLEWARES": json.dumps({"spiderd.contrib.scrapy.BatchMiddleware": 50}),
              "DISTRIBUTED_TARGET_RULE": "1", "DISTRIBUTED_TARGET_HOSTS": ",".join(targets),
              "DISTRIBUTED_TARGET_PROJECT": project, "DISTRIBUTED_BATCH_SIZE": "7",
              "DISTRIBUTED_TARGET_FEED_URL": f"file://{feeds}/%(batch)s_%(name)s_%(time)s.jl",
              "TELNETCONSOLE_ENABLED": "False", "LOG_LEVEL": "INFO", **settings}
    if jobdir:
        values["JOBDIR"] = jobdir
    args = ["-m", "scrapy", "runspider", str(script)]
    for name, value in values.items():
        args += ["-s", f"{name}={value}"]
    env = {key: value for key, value in os.environ.items() if not key.startswith("SCRAPY_")}
    out, err, code = yield getProcessOutputAndValue(sys.executable, args, env=env, path=str(work))
    return code, (out + err).decode("utf-8", "replace")


def feed_items(feeds: str) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(Path(feeds).glob("*.jl")) for line in path.open()]


class CrawlTests(unittest.TestCase):
    """A real Scrapy crawl (a process) of the demo shop: its detail pages go in batches to a spiderd worker."""

    timeout = 120

    def setUp(self) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="spiderd-mw-crawl-"))
        self.addCleanup(shutil.rmtree, self.work, True)
        self.spec = SiteSpec(lists=3, details=40, faults=False)
        port = listen(self.spec, reactor)
        self.addCleanup(port.stopListening)
        self.root = f"http://127.0.0.1:{port.getHost().port}/"
        self.feeds = str(self.work / "feeds")
        self.worker = self.start_worker()

    def start_worker(self) -> WorkerService:
        from spiderd.config import settings as cfg
        from spiderd.demo.config import DEMO
        from spiderd.fetch.parsepool import ParsePool

        from .helpers import rules_of

        data = str(self.work / "data")
        fetcher = Fetcher(reactor, FetchConfig(timeout=20))
        self.addCleanup(fetcher.close)
        store = open_store("sqlite:///pages.sqlite3", data, reactor, batch_size=5)
        shipper = FeedShipper(reactor, os.path.join(data, "spool"), stop_timeout=5.0)
        settings = cfg.from_dict({"parse": {"workers": 0}, "sites": DEMO["sites"]}, "<test>")
        parser = ParsePool(reactor, rules_of(settings.raw), 0)
        config = WorkerConfig(data_dir=data, listen=Listen("tcp:0:interface=127.0.0.1"), failure_threshold=1,
                              retry_delay=0.0, node_name="test-node", feed_dirs=(self.feeds,))
        worker = WorkerService(reactor, config, fetcher, parser, store, shipper)
        for service in (store, shipper, parser, worker):
            service.startService()
            self.addCleanup(lambda s=service: s.stopService() if s.running else None)
        return worker

    @defer.inlineCallbacks
    def crawl(self, **settings: Any) -> Any:
        target = "%s:%d" % self.worker.address
        code, output = yield run_spider(self.work, self.root, [target], self.feeds, "spiderd", **settings)
        self.assertEqual(code, 0, output[-3000:])
        yield wait_idle(reactor, self.worker.idle, self.worker.settled, interval=3600)
        return output

    @defer.inlineCallbacks
    def test_every_detail_page_arrives_once(self) -> Any:
        """The crawl follows its list pages itself and fetches no detail page; the worker makes one item of each
        detail page; a second run with the same JOBDIR sends nothing again."""
        jobdir = str(self.work / "job")
        output = yield self.crawl(jobdir=jobdir)
        self.assertNotIn("a detail page was fetched here", output)
        expected = sorted(self.root.rstrip("/") + path for path in self.spec.expected().details_ok)
        items = feed_items(self.feeds)
        self.assertEqual(sorted(i["url"] for i in items), expected)
        self.assertIn("BatchMiddleware: 40 URLs sent in 6 batches; 0 batches left in the spool", output)
        output = yield self.crawl(jobdir=jobdir)
        self.assertIn("BatchMiddleware: 0 URLs sent in 0 batches", output)
        self.assertEqual(len(feed_items(self.feeds)), len(expected))
