"""The embedded page store: SQLite on one lane (one thread, in order) that owns the connection.

The schema is seed 000's, in SQLite's types (with ``item_table``, a ``crawler_item`` table too: each page's
item, written in the page's transaction), plus a ``digest`` column (the page's
content digest; added, NULL for the rows already there, to a table made before it,
when the store opens, on its thread).  SQLite's INTEGER is a *signed*
64-bit number, so ``urlhash`` (an unsigned farmhash) is stored as its signed
reinterpretation (``h - 2**64`` when ``h >= 2**63``) and converted back on
read; the mapping is one-to-one, so the UNIQUE constraint still means "one row
per URL hash".  URLs of any length are stored (TEXT).

The database runs in WAL mode with ``synchronous=FULL``: a save's Deferred
fires after its batch's COMMIT, and a committed batch survives a crash or a
power cut.  Each batch is one ``BEGIN IMMEDIATE`` transaction, so the fsync is
paid once per batch, not once per page.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any, Callable, TypeVar

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger

from spiderd.core.blocking import Lane
from spiderd.core.reactors import IThreadedClock
from spiderd.store.base import Batch, Outcome, PageStore, Statements, decompress, write_rows

log = Logger()
T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS crawler_html (
    id INTEGER PRIMARY KEY,
    urlhash INTEGER NOT NULL UNIQUE,  -- farmhash, as a signed 64-bit number
    url TEXT NOT NULL,
    html_lzma BLOB NOT NULL,
    created_at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP,
    digest TEXT NULL  -- the body's content digest, sha1:BASE32 (spiderd.core.digest)
);
CREATE TABLE IF NOT EXISTS crawler_hub (
    id INTEGER PRIMARY KEY,
    url TEXT NOT NULL UNIQUE,
    created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
);
"""
ITEM_SCHEMA = """
CREATE TABLE IF NOT EXISTS crawler_item (
    id INTEGER PRIMARY KEY,
    urlhash INTEGER NOT NULL UNIQUE,  -- the page's, as in crawler_html
    url TEXT NOT NULL,
    site TEXT NOT NULL,
    fields TEXT NOT NULL CHECK (json_valid(fields)),  -- the site's fields, JSON (json_extract(fields, '$.title'))
    fetched_at REAL NOT NULL  -- Unix seconds
);
"""
ITEM_UPSERT = ("INSERT INTO crawler_item (urlhash, url, site, fields, fetched_at) VALUES (?, ?, ?, ?, ?) "
               "ON CONFLICT (urlhash) DO UPDATE SET url = excluded.url, site = excluded.site, "
               "fields = excluded.fields, fetched_at = excluded.fetched_at")
SQL = Statements(
    upsert="INSERT INTO crawler_html (urlhash, url, html_lzma, digest) VALUES (?, ?, ?, ?) ON CONFLICT (urlhash) "
    "DO UPDATE SET url = excluded.url, html_lzma = excluded.html_lzma, digest = excluded.digest, "
    "created_at = CURRENT_TIMESTAMP",
    hub="INSERT INTO crawler_hub (url) VALUES (?) ON CONFLICT (url) DO NOTHING",
)
SQL_ITEMS = Statements(SQL.upsert, SQL.hub, item=ITEM_UPSERT)
# Errors that concern the whole database (disk full, I/O error, locked): they fail the whole batch.
FATAL = (sqlite3.OperationalError,)


def to_signed(urlhash: int) -> int:
    """The signed 64-bit number with the same bits as the unsigned ``urlhash``."""
    return urlhash - 2**64 if urlhash >= 2**63 else urlhash


def to_unsigned(value: int) -> int:
    """The inverse of :func:`to_signed`."""
    return value + 2**64 if value < 0 else value


