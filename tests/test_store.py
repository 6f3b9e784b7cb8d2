"""The page store: the same contract on SQLite and MariaDB, plus what only MySQL has (outages, passwords)."""

from __future__ import annotations

import json
import lzma
import os
import socket
import sqlite3
import threading
import uuid
from typing import Any, Callable

import pymysql
import pytest
from twisted.internet import defer, reactor
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.task import Clock, deferLater
from twisted.logger import LogLevel, formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase, TestCase
from zope.interface.verify import verifyObject

from spiderd.config.sections import StoreSection
from spiderd.core.blocking import Blocking, Lane
from spiderd.core.digest import content_digest
from spiderd.store import NullStore, StoreNotRunning, StoreUnavailable, base, open_store, page_store
from spiderd.store import mysql as mysql_backend
from spiderd.store import sqlite as sqlite_backend
from spiderd.store.interfaces import IPageStore
from spiderd.store.mysql import (
    RECONNECT,
    MySQLStore,
    Reconnector,
    parse_mysql_url,
    redact,
)
from spiderd.store.sqlite import SQLiteStore, to_signed, to_unsigned

from . import services
from .helpers import result

SECRET = "s3cret:p@ss/w%rd"
SECRET_IN_URL = "s3cret%3Ap%40ss%2Fw%25rd"
HTML = b"<html><body>" + b"<p class='x'>words and words</p>" * 200 + b"</body></html>"


SEED_000_DDL = (
    "CREATE TABLE `crawler_hub` (`id` int(10) unsigned NOT NULL AUTO_INCREMENT, `url` varchar(64) NOT NULL,"
    " `created_at` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP, PRIMARY KEY (`id`), UNIQUE KEY `url` (`url`)"
    ") ENGINE=MyISAM DEFAULT CHARSET=utf8",
    "CREATE TABLE `crawler_html` (`id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,"
    " `urlhash` bigint(20) unsigned NOT NULL COMMENT 'farmhash', `url` varchar(512) NOT NULL,"
    " `html_lzma` longblob NOT NULL, `created_at` timestamp NULL DEFAULT CURRENT_TIMESTAMP,"
    " PRIMARY KEY (`id`), UNIQUE KEY `urlhash` (`urlhash`)) ENGINE=InnoDB DEFAULT CHARSET=utf8",
)


