"""MySQL refusing writes (issue 35.1): a page store whose table another session holds locked answers the crawl's
writes with a lock wait timeout (1205); the node's storage gate holds the crawl (nothing fails, nothing new is
fetched, the status says why) and the writes are made once the lock is gone."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import pymysql
from twisted.internet import defer
from twisted.logger import capturedLogs

from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool import open_memory_pool
from spiderd.store import mysql as store_mysql
from spiderd.store import open_store

from .services import mysql_url, need_mysql
from .test_storage import StorageCrawl, few_lines

# the store's sessions give up waiting for a lock after 1 s (50 s for a row lock, a day for a table's by default)
SHORT_WAITS = store_mysql.STRICT + ", innodb_lock_wait_timeout = 1, lock_wait_timeout = 1"


class MySQLRefusesTests(StorageCrawl):
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
        url = mysql_url(self.database)
        crawler = yield self.crawl(
            lambda clock: open_memory_pool(clock, politeness=Politeness(concurrency=4), failure_threshold=1),
            lambda clocked: open_store(url, tempfile.mkdtemp(), clocked, batch_size=5), tempfile.mkdtemp())
        with self.locker.cursor() as cursor:
            cursor.execute("LOCK TABLES crawler_html WRITE")
        with capturedLogs() as events:
            yield self.held(crawler, "store")
            self.assertEqual(self.gate.blocks["store"].error, "lock wait timeout")
            with self.locker.cursor() as cursor:
                cursor.execute("UNLOCK TABLES")
            yield self.to_the_end(crawler)
        few_lines(self, events)
