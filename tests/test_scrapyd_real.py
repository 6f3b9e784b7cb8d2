"""Real Scrapyd 1.6 in the tests (issue 34 items 3 and 4): started on a free port of 127.0.0.1 with
examples/scrapyd-project (its project named in scrapyd.conf's [settings], no egg to build), it runs spiderd's
batches: those of the frontier's batcher, and those of a user's own CrawlSpider through BatchMiddleware.  Every
item arrives once; a batch over Scrapyd's 128 KiB argument limit is split.  Skipped where Scrapyd is missing."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer, protocol, reactor, task
from twisted.trial import unittest
from treq.client import HTTPClient
from twisted.web.client import Agent, HTTPConnectionPool

from spiderd.config.sections import BatchSection
from spiderd.core.urls import canonicalize
from spiderd.demo.pages import SiteSpec
from spiderd.demo.site import listen
from spiderd.frontier.batcher import Batcher
from spiderd.frontier.batchwire import SETTING_PREFIX
from spiderd.frontier.pool import open_memory_pool

from .test_batch_middleware import feed_items, run_spider

pytest.importorskip("scrapyd", reason="Scrapyd is not installed here (it is in spiderd's [test] extras)")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "scrapyd-project"
ARG_MAX_STRLEN = 128 * 1024  # Linux's MAX_ARG_STRLEN

SCRAPYD_CONF = """\
[scrapyd]
bind_address = 127.0.0.1
http_port = {port}
eggs_dir = {work}/eggs
logs_dir = {work}/logs
items_dir =
dbs_dir = {work}/dbs
max_proc = 4
poll_interval = 0.2

[settings]
spiderd = shopproject.settings
"""

# The example project's site rules, but detail URLs may carry a query (the padded URLs of the 128 KiB batch).
SITES = """\
[[sites]]
name = "demo-shop"
allowed_hosts = ["127.0.0.1"]
list_urls = ['/$', '/list/\\d+\\.html$']
detail_urls = ['/item/\\d+\\.html(\\?.*)?$']

[sites.fields]
title = "css:h1.title::text"
price = "css:span.price::text"
"""


def free_port() -> int:
    """A port of 127.0.0.1 free now (Scrapyd 1.6 takes no port 0: http_port 0 leaves it without a web service)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ScrapydProcess(protocol.ProcessProtocol):
    """Scrapyd's process: ``port`` fires with the port it listens on (its log line), ``ended`` at its exit."""

    def __init__(self) -> None:
        self.port: defer.Deferred[int] = defer.Deferred()
        self.ended: defer.Deferred[None] = defer.Deferred()
        self.output = ""

    def outReceived(self, data: bytes) -> None:
        self.output += data.decode("utf-8", "replace")
        found = re.search(r"Site starting on (\d+)", self.output)
        if found and not self.port.called:
            self.port.callback(int(found.group(1)))

    errReceived = outReceived

    def processEnded(self, reason: Any) -> None:
        if not self.port.called:
            self.port.errback(RuntimeError(f"scrapyd exited: {self.output[-2000:]}"))
        self.ended.callback(None)