class SplitReactor:
    """The real reactor for threads, a Clock for time: timers in tests move only when told."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def callLater(self, delay: float, f: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        return self.clock.callLater(delay, f, *args, **kw)

    def seconds(self) -> float:
        return self.clock.seconds()

    def getDelayedCalls(self) -> Any:
        return self.clock.getDelayedCalls()

    def __getattr__(self, name: str) -> Any:
        return getattr(reactor, name)


class LogWatch:
    """Every log event while a test runs, and a Deferred for the first one that matches."""

    def __init__(self, test: Any) -> None:
        self.events: list[dict[str, Any]] = []
        self._waiting: list[tuple[Callable[[dict[str, Any]], bool], Deferred[dict[str, Any]]]] = []
        globalLogPublisher.addObserver(self._observe)
        test.addCleanup(globalLogPublisher.removeObserver, self._observe)

    def _observe(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        for entry in list(self._waiting):
            if entry[0](event):
                self._waiting.remove(entry)
                reactor.callLater(0, entry[1].callback, event)  # not inside the logging call

    def wait_for(self, level: LogLevel, text: str) -> Deferred[dict[str, Any]]:
        """Fires (on a later reactor turn) with the first event at ``level`` whose text contains ``text``."""
        d: Deferred[dict[str, Any]] = Deferred()
        match = self._matcher(level, text)
        seen = [e for e in self.events if match(e)]
        if seen:
            d.callback(seen[0])
        else:
            self._waiting.append((match, d))
        return d

    def texts(self, level: LogLevel | None = None) -> list[str]:
        return [formatEvent(e) for e in self.events if level is None or e.get("log_level") == level]

    def assert_never_contains(self, secret: str) -> None:
        for event in self.events:
            assert secret not in formatEvent(event), formatEvent(event)
            assert secret not in repr(event), repr(event)

    @staticmethod
    def _matcher(level: LogLevel, text: str) -> Callable[[dict[str, Any]], bool]:
        return lambda e: e.get("log_level") == level and text in formatEvent(e)


def closed_port() -> int:
    """A local TCP port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StoreContract:
    """The page-store contract; a subclass says how to open its backend's store."""

    backend: Any  # the backend's module

    def setUp(self) -> None:
        self.clock = Clock()
        self.logs = LogWatch(self)

    def open(self, **options: Any) -> Any:
        raise NotImplementedError

    def raw_blob(self, urlhash: int) -> bytes:
        raise NotImplementedError

    def raw_digests(self) -> dict[str, str | None]:
        """url: digest column of every stored row."""
        raise NotImplementedError

    def started(self, **options: Any) -> Any:
        """A started store whose timers run on ``self.clock``; stopped at cleanup."""
        options.setdefault("reactor", SplitReactor(self.clock))
        store = self.open(**options)
        store.startService()
        self.addCleanup(lambda: store.stopService() if store.running else None)
        return store

    def tick(self, store: Any) -> None:
        """Let the flush timer run out."""
        self.clock.advance(store.flush_interval)

    def test_provides_interface(self) -> None:
        """The store provides IPageStore."""
        self.assertTrue(verifyObject(IPageStore, self.started()))

    @inlineCallbacks
    def test_roundtrip(self) -> Any:
        """A saved page reads back as it was; an unknown hash reads as None."""
        store = self.started()
        d = store.save("http://a.example/1", 42, HTML)
        self.tick(store)
        yield d
        self.assertEqual((yield store.get(42)), ("http://a.example/1", HTML))
        self.assertIsNone((yield store.get(43)))
        self.assertEqual((yield store.count()), 1)

    @inlineCallbacks
    def test_digest_column(self) -> Any:
        """A page's digest goes to the digest column (NULL without one); a resave updates it."""
        store = self.started()
        saves = [store.save("http://a.example/1", 1, HTML, digest=content_digest(HTML)),
                 store.save("http://a.example/2", 2, HTML, compressed=lzma.compress(HTML)),
                 store.save("http://a.example/3", 3, b"x", digest=content_digest(b"x"))]
        self.tick(store)
        yield defer.gatherResults(saves)
        self.assertEqual(self.raw_digests(), {"http://a.example/1": content_digest(HTML), "http://a.example/2": None,
                                              "http://a.example/3": content_digest(b"x")})
        again = store.save("http://a.example/3", 3, b"y", digest=content_digest(b"y"))
        self.tick(store)
        yield again
        self.assertEqual(self.raw_digests()["http://a.example/3"], content_digest(b"y"))

    bad_item = base.ItemRow("shop", "not json", 1.0)  # an item row the database refuses

    def raw_items(self) -> dict[int, tuple[str, str, dict[str, Any], float]]:
        """urlhash (unsigned): (url, site, fields, fetched_at) of every crawler_item row."""
        raise NotImplementedError

    @inlineCallbacks
    def test_item_table(self) -> Any:
        """With item_table, each page's item goes in crawler_item (urlhash, url, site, fields as JSON, fetched_at)
        with its page; a resave updates it; a page without an item has no row; without item_table, none at all."""
        store = self.started(item_table=True)
        fields = {"title": "Caf\u00e9 \"one\"", "tags": ["a", "b"], "price": None}
        saves = [store.save("http://a.example/1", 2**64 - 5, HTML, item=base.ItemRow("shop", json.dumps(fields), 1.5)),
                 store.save("http://a.example/2", 2, HTML)]
        self.tick(store)
        yield defer.gatherResults(saves)
        self.assertEqual(self.raw_items(), {2**64 - 5: ("http://a.example/1", "shop", fields, 1.5)})
        again = store.save("http://a.example/1", 2**64 - 5, b"x", item=base.ItemRow("shop", '{"title": "two"}', 9.0))
        self.tick(store)
        yield again
        self.assertEqual(self.raw_items(), {2**64 - 5: ("http://a.example/1", "shop", {"title": "two"}, 9.0)})
        yield store.stopService()
        plain = self.started()
        saved = plain.save("http://a.example/3", 3, HTML, item=base.ItemRow("shop", "{}", 1.0))
        self.tick(plain)
        yield saved
        self.assertEqual(len(self.raw_items()), 1)

    @inlineCallbacks
    def test_item_row_fails_with_its_page(self) -> Any:
        """The item is written in the page's transaction: an item the database refuses fails its page too, and
        neither row is stored; the other pages of the batch are."""
        store = self.started(item_table=True)
        bad = store.save("http://a.example/bad", 5, HTML, item=self.bad_item)
        good = store.save("http://a.example/good", 6, HTML, item=base.ItemRow("shop", "{}", 1.0))
        self.tick(store)
        yield good
        failure = yield bad.addCallbacks(lambda _: None, lambda f: f.value)
        self.assertIsNotNone(failure)
        self.assertIsNone((yield store.get(5)))
        self.assertEqual(list(self.raw_items()), [6])
        self.flushLoggedErrors()

    @inlineCallbacks
    def test_resave_updates_the_row(self) -> Any:
        """Saving the same urlhash again replaces url and html; there is still one row."""
        store = self.started()
        first = store.save("http://a.example/old", 7, b"old")
        self.tick(store)
        yield first
        same_batch = [store.save("http://a.example/mid", 7, b"mid"), store.save("http://a.example/new", 7, b"new")]
        self.tick(store)
        yield defer.gatherResults(same_batch)
        self.assertEqual((yield store.count()), 1)
        self.assertEqual((yield store.get(7)), ("http://a.example/new", b"new"))

    @inlineCallbacks
    def test_flush_by_size(self) -> Any:
        """The batch_size-th page writes the batch at once, without the timer."""
        store = self.started(batch_size=3)
        saves = [store.save(f"http://a.example/{i}", i, HTML) for i in range(2)]
        for d in saves:
            self.assertNoResult(d)
        self.assertEqual(store.pending, 2)
        self.assertEqual((yield store.count()), 0)
        saves.append(store.save("http://a.example/2", 2, HTML))
        self.assertEqual(self.clock.getDelayedCalls(), [])
        yield defer.gatherResults(saves)
        self.assertEqual((yield store.count()), 3)

    @inlineCallbacks
    def test_flush_by_timer(self) -> Any:
        """A partial batch is written flush_interval seconds after its first page."""
        store = self.started(batch_size=100, flush_interval=2.0)
        d = store.save("http://a.example/1", 1, HTML)
        self.clock.advance(1.0)
        store.save("http://a.example/2", 2, HTML)
        self.assertEqual([c.getTime() for c in self.clock.getDelayedCalls()], [2.0])
        self.clock.advance(0.9)
        self.assertEqual((yield store.count()), 0)
        self.assertNoResult(d)
        self.clock.advance(0.1)
        yield d
        self.assertEqual((yield store.count()), 2)

    @inlineCallbacks
    def test_stop_writes_queued_pages(self) -> Any:
        """stopService writes every queued page before it fires; a new store finds them."""
        store = self.started()
        saves = [store.save(f"http://a.example/{i}", i, HTML) for i in range(3)]
        yield store.stopService()
        self.assertEqual([result(d) for d in saves], [None, None, None])
        self.assertEqual(self.clock.getDelayedCalls(), [])
        again = self.started()
        self.assertEqual((yield again.count()), 3)

    @inlineCallbacks
    def test_refuses_work_when_not_running(self) -> Any:
        """Before start and after stop, every call fails with StoreNotRunning, nothing is dropped silently."""
        store = self.open(reactor=SplitReactor(self.clock))
        self.failureResultOf(store.save("http://a.example/1", 1, HTML), StoreNotRunning)
        store.startService()
        yield store.stopService()
        failure = self.failureResultOf(store.save("http://a.example/1", 1, HTML), StoreNotRunning)
        self.assertIn("not running", failure.getErrorMessage())
        self.failureResultOf(store.save_hubs(["http://a.example/"]), StoreNotRunning)
        self.failureResultOf(store.get(1), StoreNotRunning)
        self.failureResultOf(store.count(), StoreNotRunning)

    def test_rejects_bad_arguments(self) -> None:
        """A bad urlhash or html fails that save at once."""
        store = self.started()
        self.failureResultOf(store.save("http://a.example/1", -1, HTML), ValueError)
        self.failureResultOf(store.save("http://a.example/1", 2**64, HTML), ValueError)
        self.failureResultOf(store.save("http://a.example/1", 1, "text"), TypeError)
        self.assertEqual(store.pending, 0)

    @inlineCallbacks
    def test_unsigned_64_bit_hashes(self) -> Any:
        """Hashes at and above 2**63 round-trip and stay distinct."""
        store = self.started()
        hashes = [0, 2**63 - 1, 2**63, 2**64 - 1]
        saves = [store.save(f"http://a.example/{h}", h, str(h).encode()) for h in hashes]
        self.tick(store)
        yield defer.gatherResults(saves)
        for h in hashes:
            self.assertEqual((yield store.get(h)), (f"http://a.example/{h}", str(h).encode()))
        self.assertEqual((yield store.count()), 4)

    @inlineCallbacks
    def test_long_url(self) -> Any:
        """A URL far over varchar(512) is stored whole."""
        store = self.started()
        url = "http://a.example/" + "x" * 3000
        d = store.save(url, 5, HTML)
        self.tick(store)
        yield d
        self.assertEqual((yield store.get(5)), (url, HTML))

    @inlineCallbacks
    def test_hubs(self) -> Any:
        """Hub URLs are stored once; save(hub=True) records the page's URL as a hub too."""
        store = self.started()
        self.assertEqual((yield store.save_hubs(["http://h.example/a", "http://h.example/b", "http://h.example/a"])), 2)
        self.assertEqual((yield store.save_hubs(["http://h.example/a", "http://h.example/A"])), 1)
        d = store.save("http://h.example/c", 9, HTML, hub=True)
        self.tick(store)
        yield d
        expected = ["http://h.example/a", "http://h.example/b", "http://h.example/A", "http://h.example/c"]
        self.assertEqual((yield store.hubs()), expected)
        self.assertEqual((yield store.save_hubs([])), 0)

    @inlineCallbacks
    def test_bad_row_fails_alone(self) -> Any:
        """A row the database refuses fails its own Deferred, logged; the rest of the batch is stored."""
        store = self.started()
        saves = [
            store.save("http://a.example/1", 1, HTML),
            store.save("http://a.example/\ud800", 2, HTML),  # a lone surrogate cannot be encoded
            store.save("http://a.example/3", 3, HTML, hub=True),
        ]
        self.tick(store)
        outcome = yield defer.DeferredList(saves, consumeErrors=True)
        self.assertEqual([ok for ok, _ in outcome], [True, False, True])
        outcome[1][1].trap(UnicodeEncodeError)
        self.assertEqual((yield store.count()), 2)
        self.assertEqual((yield store.hubs()), ["http://a.example/3"])
        errors = self.logs.texts(LogLevel.error)
        self.assertEqual(len(errors), 1)
        self.assertIn("UnicodeEncodeError", errors[0])

    @inlineCallbacks
    def test_whole_batch_failure_fails_every_page(self) -> Any:
        """When the whole batch cannot be written, every page's Deferred fails with the reason, logged."""
        store = self.started()

        def broken(*args: Any) -> Any:
            raise OSError("the disk is on fire")

        self.patch(self.backend, "write_rows", broken)
        saves = [store.save(f"http://a.example/{i}", i, HTML) for i in range(2)]
        self.tick(store)
        outcome = yield defer.DeferredList(saves, consumeErrors=True)
        for ok, failure in outcome:
            self.assertFalse(ok)
            failure.trap(OSError)
        self.assertEqual(store.pending, 0)
        self.assertEqual(len(self.flushLoggedErrors(OSError)), 1)

    @inlineCallbacks
    def test_compresses_on_the_writer_thread(self) -> Any:
        """Compression never runs on the reactor thread; the blob is plain XZ."""
        threads = []
        real = base.compress

        def spy(html: bytes, preset: int) -> bytes:
            threads.append(threading.current_thread())
            return real(html, preset)

        self.patch(base, "compress", spy)
        store = self.started()
        d = store.save("http://a.example/1", 1, HTML)
        self.tick(store)
        yield d
        self.assertEqual(len(threads), 1)
        self.assertIsNot(threads[0], threading.main_thread())
        blob = self.raw_blob(1)
        self.assertTrue(blob.startswith(b"\xfd7zXZ\x00"))
        self.assertEqual(lzma.decompress(blob), HTML)
        self.assertLess(len(blob), len(HTML) / 5)


