"""The shared page store: MySQL/MariaDB through pymysql and ``twisted.enterprise.adbapi``.

The schema is seed 000's with two changes, both so that no insert of a real
URL fails or silently merges two URLs:

- ``crawler_html.url`` is TEXT instead of varchar(512) (a 2083-character URL
  fits, and far longer ones too);
- ``crawler_hub.url`` is varchar(768) instead of varchar(64), binary
  collation, with a UNIQUE key on the *whole* column (768 x 4 bytes is
  InnoDB's 3072-byte key limit, hence ROW_FORMAT=DYNAMIC).  A prefix key
  such as ``url(255)`` would treat two hubs sharing 255 characters as one,
  and a case-insensitive collation ``/News`` and ``/news``; longer hub URLs
  are refused with a clear error.

With ``item_table``, a third table, ``crawler_item`` (urlhash, url, site, the site's fields as JSON, fetched_at),
holds each page's item, written in the page's transaction (seed 004's pagebase: fields queried without Spark).

A ``digest`` column (the page's content digest, ``sha1:BASE32``) follows
``created_at``; a ``crawler_html`` made before it gets it (``ALTER TABLE ...
ADD COLUMN``, NULL for the rows already there) at the first write, on the
pool's thread; a user without the ALTER privilege stores pages without it
(one warning says so).

Tables that already exist (an old seed-000 database) are otherwise used as they are;
the sessions run in strict mode, so a URL too long for an old column fails
its own page with the reason instead of being stored cut.

When the server is down or restarts (``OperationalError``, ``InterfaceError``),
a batch is kept and retried with a clock-driven backoff (at once, then 0.5 s
doubling to 30 s) while one warning says so; nothing is lost while MariaDB
restarts, and a retried batch is harmless as every write is an upsert.  A server
that answers but refuses the write (read-only, a lock wait timeout, a full
disk or table: :func:`spiderd.core.storage.storage_error`) fails the batch at
once instead: the node's storage gate holds its work and makes the writes
again (a deadlock, another transaction's doing, is retried here at once).  At
stop, retrying ends after ``stop_timeout`` seconds and the pages still
waiting fail with :class:`StoreUnavailable`.  Reads are retried once, at
once (a connection the server closed while idle), then fail to the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import pymysql
from twisted.enterprise import adbapi
from twisted.internet.defer import CancelledError, Deferred, inlineCallbacks
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core.retry import Backoff
from spiderd.core.secrets import redact
from spiderd.core.storage import storage_error
from spiderd.store.base import Batch, Outcome, PageStore, Statements, StoreUnavailable, decompress, plural, write_rows

log = Logger()
T = TypeVar("T")

HUB_URL_LENGTH = 768
DIGEST_COLUMN = "`digest` varchar(64) CHARACTER SET ascii NULL COMMENT 'content digest, sha1:BASE32'"
SCHEMA = {
    "crawler_html": "CREATE TABLE IF NOT EXISTS `crawler_html` ("
    " `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,"
    " `urlhash` bigint(20) unsigned NOT NULL COMMENT 'farmhash',"
    " `url` text NOT NULL,"
    " `html_lzma` longblob NOT NULL,"
    " `created_at` timestamp NULL DEFAULT CURRENT_TIMESTAMP,"
    f" {DIGEST_COLUMN},"
    " PRIMARY KEY (`id`), UNIQUE KEY `urlhash` (`urlhash`)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
    "crawler_hub": "CREATE TABLE IF NOT EXISTS `crawler_hub` ("
    " `id` int(10) unsigned NOT NULL AUTO_INCREMENT,"
    f" `url` varchar({HUB_URL_LENGTH}) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,"
    " `created_at` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,"
    " PRIMARY KEY (`id`), UNIQUE KEY `url` (`url`)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 ROW_FORMAT=DYNAMIC",
}
ITEM_SCHEMA = ("CREATE TABLE IF NOT EXISTS `crawler_item` ("
               " `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,"
               " `urlhash` bigint(20) unsigned NOT NULL COMMENT 'farmhash, as in crawler_html',"
               " `url` text NOT NULL,"
               " `site` varchar(255) NOT NULL,"
               " `fields` json NOT NULL COMMENT 'the site''s fields',"
               " `fetched_at` double NOT NULL COMMENT 'Unix seconds',"
               " PRIMARY KEY (`id`), UNIQUE KEY `urlhash` (`urlhash`)"
               ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
ITEM_UPSERT = ("INSERT INTO crawler_item (urlhash, url, site, fields, fetched_at) VALUES (%s, %s, %s, %s, %s) "
               "ON DUPLICATE KEY UPDATE url = VALUES(url), site = VALUES(site), fields = VALUES(fields), "
               "fetched_at = VALUES(fetched_at)")
SQL = Statements(
    upsert="INSERT INTO crawler_html (urlhash, url, html_lzma, digest) VALUES (%s, %s, %s, %s) ON DUPLICATE KEY "
    "UPDATE url = VALUES(url), html_lzma = VALUES(html_lzma), digest = VALUES(digest), created_at = CURRENT_TIMESTAMP",
    hub="INSERT INTO crawler_hub (url) VALUES (%s) ON DUPLICATE KEY UPDATE id = id",
)
# A crawler_html without the digest column that this user may not ALTER: pages are stored without digests.
SQL_NO_DIGEST = Statements(
    upsert="INSERT INTO crawler_html (urlhash, url, html_lzma) VALUES (%s, %s, %s) ON DUPLICATE KEY UPDATE "
    "url = VALUES(url), html_lzma = VALUES(html_lzma), created_at = CURRENT_TIMESTAMP",
    hub=SQL.hub,
    digest=False,
)
DUPLICATE_COLUMN = 1060  # another node added the column first
DENIED = (1044, 1142, 1143)  # no ALTER privilege
# Strict mode whatever the server's default: a value that does not fit fails its row, never stored cut.
STRICT = "SET SESSION sql_mode = TRIM(BOTH ',' FROM CONCAT(@@SESSION.sql_mode, ',STRICT_ALL_TABLES'))"
# The server is unreachable or the connection died: keep the work and retry it.
LOST = (pymysql.err.OperationalError, pymysql.err.InterfaceError, adbapi.ConnectionLost)


@dataclass(frozen=True)
class MySQLAddress:
    """Where the database is; ``str()`` and ``repr()`` never show the password."""

    user: str
    password: str = field(repr=False)
    host: str
    port: int
    database: str
    unix_socket: str | None = None

    def __str__(self) -> str:
        place = self.unix_socket or f"{self.host}:{self.port}"
        return f"mysql://{self.user}@{place}/{self.database}"

    def connect_args(self) -> dict[str, Any]:
        """Keyword arguments for ``pymysql.connect``."""
        args = {"user": self.user, "password": self.password, "host": self.host, "port": self.port}
        args["database"] = self.database
        if self.unix_socket:
            args["unix_socket"] = self.unix_socket
        return args


def parse_mysql_url(url: str) -> MySQLAddress:
    """``mysql://user:pass@host:port/db[?unix_socket=/path]``; the password is URL-decoded."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    database = unquote(parts.path.lstrip("/"))
    if parts.scheme != "mysql" or not database or "/" in database or set(query) - {"unix_socket"}:
        raise ValueError(f"expected mysql://USER:PASS@HOST:PORT/DB[?unix_socket=PATH], got {redact(url)!r}")
    return MySQLAddress(
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        host=parts.hostname or "localhost",
        port=parts.port or 3306,
        database=database,
        unix_socket=query.get("unix_socket", [None])[0],
    )


