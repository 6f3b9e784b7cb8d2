"""Seed 004's mod_detail on the deployed path (issue 34 item 2): detail pages sent in batches are recrawled in
batches, fetched by the worker with the validators the pool kept; a 304 is done and unchanged with no item line,
a 200's item says ``"recrawl": true`` with the previous fetch time."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.trial import unittest

from spiderd import tap
from spiderd.config import settings as cfg
from spiderd.core import recrawls
from spiderd.core.conditional import Validators
from spiderd.core.lifecycle import wait_idle
from spiderd.core.recrawls import Recrawl
from spiderd.feed import schema
from spiderd.frontier.batchspool import read_spool
from spiderd.frontier.batchwire import split_recrawls
from spiderd.frontier.pool import open_memory_pool
from spiderd.frontier.scheduler import RecrawlPolicy, Recrawler
from spiderd.worker.jobsettings import SettingError, job_options

from .test_batcher import BatcherCase
from .test_conditional import Versioned, page, serve
from .test_crawl import node_settings

T = 1_700_000_000


class SettingTests(unittest.SynchronousTestCase):
    """DISTRIBUTED_RECRAWL: written by the batcher, read (and checked) by the worker."""

    def test_round_trip(self) -> None:
        pages = [Recrawl("http://a.example/1", T + 0.5, Validators('"v1"', T - 60)), Recrawl("http://a.example/2", T)]
        value = recrawls.setting_value(pages)
        self.assertEqual(json.loads(value)["http://a.example/2"], {"fetched_at": T, "etag": None,
                                                                   "last_modified": None})
        self.assertEqual(list(recrawls.parse(value, 10).values()), pages)
        self.assertEqual(job_options({recrawls.SETTING: value}).recrawl, recrawls.parse(value, 10))

    def test_bad_values_refused(self) -> None:
        for bad in ("[]", "{", '{"u": 1}', '{"u": {}}', '{"u": {"fetched_at": -1}}',
                    '{"u": {"fetched_at": 1, "etag": "with space"}}', '{"u": {"fetched_at": 1, "last_modified": "x"}}',
                    '{"u": {"fetched_at": true}}'):
            with self.assertRaises(SettingError) as raised:
                job_options({recrawls.SETTING: bad})
            self.assertTrue(str(raised.exception).startswith("DISTRIBUTED_RECRAWL is invalid: "), bad)

    def test_split_by_bytes(self) -> None:
        """No DISTRIBUTED_RECRAWL setting of a batch is over the limit, and every page is in one of them."""
        pages = [Recrawl(f"http://a.example/item/{i}", T + i, Validators(f'"{i}"', T)) for i in range(500)]
        chunks = split_recrawls(pages, 4000)
        self.assertGreater(len(chunks), 5)
        self.assertEqual([p for chunk in chunks for p in chunk], pages)
        for chunk in chunks:
            self.assertLessEqual(len((recrawls.PREFIX + recrawls.setting_value(chunk)).encode()), 4000)
        self.assertEqual(len(split_recrawls(pages, 10**7)), 1)

    def test_schema_declares_the_recrawl_columns(self) -> None:
        """Where a site recrawls detail pages the feed's schema declares recrawl and previous_fetched_at, which only
        a recrawl's item holds."""
        sites = cfg.from_dict({"sites": [{"allowed_hosts": ["a.example"], "recrawl_detail": 60}]}, "<t>").sites
        declared = schema.columns(sites)
        self.assertEqual(declared[-2:], [("recrawl", "BOOLEAN"), ("previous_fetched_at", "DOUBLE")])
        line = {"url": "http://a.example/", "urlhash": 1, "status": 200, "fetched_at": 1.0, "digest": None}
        self.assertEqual(schema.problems(line, declared), [])
        self.assertEqual(schema.problems({**line, "recrawl": True, "previous_fetched_at": 0.5}, declared), [])