class SQLiteStoreTests(StoreContract, TestCase):
    """The contract on the embedded SQLite store."""

    backend = sqlite_backend

    def setUp(self) -> None:
        super().setUp()
        self.data_dir = self.mktemp()

    def open(self, **options: Any) -> Any:
        return open_store("sqlite:///pages.sqlite3", self.data_dir, options.pop("reactor"), **options)

    def raw_blob(self, urlhash: int) -> bytes:
        with sqlite3.connect(os.path.join(self.data_dir, "pages.sqlite3")) as db:
            row = db.execute("SELECT html_lzma FROM crawler_html WHERE urlhash = ?", (to_signed(urlhash),)).fetchone()
        return bytes(row[0])

    def raw_digests(self) -> dict[str, str | None]:
        with sqlite3.connect(os.path.join(self.data_dir, "pages.sqlite3")) as db:
            return dict(db.execute("SELECT url, digest FROM crawler_html").fetchall())

    def raw_items(self) -> dict[int, tuple[str, str, dict[str, Any], float]]:
        with sqlite3.connect(os.path.join(self.data_dir, "pages.sqlite3")) as db:
            if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'crawler_item'").fetchone():
                return {}
            rows = db.execute("SELECT urlhash, url, site, fields, fetched_at FROM crawler_item "
                              "WHERE json_valid(fields)").fetchall()
        return {to_unsigned(h): (url, site, json.loads(fields), at) for h, url, site, fields, at in rows}

    @inlineCallbacks
    def test_works_on_the_lane_it_is_given(self) -> Any:
        """The SQLite store does its database work on the lane it is given (the node's), and lets go of it at
        stop."""
        lane = Lane(reactor, "store-test")
        self.addCleanup(lane.close)
        store = self.started(lane=lane)
        threads = []
        real = self.backend.write_rows

        def spy(*args: Any) -> Any:
            threads.append(threading.current_thread().name)
            return real(*args)

        self.patch(self.backend, "write_rows", spy)
        d = store.save("http://a.example/1", 1, HTML)
        self.tick(store)
        yield d
        self.assertEqual(threads, [threads[0]])
        self.assertIn("spiderd-store-test", threads[0])
        yield store.stopService()
        self.assertFalse(lane.running)

    @inlineCallbacks
    def test_the_node_store_works_on_the_nodes_store_lane(self) -> Any:
        """The page store of ``[store]`` (page_store) given the ``store`` lane of the node's Blocking runs its
        SQLite work there: the lane runs from the store's start to its stop."""
        blocking = Blocking(reactor)
        self.addCleanup(blocking.stopService)
        store = page_store(StoreSection(), self.data_dir, SplitReactor(self.clock), blocking.lane("store"))
        store.startService()
        self.assertTrue(blocking.lane("store").running)
        yield store.stopService()
        self.assertFalse(blocking.lane("store").running)

    @inlineCallbacks
    def test_table_without_digest_gets_the_column(self) -> Any:
        """A crawler_html made before the digest column gets it when the store opens; its rows keep a NULL."""
        os.makedirs(self.data_dir)
        with sqlite3.connect(os.path.join(self.data_dir, "pages.sqlite3")) as db:
            db.execute("CREATE TABLE crawler_html (id INTEGER PRIMARY KEY, urlhash INTEGER NOT NULL UNIQUE,"
                       " url TEXT NOT NULL, html_lzma BLOB NOT NULL, created_at TIMESTAMP NULL)")
            db.execute("INSERT INTO crawler_html (urlhash, url, html_lzma) VALUES (1, 'http://a.example/old', ?)",
                       (lzma.compress(HTML),))
        store = self.started()
        d = store.save("http://a.example/new", 2, HTML, digest=content_digest(HTML))
        self.tick(store)
        yield d
        self.assertEqual(self.raw_digests(), {"http://a.example/old": None, "http://a.example/new": content_digest(HTML)})
        self.assertEqual((yield store.get(1)), ("http://a.example/old", HTML))
        self.assertTrue(any("column digest added" in t for t in self.logs.texts(LogLevel.info)))

    @inlineCallbacks
    def test_file_and_schema(self) -> Any:
        """The file lives under data_dir, in WAL mode, with the seed's two tables; big hashes are stored signed."""
        store = self.started()
        d = store.save("http://a.example/1", 2**64 - 1, HTML)
        self.tick(store)
        yield d
        with sqlite3.connect(os.path.join(self.data_dir, "pages.sqlite3")) as db:
            self.assertEqual(db.execute("PRAGMA journal_mode").fetchone()[0], "wal")
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            self.assertEqual((db.execute("SELECT urlhash FROM crawler_html").fetchone()[0]), -1)
        self.assertEqual(tables, {"crawler_html", "crawler_hub"})

    @inlineCallbacks
    def test_seed_service_records_hubs(self) -> Any:
        """Configured hubs, and hubs added at run time, go to crawler_hub as well as to the pool."""
        from spiderd.frontier.pool import open_memory_pool
        from spiderd.frontier.seeds import SeedService

        store = self.started()
        pool = open_memory_pool(self.clock)
        seeds = SeedService(pool, ["http://h.example/"], ["http://h.example/news"], 600.0, store=store)
        yield seeds.load()
        yield seeds.add_hubs(["http://h.example/sale"])
        yield store._lock.run(lambda: None)  # the background writes are done
        self.assertEqual((yield store.hubs()), ["http://h.example/news", "http://h.example/sale"])
        self.assertEqual((yield pool.stats())["hubs"], 2)

    @inlineCallbacks
    def test_long_hub_url(self) -> Any:
        """SQLite stores hub URLs of any length."""
        store = self.started()
        self.assertEqual((yield store.save_hubs(["http://h.example/" + "x" * 3000])), 1)