RECONNECT = Backoff(0.5, 30.0)  # a lost write is tried again at once, then after 0.5 s doubling up to 30 s


class Reconnector:
    """Runs attempts again while the database is unreachable, with a capped backoff on the clock."""

    def __init__(self, clock: IReactorTime, where: str, backoff: Backoff = RECONNECT) -> None:
        self._clock = clock
        self._where = where
        self._backoff = backoff
        self._sleeping: set[Deferred[None]] = set()
        self.giving_up = False

    @inlineCallbacks
    def run(self, attempt: Callable[[], Deferred[T]], what: str) -> Any:
        """Fire with ``attempt()``'s result; retry it as long as it fails for a lost connection."""
        delays = self._backoff.delays(at_once=True)
        failures = 0
        while True:
            try:
                result = yield attempt()
            except LOST as e:
                if storage_error(e) not in (None, "deadlock"):
                    raise  # the server refuses writes: the storage gate's to hold the node and try again
                failures += 1
                if self.giving_up:
                    raise self._unavailable(e) from e
                delay = next(delays)
                if failures == 1:
                    log.warn(
                        "page store: cannot reach {where} ({error}); keeping {what} and retrying "
                        "(backoff up to {cap:g} s)", where=self._where, error=describe(e), what=what,
                        cap=self._backoff.cap,
                    )
                yield self._sleep(delay, e)
            else:
                if failures:
                    log.info(
                        "page store: {where} reachable again after {failures} failed attempt(s); {what} written",
                        where=self._where, failures=failures, what=what,
                    )
                return result

    def give_up(self) -> None:
        """End the retrying: the waiting attempts fail with StoreUnavailable."""
        self.giving_up = True
        for sleep in list(self._sleeping):
            sleep.cancel()

    @inlineCallbacks
    def _sleep(self, delay: float, error: Exception) -> Any:
        if self.giving_up:
            raise self._unavailable(error)
        sleep = deferLater(self._clock, delay, lambda: None)
        self._sleeping.add(sleep)
        try:
            yield sleep
        except CancelledError:
            raise self._unavailable(error) from error
        finally:
            self._sleeping.discard(sleep)

    def _unavailable(self, error: Exception) -> StoreUnavailable:
        return StoreUnavailable(f"{self._where} still unreachable at stop ({describe(error)})")


