"""MySQL refusing writes (issue 35.1): a page store whose table another session holds locked answers the crawl's
writes with a lock wait timeout (1205); the node's storage gate holds the crawl (nothing fails, nothing new is
fetched, the status says why) and the writes are made once the lock is gone."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import pymysql
from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.web import server

from spiderd.core.stats import CrawlStats
from spiderd.core.storage import StorageGate
from spiderd.engine.politeness import Politeness
from spiderd.engine.steps import PageSteps
from spiderd.feed.items import ItemWriter
from spiderd.fetch.fetcher import FetchConfig, Fetcher
from spiderd.fetch.parsepool import ParsePool
from spiderd.frontier.crawler import CrawlService
from spiderd.frontier.pool import open_memory_pool
from spiderd.ops.web.node import Node, _storage
from spiderd.store import mysql as store_mysql
from spiderd.store import open_store

from .helpers import ClockedReactor, rules_of
from .services import mysql_url, need_mysql
from .test_storage import DETAILS, SITES, Pages
from .test_throttle import Base

# the store's sessions give up waiting for a lock after 1 s (50 s for a row lock, a day for a table's by default)
SHORT_WAITS = store_mysql.STRICT + ", innodb_lock_wait_timeout = 1, lock_wait_timeout = 1"


class MySQLRefusesTests(Base):
    """A crawl whose MariaDB page store's table is locked by another session for a while."""

    timeout = 90

    def setUp(self) -> None:
        args = need_mysql()
        self.database = f"spiderd_t35_{os.getpid()}"
        admin = pymysql.connect(**{**args, "database": None})  # type: ignore[arg-type]
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{self.database}`")
            cursor.execute(f"CREATE DATABASE `{self.database}`")
        admin.close()
        self.addCleanup(self._drop, args)
        self.locker = pymysql.connect(**{**args, "database": self.database})  # type: ignore[arg-type]
        self.addCleanup(self.locker.close)
        self.patch(store_mysql, "STRICT", SHORT_WAITS)

    def _drop(self, args: dict[str, Any]) -> None:
        admin = pymysql.connect(**{**args, "database": None})  # type: ignore[arg-type]
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{self.database}`")
        admin.close()

    @defer.inlineCallbacks
    def test_a_locked_table_holds_the_crawl_and_loses_nothing(self) -> Any:
        """While another session holds crawler_html locked, the store's writes time out (1205): the gate blocks
        the store, the crawler takes no new URL and fails none, the status says the store is blocked, few lines
        are logged; once the lock is gone every page is stored and every item written once."""
        self.clock = Clock()
        self.clock.advance(1_000_000)
        site = Pages()
        port = reactor.listenTCP(0, server.Site(site), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        root = f"http://127.0.0.1:{port.getHost().port}/"
        clocked = ClockedReactor(reactor, self.clock)
        fetcher = Fetcher(clocked, FetchConfig(timeout=10))
        self.addCleanup(fetcher.close)
        parser = ParsePool(reactor, rules_of({"sites": SITES}), 0)
        parser.startService()
        self.addCleanup(parser.stopService)
        pool = open_memory_pool(self.clock, politeness=Politeness(concurrency=4), failure_threshold=1)
        store = open_store(mysql_url(self.database), tempfile.mkdtemp(), clocked, batch_size=5)
        store.startService()
        self.addCleanup(store.stopService)
        self.assertEqual((yield store.count()), 0)  # (the tables made before the lock)
        items_dir = tempfile.mkdtemp()
        items = ItemWriter(clocked, items_dir, pool=pool, flush_interval=0.5, batch_size=5)
        items.startService()
        self.addCleanup(items.stopService)
        yield self.settle(lambda: items.ready.called)
        gate = StorageGate(self.clock)
        crawler = CrawlService(clocked, pool, fetcher, PageSteps(clocked, parser, store, gate=gate), parser.rules,
                               CrawlStats(self.clock), items=items, concurrency=4)
        with self.locker.cursor() as cursor:
            cursor.execute("LOCK TABLES crawler_html WRITE")
        yield pool.add(root)
        with capturedLogs() as events:
            crawler.startService()
            self.addCleanup(crawler.stopService)
            yield self.settle(lambda: "store" in gate.blocks and crawler.fetching == 0, real_seconds=30)
            self.assertEqual(gate.blocks["store"].error, "lock wait timeout")
            fetched = sum(site.requests.values())
            yield self.advance(0.5, step=0.1)  # the gate holds: nothing new is fetched
            self.assertEqual(sum(site.requests.values()), fetched)
            self.assertTrue(_storage(Node("all", self.clock, storage=gate))["blocked"])
            self.assertEqual((yield pool.stats())["failed"], 0)
            with self.locker.cursor() as cursor:
                cursor.execute("UNLOCK TABLES")
            for _ in range(60):
                yield self.advance(2.0, step=0.5)
                state = yield pool.stats()
                if state["done"] == DETAILS + 1:
                    break
        yield self.settle(lambda: crawler.processing == 0)
        self.assertEqual((state["done"], state["failed"]), (DETAILS + 1, 0))
        yield items.stopService()
        lines = [json.loads(line) for name in sorted(os.listdir(items_dir)) if name.endswith(".jl")
                 for line in open(os.path.join(items_dir, name))]
        self.assertEqual(sorted(item["url"] for item in lines), sorted(f"{root}p/{i}" for i in range(DETAILS)))
        self.assertEqual((yield store.count()), DETAILS)
        self.assertEqual(gate.blocks, {})
        ours = [e["log_format"] for e in events if e.get("log_namespace", "").startswith("spiderd")]
        self.assertLess(len(ours), 10, ours)