class RecrawlBatchTests(BatcherCase):
    """The recrawler and the batcher against a real HTTP target; time on a Clock."""

    @defer.inlineCallbacks
    def test_due_pages_go_out_again_in_batches_of_their_own(self) -> Any:
        """Pages sent in batches come back once their interval has passed, in batches of recrawls: the URLs in
        DISTRIBUTED_START_URLS, their previous fetch and validators in DISTRIBUTED_RECRAWL, each setting within
        max_setting_bytes; spooled until accepted; pages of a domain that recrawls nothing never come back."""
        self.clock.advance(T)
        pool = open_memory_pool(self.clock, recrawl=[("shop.example", "detail")])
        b = self.batcher([self.target()], pool=pool, batch_size=10, max_setting_bytes=800)
        urls = [f"http://shop.example/item/{i}.html" for i in range(10)]
        yield b.add(urls + ["http://other.example/item/1.html"])
        yield b.flush()
        yield self.settle(b)
        yield pool.batched_fetched([Recrawl(urls[0], T + 1, Validators('"e0"'))])
        policy = RecrawlPolicy.from_sites(cfg.from_dict(
            {"sites": [{"allowed_hosts": ["shop.example"], "recrawl_detail": 3600}]}, "<t>").sites)
        recrawler = Recrawler(self.clock, pool, policy, lambda: 0, every=60, batch=100, batched=b.add_recrawls)
        self.assertEqual((yield recrawler.run()), 0)
        self.clock.advance(3601)
        self.assertEqual((yield recrawler.run()), 10)
        yield self.settle(b)
        new, again = self.nodes[0].batches[:2], self.nodes[0].batches[2:]
        self.assertEqual([len(batch["urls"]) for batch in new], [10, 1])
        self.assertFalse(any("DISTRIBUTED_RECRAWL" in batch["settings"] for batch in new))
        self.assertGreater(len(again), 1)  # cut to fit 800 bytes a setting
        sent = [u for batch in again for u in batch["urls"]]
        self.assertEqual(sorted(sent), sorted(urls))
        told = {}
        for batch in again:
            value = batch["settings"]["DISTRIBUTED_RECRAWL"]
            self.assertLessEqual(len(("DISTRIBUTED_RECRAWL=" + value).encode()), 800)
            told.update(recrawls.parse(value, 100))
            self.assertEqual(list(told)[-len(batch["urls"]):], batch["urls"])
        self.assertEqual(told[urls[0]], Recrawl(urls[0], T + 1, Validators('"e0"')))
        self.assertEqual(told[urls[1]], Recrawl(urls[1], T))  # sent at T, no fetch told: no validators
        self.assertEqual((yield recrawler.run()), 0)  # scored as sent again now
        self.assertEqual([n for n in os.listdir(self.spool) if n.startswith("batch-")], [])
        self.assertEqual(recrawler.queued_by_kind, {"list": 0, "detail": 10})

    @defer.inlineCallbacks
    def test_recrawl_batches_are_spooled_and_resent(self) -> Any:
        """A batch of recrawls that no target took stays in the spool with its pages' previous fetches, and a
        restarted batcher sends it as it was."""
        b = self.batcher([self.closed_target()])
        pages = [Recrawl("http://shop.example/item/1.html", T, Validators('"x"', T - 5))]
        yield b.add_recrawls(pages)
        yield self.settle(b)
        yield b.stopService()
        spooled, _ = read_spool(self.spool)
        self.assertEqual([(s.urls, s.recrawls) for s in spooled], [([pages[0].url], pages)])
        b2 = self.batcher([self.target()])
        yield b2._lock.run(lambda: None)
        yield self.settle(b2)
        (sent,) = self.nodes[0].batches
        self.assertEqual(recrawls.parse(sent["settings"]["DISTRIBUTED_RECRAWL"], 10), {pages[0].url: pages[0]})


DETAILS = {"/e/p/1": page(""), "/e/p/2": page(""), "/n/p/3": page("")}
LIST = page("".join(f'<a href="{path}">{path}</a>' for path in DETAILS))