class MySQLStoreTests(StoreContract, TestCase):
    """The contract on MariaDB, in a database of its own per test, plus outages and passwords."""

    backend = mysql_backend

    def setUp(self) -> None:
        self.server = services.need_mysql()
        super().setUp()
        self.database = f"spiderd_test_{uuid.uuid4().hex[:12]}"
        self.admin(f"CREATE DATABASE `{self.database}`")
        self.addCleanup(self.admin, f"DROP DATABASE IF EXISTS `{self.database}`")
        self.url = services.mysql_url(self.database)

    def admin(self, sql: str, *args: Any) -> list[Any]:
        """Run one statement on a connection of the test's own."""
        connection = pymysql.connect(**{**self.server, "database": None}, autocommit=True)  # type: ignore[arg-type]
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, args or None)
                return list(cursor.fetchall())
        finally:
            connection.close()

    def open(self, **options: Any) -> Any:
        return open_store(options.pop("url", self.url), "/nonexistent", options.pop("reactor"), **options)

    def raw_blob(self, urlhash: int) -> bytes:
        rows = self.admin(f"SELECT html_lzma FROM `{self.database}`.crawler_html WHERE urlhash = %s", urlhash)
        return bytes(rows[0][0])

    def raw_digests(self) -> dict[str, str | None]:
        return dict(self.admin(f"SELECT url, digest FROM `{self.database}`.crawler_html"))

    bad_item = base.ItemRow("s" * 256, "{}", 1.0)  # over varchar(255) (a CHECK failure is no row's error in pymysql)

    def raw_items(self) -> dict[int, tuple[str, str, dict[str, Any], float]]:
        tables = self.admin("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
                            self.database)
        if ("crawler_item",) not in [tuple(t) for t in tables]:
            return {}
        rows = self.admin(f"SELECT urlhash, url, site, fields, fetched_at FROM `{self.database}`.crawler_item")
        return {int(h): (url, site, json.loads(fields), float(at)) for h, url, site, fields, at in rows}

    @inlineCallbacks
    def test_user_who_may_not_alter_stores_without_digest(self) -> Any:
        """A seed-000 crawler_html and a user without ALTER: pages are stored without their digest, one warning."""
        for statement in SEED_000_DDL:
            self.admin(statement.replace("CREATE TABLE ", f"CREATE TABLE `{self.database}`."))
        user = f"sd_{uuid.uuid4().hex[:8]}"
        self.admin(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'")
        self.addCleanup(self.admin, f"DROP USER '{user}'@'%'")
        self.admin(f"GRANT SELECT, INSERT, UPDATE ON `{self.database}`.* TO '{user}'@'%'")
        url = f"mysql://{user}:pw@{self.server['host']}:{self.server['port']}/{self.database}"
        store = self.started(url=url)
        d = store.save("http://a.example/1", 1, HTML, digest=content_digest(HTML))
        self.tick(store)
        yield d
        self.assertEqual((yield store.get(1)), ("http://a.example/1", HTML))
        self.assertEqual(sum("has no digest column" in t for t in self.logs.texts(LogLevel.warn)), 1)
        columns = [row[0] for row in self.admin(f"SHOW COLUMNS FROM `{self.database}`.crawler_html")]
        self.assertNotIn("digest", columns)

    def pool_connections(self) -> list[int]:
        sql = "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s AND ID <> CONNECTION_ID()"
        return [row[0] for row in self.admin(sql, self.database)]

    @inlineCallbacks
    def test_existing_seed_tables_are_used(self) -> Any:
        """Tables made from seed 000's DDL are used as they are; a URL too long for them fails alone, never cut."""
        for statement in SEED_000_DDL:
            self.admin(statement.replace("CREATE TABLE ", f"CREATE TABLE `{self.database}`."))
        store = self.started()
        saves = [
            store.save("http://a.example/1", 1, HTML, hub=True),
            store.save("http://a.example/" + "x" * 600, 2, HTML),
        ]
        self.tick(store)
        outcome = yield defer.DeferredList(saves, consumeErrors=True)
        self.assertEqual([ok for ok, _ in outcome], [True, False])
        outcome[1][1].trap(pymysql.err.DataError)
        self.assertEqual((yield store.count()), 1)
        self.assertEqual((yield store.hubs()), ["http://a.example/1"])
        ddl = self.admin(f"SHOW CREATE TABLE `{self.database}`.crawler_html")[0][1]
        self.assertIn("varchar(512)", ddl)
        self.assertIn("`digest` varchar(64)", ddl)  # the one column added (ALTER TABLE), NULL for older rows

    def test_long_hub_url_refused(self) -> None:
        """A hub URL longer than the unique column fails clearly instead of being cut or merged."""
        store = self.started()
        failure = self.failureResultOf(store.save_hubs(["http://h.example/" + "x" * 800]), ValueError)
        self.assertIn("768", failure.getErrorMessage())
        self.failureResultOf(store.save("http://h.example/" + "x" * 800, 1, HTML, hub=True), ValueError)

    @inlineCallbacks
    def test_second_save_lands_after_connections_are_killed(self) -> Any:
        """Connections killed server-side between two saves: the second save is retried and stored."""
        store = self.started(reactor=reactor, batch_size=1)
        yield store.save("http://a.example/1", 1, HTML)
        self.assertEqual((yield store.count()), 1)
        killed = self.pool_connections()
        self.assertTrue(killed)
        for connection_id in killed:
            self.admin(f"KILL {int(connection_id)}")
        yield store.save("http://a.example/2", 2, HTML)
        self.assertEqual((yield store.count()), 2)
        self.assertEqual((yield store.get(2)), ("http://a.example/2", HTML))
        self.assertTrue(set(self.pool_connections()).isdisjoint(killed))
        self.assertIn("keeping 1 page and retrying", " ".join(self.logs.texts(LogLevel.warn)))
        self.assertEqual(self.logs.texts(LogLevel.error), [])

    @inlineCallbacks
    def test_batch_kept_while_server_is_down(self) -> Any:
        """While the server is unreachable the batch waits (one warning); it lands when the server is back."""
        port = closed_port()
        url = f"mysql://{self.server['user']}:{SECRET_IN_URL}@127.0.0.1:{port}/{self.database}"
        store = self.started(url=url, batch_size=1)
        d = store.save("http://a.example/1", 1, HTML)
        warning = yield self.logs.wait_for(LogLevel.warn, "cannot reach")
        self.assertIn(f"127.0.0.1:{port}", formatEvent(warning))
        self.assertNoResult(d)
        store._pool.connkw.update(port=self.server["port"], password=self.server["password"])  # the server is back
        self.clock.advance(0)
        yield d
        self.assertEqual((yield store.count()), 1)
        yield self.logs.wait_for(LogLevel.info, "reachable again")
        self.assertEqual(len(self.logs.texts(LogLevel.warn)), 1)
        self.logs.assert_never_contains(SECRET)
        self.logs.assert_never_contains(SECRET_IN_URL)

    @inlineCallbacks
    def test_password_never_logged(self) -> Any:
        """A wrong password is reported (access denied) without the password, and gives up at stop."""
        url = f"mysql://{self.server['user']}:{SECRET_IN_URL}@{self.server['host']}:{self.server['port']}/x"
        store = self.started(url=url, batch_size=1)
        d = store.save("http://a.example/1", 1, HTML)
        warning = yield self.logs.wait_for(LogLevel.warn, "cannot reach")
        self.assertIn("1045", formatEvent(warning))
        stopped = store.stopService()
        self.clock.advance(store.stop_timeout)
        yield stopped
        self.failureResultOf(d, StoreUnavailable)
        self.assertNotIn(SECRET, repr(store.address) + str(store.address) + store.where)
        self.logs.assert_never_contains(SECRET)
        self.logs.assert_never_contains(SECRET_IN_URL)


class MySQLUnreachableTests(TestCase):
    """A MySQL store whose server never answers (no server needed)."""

    @inlineCallbacks
    def test_gives_up_at_stop_deadline(self) -> Any:
        """At stop, retrying ends after stop_timeout; the pages fail with StoreUnavailable, logged without password."""
        clock = Clock()
        logs = LogWatch(self)
        url = f"mysql://spider:{SECRET_IN_URL}@127.0.0.1:{closed_port()}/pages"
        store = open_store(url, "/nonexistent", SplitReactor(clock), batch_size=2, stop_timeout=5.0)
        store.startService()
        saves = [store.save("http://a.example/1", 1, HTML), store.save("http://a.example/2", 2, HTML)]
        yield logs.wait_for(LogLevel.warn, "keeping 2 pages")
        stopped = store.stopService()
        clock.advance(4.9)
        self.assertNoResult(stopped)
        clock.advance(0.1)
        yield stopped
        for d in saves:
            self.failureResultOf(d, StoreUnavailable)
        self.assertTrue(any("2 pages not stored" in text for text in logs.texts(LogLevel.error)))
        self.assertEqual(clock.getDelayedCalls(), [])
        logs.assert_never_contains(SECRET)
        logs.assert_never_contains(SECRET_IN_URL)


class ReconnectorTests(SynchronousTestCase):
    """The retry loop, on a Clock with scripted attempts."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.retry = Reconnector(self.clock, "mysql://u@db:3306/pages")
        self.logs = LogWatch(self)

    def scripted(self, *outcomes: Any) -> Callable[[], Deferred[Any]]:
        script = list(outcomes)

        def attempt() -> Deferred[Any]:
            outcome = script.pop(0)
            return defer.fail(outcome) if isinstance(outcome, Exception) else defer.succeed(outcome)

        return attempt

    def test_backoff_is_capped(self) -> None:
        """At once, then 0.5 s doubling up to 30 s."""
        delays = RECONNECT.delays(at_once=True)
        self.assertEqual([next(delays) for _ in range(10)], [0.0, 0.5, 1, 2, 4, 8, 16, 30, 30, 30])

    def test_retries_lost_connections_until_success(self) -> None:
        """Lost-connection failures are retried on the clock; one warning, one recovery line."""
        lost = pymysql.err.OperationalError(2003, "Can't connect")
        d = self.retry.run(self.scripted(lost, lost, pymysql.err.InterfaceError(0, ""), "done"), "3 pages")
        for delay in (0.0, 0.5, 1.0):
            self.assertNoResult(d)
            self.assertEqual([c.getTime() - self.clock.seconds() for c in self.clock.getDelayedCalls()], [delay])
            self.clock.advance(delay)
        self.assertEqual(self.successResultOf(d), "done")
        self.assertEqual(len(self.logs.texts(LogLevel.warn)), 1)
        self.assertIn("keeping 3 pages", self.logs.texts(LogLevel.warn)[0])
        self.assertEqual(len(self.logs.texts(LogLevel.info)), 1)

    def test_other_errors_are_not_retried(self) -> None:
        """A data error fails at once."""
        d = self.retry.run(self.scripted(pymysql.err.DataError(1406, "Data too long")), "1 page")
        self.failureResultOf(d, pymysql.err.DataError)

    def test_give_up_ends_the_wait(self) -> None:
        """give_up fails a waiting attempt with StoreUnavailable and leaves no timer behind."""
        d = self.retry.run(self.scripted(pymysql.err.OperationalError(2003, "down")), "1 page")
        self.retry.give_up()
        self.failureResultOf(d, StoreUnavailable)
        self.assertEqual(self.clock.getDelayedCalls(), [])


class HelpersTests(SynchronousTestCase):
    """URL parsing, hash mapping, dispatch, and the null store."""

    def test_parse_mysql_url(self) -> None:
        """User and password are URL-decoded, the port defaults to 3306; str() hides the password."""
        address = parse_mysql_url(f"mysql://spider:{SECRET_IN_URL}@db.example/pages")
        parsed = (address.user, address.password, address.host, address.port)
        self.assertEqual(parsed, ("spider", SECRET, "db.example", 3306))
        self.assertEqual(str(address), "mysql://spider@db.example:3306/pages")
        self.assertNotIn(SECRET, repr(address))
        sock = parse_mysql_url("mysql://spider:pw@localhost/pages?unix_socket=/run/mysqld/mysqld.sock")
        self.assertEqual(sock.connect_args()["unix_socket"], "/run/mysqld/mysqld.sock")
        for bad in ("mysql://u:p@h/", "mysql://u:p@h/a/b", "mysql://u:p@h/db?ssl=1"):
            with self.assertRaises(ValueError) as caught:
                parse_mysql_url(bad)
            self.assertNotIn(":p@", str(caught.exception))

    def test_redact(self) -> None:
        """Only the password is hidden."""
        self.assertEqual(redact("mysql://u:pw@h:1/db"), "mysql://u:***@h:1/db")
        self.assertEqual(redact("mysql://u@h/db"), "mysql://u@h/db")

    def test_signed_mapping(self) -> None:
        """The signed reinterpretation is one-to-one over the unsigned 64-bit range."""
        for h in (0, 1, 2**63 - 1, 2**63, 2**64 - 1):
            self.assertTrue(-(2**63) <= to_signed(h) < 2**63)
            self.assertEqual(to_unsigned(to_signed(h)), h)
        self.assertEqual(to_signed(2**64 - 1), -1)

    def test_open_store_dispatch(self) -> None:
        """sqlite paths are relative to data_dir unless absolute; mysql and none are recognised."""
        clock = Clock()
        self.assertEqual(open_store("sqlite:///p.db", "/data", clock).path, "/data/p.db")
        self.assertEqual(open_store("sqlite:////abs/p.db", "/data", clock).path, "/abs/p.db")
        self.assertIsInstance(open_store("mysql://u:p@h/db", "/data", clock), MySQLStore)
        self.assertIsInstance(open_store("none", "/data", clock), NullStore)
        self.assertIsInstance(open_store("sqlite:///p.db", "/data", clock, preset=0), SQLiteStore)
        with self.assertRaises(ValueError) as caught:
            open_store("postgres://u:secret@h/db", "/data", clock)
        self.assertNotIn("secret", str(caught.exception))
        with self.assertRaises(ValueError):
            open_store("none", "/data", clock, batch_size=0)

    def test_null_store(self) -> None:
        """The null store accepts and discards; it refuses work after stop."""
        store = open_store("none", "/data", Clock())
        self.assertTrue(verifyObject(IPageStore, store))
        store.startService()
        self.assertIsNone(self.successResultOf(store.save("http://a.example/1", 1, HTML)))
        self.assertEqual(self.successResultOf(store.count()), 0)
        self.assertIsNone(self.successResultOf(store.get(1)))
        self.successResultOf(store.stopService())
        self.failureResultOf(store.save("http://a.example/1", 1, HTML), StoreNotRunning)


def test_the_fast_preset_is_plain_xz_and_the_default() -> None:
    """The default "fast" preset writes XZ that lzma.decompress reads, smaller than the page, and a bad
    preset name is refused at load."""
    from spiderd.config import settings as cfg
    from spiderd.core.compression import FAST, compress

    page = b"".join(b"<li><a href='/item/%d.html'>Item %d</a></li>\n" % (i, i) for i in range(2000))
    blob = compress(page, FAST)
    assert lzma.decompress(blob) == page and blob.startswith(b"\xfd7zXZ") and len(blob) < len(page) / 4
    assert cfg.from_dict({}).store.compression_preset == FAST
    assert cfg.from_dict({"store": {"compression_preset": "fast"}}).store.compression_preset == FAST
    assert cfg.from_dict({"store": {"compression_preset": 6}}).store.compression_preset == 6
    with pytest.raises(cfg.ConfigError, match="fast"):
        cfg.from_dict({"store": {"compression_preset": "quick"}})