def add_digest_column(db: sqlite3.Connection) -> None:
    """Give a ``crawler_html`` made before the ``digest`` column that column (its rows' digest NULL)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(crawler_html)")}
    if "digest" not in columns:
        db.execute("ALTER TABLE crawler_html ADD COLUMN digest TEXT NULL")
        log.info("page store: column digest added to crawler_html")


class SQLiteDB:
    """The blocking half: a connection used only on the store's own thread."""

    def __init__(self, path: str, item_table: bool = False) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._item_table = item_table
        self._sql = SQL_ITEMS if item_table else SQL

    def open(self) -> sqlite3.Connection:
        """The connection, opened (and the schema created) on first use."""
        if self._db is None:
            directory = os.path.dirname(self.path)
            if directory:
                os.makedirs(directory, exist_ok=True)
            db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.executescript(SCHEMA + (ITEM_SCHEMA if self._item_table else ""))
            add_digest_column(db)
            self._db = db
        return self._db

    def write(self, batch: Batch) -> Outcome:
        """Write a batch in one transaction; one outcome per page."""
        return self._transaction(lambda cursor: write_rows(cursor, self._sql, batch, to_signed, FATAL))

    def write_hubs(self, urls: list[str]) -> int:
        """Insert hub URLs, skipping known ones; the number inserted."""

        def insert(cursor: sqlite3.Cursor) -> int:
            cursor.executemany(SQL.hub, [(url,) for url in urls])
            return cursor.rowcount

        return self._transaction(insert)

    def get(self, urlhash: int) -> tuple[str, bytes] | None:
        """(url, html) stored under ``urlhash``, or None."""
        row = self.open().execute(
            "SELECT url, html_lzma FROM crawler_html WHERE urlhash = ?", (to_signed(urlhash),)
        ).fetchone()
        return None if row is None else (row[0], decompress(row[1]))

    def count(self) -> int:
        """The number of stored pages."""
        return int(self.open().execute("SELECT COUNT(*) FROM crawler_html").fetchone()[0])

    def hubs(self) -> list[str]:
        """Every hub URL, oldest first."""
        return [row[0] for row in self.open().execute("SELECT url FROM crawler_hub ORDER BY id")]

    def close(self) -> None:
        """Close the connection (a WAL checkpoint happens here)."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def _transaction(self, work: Callable[[sqlite3.Cursor], T]) -> T:
        db = self.open()
        cursor = db.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        try:
            result = work(cursor)
            cursor.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.rollback()
            raise
        return result


class SQLiteStore(PageStore):
    """Pages in a SQLite file, written on a lane of one thread (``lane``, default one of the store's own)."""

    _reactor: IThreadedClock

    def __init__(self, path: str, reactor: IThreadedClock, lane: Lane | None = None, **options: Any) -> None:
        super().__init__(reactor, **options)
        self.path = path
        self._db = SQLiteDB(path, self.item_table)
        self._lane = lane or Lane(reactor, "store")
        self._opened = False

    @property
    def where(self) -> str:
        return f"sqlite:{self.path}"

    def _open(self) -> None:
        self._lane.start()
        self._opened = True
        self._call(self._db.open).addErrback(
            lambda f: log.failure("page store: cannot open {where}", f, where=self.where)
        )

    def _call(self, work: Callable[..., T], *args: Any) -> Deferred[T]:
        assert self._opened, "the store is not started"
        return self._lane.run(work, *args)

    def _write(self, batch: Batch) -> Deferred[Outcome]:
        return self._call(self._db.write, batch)

    def _write_hubs(self, urls: list[str]) -> Deferred[int]:
        return self._call(self._db.write_hubs, urls)

    def _get(self, urlhash: int) -> Deferred[tuple[str, bytes] | None]:
        return self._call(self._db.get, urlhash)

    def _count(self) -> Deferred[int]:
        return self._call(self._db.count)

    def _hubs(self) -> Deferred[list[str]]:
        return self._call(self._db.hubs)

    def _close(self) -> Deferred[None]:
        if not self._opened:
            return succeed(None)
        d = self._call(self._db.close)
        d.addBoth(self._stop_lane)
        return d

    def _stop_lane(self, result: Any) -> Any:
        """This store is done with its lane (idle: its queue is empty)."""
        if self._opened:
            self._opened = False
            self._lane.stop()
        return result
