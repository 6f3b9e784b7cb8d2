"""Seed 004's sharded page store on the machine's MariaDB: two databases, a page in shard urlhash % 2."""

from __future__ import annotations

import uuid
from typing import Any

import pymysql
from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.trial.unittest import TestCase
from zope.interface.verify import verifyObject

from spiderd.store.interfaces import IPageStore
from spiderd.store import ShardedStore, open_store
from spiderd.core.urls import fingerprint

from . import services

HTML = b"<html><body>" + b"<p>sharded words</p>" * 50 + b"</body></html>"


class ShardedStoreTests(TestCase):
    """Two MySQL databases behind one store."""

    def setUp(self) -> None:
        self.server = services.need_mysql()
        self.databases = [f"spiderd_shard_{uuid.uuid4().hex[:10]}_{i}" for i in range(2)]
        for name in self.databases:
            self.admin(f"CREATE DATABASE `{name}`")
            self.addCleanup(self.admin, f"DROP DATABASE IF EXISTS `{name}`")
        self.store = open_store([services.mysql_url(name) for name in self.databases], "/nonexistent", reactor,
                                batch_size=10)
        self.store.startService()
        self.addCleanup(lambda: self.store.stopService() if self.store.running else None)

    def admin(self, sql: str, *args: Any) -> list[Any]:
        connection = pymysql.connect(**{**self.server, "database": None}, autocommit=True)  # type: ignore[arg-type]
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, args or None)
                return list(cursor.fetchall())
        finally:
            connection.close()

    def rows(self, shard: int, table: str = "crawler_html", column: str = "urlhash") -> list[Any]:
        return [row[0] for row in self.admin(f"SELECT {column} FROM `{self.databases[shard]}`.{table}")]

    def test_provides_the_page_store_interface(self) -> None:
        """The sharded store is a page store like the others."""
        self.assertIsInstance(self.store, ShardedStore)
        self.assertTrue(verifyObject(IPageStore, self.store))

    @inlineCallbacks
    def test_each_page_in_its_shard(self) -> Any:
        """A page lands in shard urlhash % 2 only; get reads it from there; count sums the shards."""
        urls = [f"http://a.example/item/{i}.html" for i in range(30)]
        saves = [self.store.save(url, fingerprint(url), HTML + url.encode()) for url in urls]
        yield self.store.flush()
        for d in saves:
            yield d
        for shard in (0, 1):
            expected = sorted(fingerprint(u) for u in urls if fingerprint(u) % 2 == shard)
            self.assertEqual(sorted(int(h) for h in self.rows(shard)), expected)
            self.assertTrue(expected)
        self.assertEqual((yield self.store.count()), 30)
        for url in urls[:4]:
            self.assertEqual((yield self.store.get(fingerprint(url))), (url, HTML + url.encode()))
        self.assertIsNone((yield self.store.get(12345)))

    @inlineCallbacks
    def test_hubs_live_in_the_shard_of_their_url(self) -> Any:
        """Hub rows go to the shard of their URL's fingerprint (save and save_hubs alike); hubs lists them all."""
        hubs = [f"http://a.example/list/{i}.html" for i in range(8)]
        self.assertEqual((yield self.store.save_hubs(hubs[:6])), 6)
        self.assertEqual((yield self.store.save_hubs(hubs[:2])), 0)
        saved = self.store.save(hubs[6], fingerprint(hubs[6]), HTML, hub=True)
        yield self.store.flush()
        yield saved
        for shard in (0, 1):
            here = self.rows(shard, "crawler_hub", "url")
            self.assertEqual(sorted(here), sorted(u for u in hubs[:7] if fingerprint(u) % 2 == shard))
        self.assertEqual(sorted((yield self.store.hubs())), sorted(hubs[:7]))

    @inlineCallbacks
    def test_bad_pages_fail_clearly(self) -> Any:
        """A bad urlhash fails its save (as on one database) instead of picking a shard."""
        failure = yield self.assertFailure(self.store.save("http://a.example/", -1, HTML), ValueError)
        self.assertIn("unsigned 64-bit", str(failure))

    @inlineCallbacks
    def test_stop_writes_every_shard(self) -> Any:
        """stopService writes the queued pages of every shard, then refuses work."""
        urls = [f"http://b.example/{i}" for i in range(6)]
        saves = [self.store.save(url, fingerprint(url), HTML) for url in urls]
        yield self.store.stopService()
        for d in saves:
            yield d
        self.assertEqual(len(self.rows(0)) + len(self.rows(1)), 6)