def describe(error: BaseException) -> str:
    """A one-line description of a database error."""
    if isinstance(error, pymysql.err.MySQLError) and len(error.args) == 2:
        return f"{type(error).__name__} {error.args[0]}: {error.args[1]}"
    return f"{type(error).__name__}: {error}".rstrip(": ")


class QuietConnection(adbapi.Connection):
    """adbapi's connection, except that a dead one is dropped without logging tracebacks.

    adbapi logs "Rollback failed" with a traceback, twice, for every interaction
    on a dead connection; the store logs one line per outage instead.
    """

    def rollback(self) -> None:
        try:
            assert self._connection is not None  # (None after close: this except drops it either way)
            self._connection.rollback()
        except Exception:
            self._pool.disconnect(self._connection)  # the next interaction on this thread reconnects


class MySQLStore(PageStore):
    """Pages in MySQL/MariaDB, written through an adbapi pool of a few connections."""

    max_hub_url_length = HUB_URL_LENGTH

    def __init__(self, address: MySQLAddress, reactor: IReactorTime, *, stop_timeout: float = 60.0, **options: Any) -> None:
        super().__init__(reactor, **options)
        self.address = address
        self.stop_timeout = stop_timeout
        self._retry = Reconnector(reactor, str(address))
        self._pool: adbapi.ConnectionPool | None = None
        self._deadline: IDelayedCall | None = None
        self._schema_ready = False
        self._schema = {**SCHEMA, "crawler_item": ITEM_SCHEMA} if self.item_table else SCHEMA
        self._sql = replace(SQL, item=ITEM_UPSERT) if self.item_table else SQL

    @property
    def where(self) -> str:
        return str(self.address)

    def _open(self) -> None:
        self._retry.giving_up = False
        self._pool = adbapi.ConnectionPool(
            "pymysql", **self.address.connect_args(), charset="utf8mb4", autocommit=False, init_command=STRICT,
            connect_timeout=10, read_timeout=120, write_timeout=120,
            cp_reconnect=True, cp_reactor=self._reactor, cp_min=1, cp_max=3, cp_name="spiderd-store-mysql",
        )
        self._pool.connectionFactory = QuietConnection

    def _stopping(self) -> None:
        self._deadline = self._reactor.callLater(self.stop_timeout, self._retry.give_up)

    def _close(self) -> Deferred[None]:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None
        if self._pool is not None:
            self._pool.close()  # the threads are idle: joining them is immediate
            self._pool = None
        return super()._close()

    def _interact(self, interaction: Callable[..., T], *args: Any) -> Deferred[T]:
        assert self._pool is not None, "the store is not started"
        d: Deferred[T] = self._pool.runInteraction(interaction, *args)  # (adbapi is untyped)
        return d

    def _write(self, batch: Batch) -> Deferred[Outcome]:
        return self._retry.run(lambda: self._interact(self._write_txn, batch), plural(len(batch), "page"))

    def _write_hubs(self, urls: list[str]) -> Deferred[int]:
        return self._retry.run(lambda: self._interact(self._write_hubs_txn, urls), plural(len(urls), "hub URL"))

    def _get(self, urlhash: int) -> Deferred[tuple[str, bytes] | None]:
        return self._read(self._get_txn, urlhash)

    def _count(self) -> Deferred[int]:
        return self._read(self._count_txn)

    def _hubs(self) -> Deferred[list[str]]:
        return self._read(self._hubs_txn)

    def _read(self, interaction: Callable[..., T], *args: Any) -> Deferred[T]:
        """Run a read; once more at once if the connection was found dead."""

        def again(failure: Failure) -> Deferred[T]:
            failure.trap(*LOST)
            return self._interact(interaction, *args)

        return self._interact(interaction, *args).addErrback(again)

    # -- on the pool's threads ------------------------------------------------------

    def _ensure_schema(self, txn: Any) -> None:
        """Create the missing tables (a user without CREATE can use tables made for it)."""
        if self._schema_ready:
            return
        txn.execute(
            "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN %s",
            (tuple(self._schema),),
        )
        existing = {row[0] for row in txn.fetchall()}
        for table, statement in self._schema.items():
            if table not in existing:
                txn.execute(statement)
        if "crawler_html" in existing:
            self._add_digest_column(txn)
        self._schema_ready = True

    def _add_digest_column(self, txn: Any) -> None:
        """Give a ``crawler_html`` made before the ``digest`` column that column (NULL for its rows)."""
        txn.execute(
            "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"
            " AND TABLE_NAME = 'crawler_html' AND COLUMN_NAME = 'digest'"
        )
        if txn.fetchone()[0]:
            return
        try:
            txn.execute(f"ALTER TABLE crawler_html ADD COLUMN {DIGEST_COLUMN}")
            log.info("page store: column digest added to crawler_html in {where}", where=self.where)
        except pymysql.err.MySQLError as e:
            code = e.args[0] if e.args else None
            if code == DUPLICATE_COLUMN:
                return
            if code not in DENIED:
                raise
            log.warn("page store: crawler_html in {where} has no digest column and this user may not add it "
                     "({error}); pages are stored without their digest", where=self.where, error=describe(e))
            self._sql = replace(SQL_NO_DIGEST, item=self._sql.item)

    def _write_txn(self, txn: Any, batch: Batch) -> Outcome:
        batch.encode(int)  # compress before the transaction starts
        self._ensure_schema(txn)
        return write_rows(txn, self._sql, batch, int, LOST)

    def _write_hubs_txn(self, txn: Any, urls: list[str]) -> int:
        self._ensure_schema(txn)
        return int(txn.executemany(SQL.hub, [(url,) for url in urls]) or 0)

    def _get_txn(self, txn: Any, urlhash: int) -> tuple[str, bytes] | None:
        self._ensure_schema(txn)
        txn.execute("SELECT url, html_lzma FROM crawler_html WHERE urlhash = %s", (urlhash,))
        row = txn.fetchone()
        return None if row is None else (row[0], decompress(row[1]))

    def _count_txn(self, txn: Any) -> int:
        self._ensure_schema(txn)
        txn.execute("SELECT COUNT(*) FROM crawler_html")
        return int(txn.fetchone()[0])

    def _hubs_txn(self, txn: Any) -> list[str]:
        self._ensure_schema(txn)
        txn.execute("SELECT url FROM crawler_hub ORDER BY id")
        return [row[0] for row in txn.fetchall()]