class RealScrapydTests(unittest.TestCase):
    """Scrapyd 1.6 (a process) runs examples/scrapyd-project's spider on the batches; the demo shop here."""

    timeout = 240

    @defer.inlineCallbacks
    def setUp(self) -> Any:
        self.work = Path(tempfile.mkdtemp(prefix="spiderd-scrapyd-"))
        self.addCleanup(shutil.rmtree, self.work, True)
        self.spec = SiteSpec(lists=3, details=40, faults=False)
        port = listen(self.spec, reactor)
        self.addCleanup(port.stopListening)
        self.site = f"http://127.0.0.1:{port.getHost().port}"
        self.feeds = str(self.work / "feeds")
        (self.work / "scrapyd.conf").write_text(SCRAPYD_CONF.format(work=self.work, port=free_port()))
        (self.work / "spiderd.toml").write_text(SITES)
        (self.work / "scrapy.cfg").write_text("[settings]\nspiderd = shopproject.settings\n")  # (Scrapyd's runner)
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("SCRAPY")},
               "PYTHONPATH": str(EXAMPLE), "SPIDERD_CONFIG": str(self.work / "spiderd.toml")}
        scrapyd = ScrapydProcess()
        process = reactor.spawnProcess(scrapyd, sys.executable, [sys.executable, "-m", "scrapyd", "--nodaemon",
                                                                 "--pidfile="], env=env, path=str(self.work))
        self.addCleanup(self._stop, process, scrapyd)
        self.port = yield scrapyd.port
        self.base = f"http://127.0.0.1:{self.port}"
        pool = HTTPConnectionPool(reactor, persistent=False)
        self.http = HTTPClient(Agent(reactor, pool=pool))

    @staticmethod
    def _stop(process: Any, scrapyd: ScrapydProcess) -> Any:
        if not scrapyd.ended.called:
            process.signalProcess("TERM")
        return scrapyd.ended

    @defer.inlineCallbacks
    def api(self, endpoint: str, **query: str) -> Any:
        response = yield self.http.get(f"{self.base}/{endpoint}", params=query)
        return json.loads((yield response.content()))

    @defer.inlineCallbacks
    def jobs_finished(self, count: int) -> Any:
        """Polls Scrapyd (another process: nothing tells this one) until ``count`` jobs are listed, all finished;
        fires with them."""
        while True:
            listed = yield self.api("listjobs.json", project="spiderd")
            if len(listed["finished"]) >= count and not listed["pending"] and not listed["running"]:
                return listed["finished"]
            yield task.deferLater(reactor, 0.2, lambda: None)

    def detail_urls(self) -> list[str]:
        return sorted(self.site + path for path in self.spec.expected().details_ok)

    @defer.inlineCallbacks
    def test_the_frontier_s_batches_run_on_scrapyd(self) -> Any:
        """spiderd's batcher sends the details to Scrapyd's schedule.json; the example project's spider makes one
        item of each URL; a batch whose URLs would make a setting over 128 KiB goes as several jobs, each setting
        under max_setting_bytes."""
        padded = [f"{self.site}/item/{1 + i % 40}.html?v={i}&pad={'x' * 1500}" for i in range(100)]
        urls = self.detail_urls() + padded
        assert len(SETTING_PREFIX + json.dumps(padded)) > ARG_MAX_STRLEN  # one batch of them would be lost
        config = BatchSection((f"127.0.0.1:{self.port}",), project="spiderd", spider="demo-shop", size=1000,
                              feed_uri=f"file://{self.feeds}/%(batch)s_%(name)s_%(time)s.jl", flush_interval=3600,
                              timeout=60)  # (Scrapyd lists its spiders at each schedule.json: slow on a busy machine)
        spool = tempfile.mkdtemp(prefix="spiderd-batches-", dir=self.work)
        batcher = Batcher(reactor, open_memory_pool(reactor), spool, config)
        batcher.startService()
        yield batcher.add(urls)
        yield batcher.stopService()  # seals the open batch, waits for every POST
        self.assertEqual((batcher.status()["spooled"], batcher.failures), (0, 0))
        jobs = yield self.jobs_finished(batcher.sent)
        self.assertGreaterEqual(batcher.sent, 2)  # 140 URLs (157 KB) in one batch of 1000: split by bytes
        self.assertEqual(len(jobs), batcher.sent)
        items = feed_items(self.feeds)
        self.assertEqual(sorted(i["url"] for i in items), sorted(canonicalize(u) for u in urls))
        self.assertTrue(all(i["title"] for i in items))

    @defer.inlineCallbacks
    def test_a_crawlspider_s_details_run_on_scrapyd(self) -> Any:
        """A user's own CrawlSpider with BatchMiddleware: its detail rule's requests go to Scrapyd in batches (seed
        003), and every detail page is one item, once."""
        code, output = yield run_spider(self.work, self.site + "/", [f"127.0.0.1:{self.port}"], self.feeds,
                                        "spiderd", jobdir=str(self.work / "job"),
                                        DISTRIBUTED_TIMEOUT="60")  # (Scrapyd lists its spiders at each schedule)
        self.assertEqual(code, 0, output[-3000:])
        sent = re.search(r"BatchMiddleware: (\d+) URLs sent in (\d+) batches; 0 batches left", output)
        self.assertIsNotNone(sent, output[-3000:])
        assert sent is not None
        self.assertEqual(int(sent.group(1)), 40)
        yield self.jobs_finished(int(sent.group(2)))
        items = feed_items(self.feeds)
        self.assertEqual(sorted(i["url"] for i in items), self.detail_urls())