class DeployedPathTests(unittest.TestCase):
    """The card's path: an all-role node whose detail pages go in batches to its own worker ([batch] targets =
    ["local"], the default), recrawl_detail set; the site on 127.0.0.1 answers 304 to a matching conditional
    GET.  The recrawler's runs are asked for by the test (recrawl_every is an hour)."""

    timeout = 60
    parse_workers = 0  # pages parsed inline

    def setUp(self) -> None:
        self.site = Versioned({"/e/list": LIST, **DETAILS})
        self.root = serve(self, self.site)
        self.data = Path(tempfile.mkdtemp(prefix="spiderd-recrawl-batches-"))
        self.addCleanup(shutil.rmtree, self.data, True)
        self.feeds = self.data / "shipped"

    def settings(self) -> cfg.Settings:
        site = {"name": "versioned", "allowed_hosts": ["127.0.0.1"], "list_urls": [r"/e/list$"],
                "detail_urls": [r"/p/\d+$"], "fields": {"title": "//h1/text()"}, "recrawl_detail": 0.001}
        return node_settings(str(self.data), self.root + "/e/list", sites=[site],
                             batch={"targets": ["local"], "size": 10, "flush_interval": 3600},
                             pool={"recrawl_every": 3600, "recrawl_batch": 100}, fetch={"robots": False},
                             parse={"workers": self.parse_workers},
                             worker={"feed_template": f"file://{self.feeds}/%(batch)s_%(name)s_%(time)s.jl"})

    def items(self) -> list[list[dict[str, Any]]]:
        """The items of each feed file, in batch order."""
        files = sorted(self.feeds.glob("*.jl"), key=lambda p: int(p.name.split("_")[0]))
        return [[json.loads(line) for line in f.open()] for f in files]

    @defer.inlineCallbacks
    def test_recrawled_details_go_to_the_worker_conditionally(self) -> Any:
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
            url = lambda path: self.root + path  # noqa: E731
            (first,) = self.items()
            self.assertEqual(sorted(i["url"] for i in first), [url(p) for p in sorted(DETAILS)])
            self.assertTrue(all("recrawl" not in i for i in first))
            fetched = {i["url"]: i["fetched_at"] for i in first}
            self.site.bump("/e/p/2")  # changed since
            self.assertEqual((yield recrawler.run()), 3)
            yield settled()
            # the worker sent the validators the pool kept: /e/p/1 did not change (304, no item line), /e/p/2
            # did (a 200: its item says so), /n/p/3 has none (a plain GET, a 200 as well)
            self.assertEqual(self.site.requests("/e/p/1"), [(None, None), ('"e/p/1-v0"', None)])
            self.assertEqual(self.site.requests("/e/p/2"), [(None, None), ('"e/p/2-v0"', None)])
            self.assertEqual(self.site.requests("/n/p/3"), [(None, None), (None, None)])
            second = self.items()[1]
            self.assertEqual(sorted(i["url"] for i in second), [url("/e/p/2"), url("/n/p/3")])
            for item in second:
                self.assertIs(item["recrawl"], True)
                self.assertLessEqual(item["previous_fetched_at"], fetched[item["url"]])  # (answered, then parsed)
                self.assertLess(item["previous_fetched_at"], item["fetched_at"])
            self.assertEqual(worker.runner.totals["not_modified"], 1)
            self.assertEqual(crawler.stats.counts["not_modified"], 1)
            # the 200's new ETag is what the next recrawl sends; nothing changed: 304s, no item line at all
            self.assertEqual((yield recrawler.run()), 3)
            yield settled()
            self.assertEqual(self.site.requests("/e/p/2")[2], ('"e/p/2-v1"', None))
            self.assertEqual(self.site.requests("/e/p/1")[2], ('"e/p/1-v0"', None))
            self.assertEqual(len(self.items()), 3)
            self.assertEqual([i["url"] for i in self.items()[2]], [url("/n/p/3")])
            self.assertEqual(worker.runner.totals["not_modified"], 3)
            stats = yield crawler.pool.stats()
            self.assertEqual((stats["batched"], stats["done"]), (3, 1))  # the list page was fetched here
        finally:
            yield top.stopService()


class DeployedPathParsedInAChildTests(DeployedPathTests):
    """The same with a parse child, which encodes each item's line: a recrawl's item (it gains recrawl and
    previous_fetched_at in the worker) is encoded again there, not written as the child's line."""

    parse_workers = 1

