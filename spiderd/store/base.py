"""What every page store shares: the batching queue, the writer-thread encoding, the shutdown drain.

A backend subclasses :class:`PageStore` and supplies the blocking parts as
methods that return Deferreds (``_write``, ``_write_hubs``, ``_get``,
``_count``, ``_hubs``, ``_open``, ``_close``).  Writes are serialised through
one ``DeferredLock``, so batches commit in the order they were queued and a
re-crawled page's newer content always wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, TypeVar

from twisted.application.service import Service
from twisted.internet.defer import Deferred, DeferredList, DeferredLock, fail, inlineCallbacks, maybeDeferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from spiderd.core.compression import FAST, compress, decompress
from spiderd.core.storage import storage_error
from spiderd.store.interfaces import IPageStore

log = Logger()
T = TypeVar("T")
Outcome = list[BaseException | None]  # per page of a batch: None = committed, else why not
MAX_HASH = 2**64
Row = tuple[int, str, bytes, str | None]  # urlhash (as the database keeps it), url, html_lzma, digest


class StoreNotRunning(RuntimeError):
    """The store was asked to work before startService or after stopService began."""


class StoreUnavailable(RuntimeError):
    """The database stayed unreachable until the stop deadline; the page was not stored."""


@dataclass(frozen=True, slots=True)
class Page:
    """One page as given to ``save``."""

    url: str
    urlhash: int
    html: bytes
    hub: bool
    compressed: bytes | None = None  # html_lzma made elsewhere (by a parse worker), or None
    digest: str | None = None  # the body's content digest (spiderd.core.digest), or None (the column's NULL)
    item: ItemRow | None = None  # its item's row of crawler_item (a store with item_table), or None


@dataclass(frozen=True, slots=True)
class ItemRow:
    """A page's item as the ``crawler_item`` table keeps it: its site, its fields (JSON text) and its fetch time."""

    site: str
    fields: str
    fetched_at: float


@dataclass(frozen=True, slots=True)
class Statements:
    """A backend's SQL: the upsert takes (urlhash, url, html_lzma, digest), the hub insert (url,), the item upsert
    (urlhash, url, site, fields, fetched_at).

    ``digest`` False: the upsert takes the first three only (a table without the column, see mysql.py).
    """

    upsert: str
    hub: str
    digest: bool = True
    item: str = ""


class Batch:
    """Pages on their way to the database, compressed once, on the writer's thread."""

    def __init__(self, pages: list[Page], preset: int) -> None:
        self.pages = pages
        self.preset = preset
        self._rows: list[Row | BaseException] | None = None

    def __len__(self) -> int:
        return len(self.pages)

    def encode(self, db_hash: Callable[[int], int]) -> list[Row | BaseException]:
        """One row or one error per page; compresses on the first call only (a retry reuses the rows)."""
        if self._rows is None:
            self._rows = [_encode(page, db_hash, self.preset) for page in self.pages]
        return self._rows


def _encode(page: Page, db_hash: Callable[[int], int], preset: int) -> Row | BaseException:
    try:
        blob = page.compressed if page.compressed is not None else compress(page.html, preset)
        return (db_hash(page.urlhash), page.url, blob, page.digest)
    except Exception as e:  # a page that cannot be encoded fails alone
        return e


Fatal = tuple[type[BaseException], ...]


def write_rows(cursor: Any, sql: Statements, batch: Batch, db_hash: Callable[[int], int], fatal: Fatal) -> Outcome:
    """Write a batch inside the open transaction: all rows at once, or one by one if some row is bad.

    Errors of the ``fatal`` kinds (a lost connection) abort the whole batch;
    any other error fails only the rows that cause it.
    """
    rows = batch.encode(db_hash)
    outcome: Outcome = [row if isinstance(row, BaseException) else None for row in rows]
    good = [i for i, row in enumerate(rows) if not isinstance(row, BaseException)]
    try:
        _in_savepoint(cursor, lambda: _write_all(cursor, sql, batch, rows, good))
    except fatal:
        raise
    except Exception:
        for i in good:
            outcome[i] = _write_one(cursor, sql, batch.pages[i], rows[i], fatal)
    return outcome


def _write_all(cursor: Any, sql: Statements, batch: Batch, rows: list[Any], good: list[int]) -> None:
    if good:
        cursor.executemany(sql.upsert, [_params(sql, rows[i]) for i in good])
    hubs = [(batch.pages[i].url,) for i in good if batch.pages[i].hub]
    if hubs:
        cursor.executemany(sql.hub, hubs)
    items = [_item_params(rows[i], batch.pages[i].item) for i in good if batch.pages[i].item is not None]
    if items and sql.item:
        cursor.executemany(sql.item, items)


def _item_params(row: Row, item: ItemRow | None) -> tuple[Any, ...]:
    """The item upsert's parameters: the page row's urlhash (as the database keeps it) and URL, then the item's."""
    assert item is not None
    return (row[0], row[1], item.site, item.fields, item.fetched_at)


def _write_one(cursor: Any, sql: Statements, page: Page, row: Any, fatal: Fatal) -> BaseException | None:
    def write() -> None:
        cursor.execute(sql.upsert, _params(sql, row))
        if page.hub:
            cursor.execute(sql.hub, (page.url,))
        if page.item is not None and sql.item:
            cursor.execute(sql.item, _item_params(row, page.item))

    try:
        _in_savepoint(cursor, write)
    except fatal:
        raise
    except Exception as e:
        return e
    return None


def _params(sql: Statements, row: Row) -> tuple[Any, ...]:
    return row if sql.digest else row[:3]


def _in_savepoint(cursor: Any, work: Callable[[], None]) -> None:
    """Run ``work`` so that, if it fails, none of its statements stay in the transaction."""
    cursor.execute("SAVEPOINT spiderd_rows")
    try:
        work()
    except BaseException:
        cursor.execute("ROLLBACK TO SAVEPOINT spiderd_rows")
        cursor.execute("RELEASE SAVEPOINT spiderd_rows")
        raise
    cursor.execute("RELEASE SAVEPOINT spiderd_rows")


def check_page(url: Any, urlhash: Any, html: Any) -> Exception | None:
    """Why ``save`` cannot take these arguments, or None."""
    if not isinstance(url, str):
        return TypeError(f"url must be str, got {type(url).__name__}")
    if not isinstance(urlhash, int) or isinstance(urlhash, bool) or not 0 <= urlhash < MAX_HASH:
        return ValueError(f"urlhash must be an unsigned 64-bit int, got {urlhash!r}")
    if not isinstance(html, (bytes, bytearray, memoryview)):
        return TypeError(f"html must be bytes, got {type(html).__name__}")
    return None


@implementer(IPageStore)
class PageStore(Service):
    """A page store: queues pages and writes them in batches through the backend's hooks."""

    name = "page-store"  # type: ignore[assignment]  # Service declares it None
    max_hub_url_length: int | None = None  # a backend whose hub column is bounded sets it

    def __init__(
        self, reactor: IReactorTime, *, preset: int = 1, batch_size: int = 100, flush_interval: float = 1.0,
        item_table: bool = False,
    ) -> None:
        """``item_table``: each page's item goes in ``crawler_item`` too, in the same transaction as the page."""
        if not FAST <= preset <= 9 or batch_size < 1 or not flush_interval > 0:
            raise ValueError(f"bad store options: {preset=} {batch_size=} {flush_interval=}")
        self.item_table = item_table
        self._reactor = reactor
        self.preset = preset
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self._queue: list[tuple[Page, Deferred[None]]] = []
        self._timer: IDelayedCall | None = None
        self._lock = DeferredLock()
        self._busy: set[Deferred[None]] = set()
        self._writing = 0

    @property
    def where(self) -> str:
        """Where the pages go, fit for logs (never a password)."""
        return "nowhere"

    @property
    def pending(self) -> int:
        """Pages accepted but not yet committed (queued or being written): a back-pressure signal."""
        return len(self._queue) + self._writing

    # -- the API --------------------------------------------------------------------

    def save(
        self, url: str, urlhash: int, html: bytes, hub: bool = False, compressed: bytes | None = None,
        digest: str | None = None, item: ItemRow | None = None,
    ) -> Deferred[None]:
        """Queue a page (and, if ``hub``, its URL as a hub); fires once its row is committed.

        ``compressed``, when given, is the page already XZ-compressed (by a parse worker), stored as is;
        ``digest`` is its content digest (the ``digest`` column; NULL without one); ``item``, its item's row of
        ``crawler_item``, written in the page's transaction where ``item_table`` is on (else left out).
        """
        problem = self._not_running(f"page {url!r} not saved") or check_page(url, urlhash, html)
        problem = problem or (self._hub_too_long(url) if hub else None)
        if problem is not None:
            return fail(problem)
        done: Deferred[None] = Deferred()
        kept = item if self.item_table else None
        self._queue.append((Page(url, urlhash, bytes(html), bool(hub), compressed, digest, kept), done))
        if len(self._queue) >= self.batch_size:
            self.flush()
        elif self._timer is None:
            self._timer = self._reactor.callLater(self.flush_interval, self.flush)
        return done

    def save_hubs(self, urls: Iterable[str]) -> Deferred[int]:
        """Record hub URLs, ignoring those already there; fires with the number added."""
        unique = list(dict.fromkeys([urls] if isinstance(urls, str) else urls))
        problem = self._not_running("hubs not saved") or _first(self._check_hub(url) for url in unique)
        if problem is not None:
            return fail(problem)
        if not unique:
            return succeed(0)
        return self._track(self._lock.run(self._write_hubs, unique))

    def get(self, urlhash: int) -> Deferred[tuple[str, bytes] | None]:
        """Fires with (url, html) of the page stored under ``urlhash``, or None."""
        problem = self._not_running("cannot read") or check_page("", urlhash, b"")
        return fail(problem) if problem else self._track(maybeDeferred(self._get, urlhash))

    def count(self) -> Deferred[int]:
        """Fires with the number of stored pages."""
        problem = self._not_running("cannot count")
        return fail(problem) if problem else self._track(maybeDeferred(self._count))

    def hubs(self) -> Deferred[list[str]]:
        """Fires with every stored hub URL, oldest first."""
        problem = self._not_running("cannot read hubs")
        return fail(problem) if problem else self._track(maybeDeferred(self._hubs))

    def flush(self) -> Deferred[None]:
        """Write the queued pages now; fires once each of them is committed or failed."""
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        queued, self._queue = self._queue, []
        if not queued:
            return succeed(None)
        self._writing += len(queued)
        d = self._lock.run(self._write_queued, queued)
        d.addErrback(lambda f: log.failure("page store: settling a batch failed", f))
        return self._track(d)

    # -- the service ----------------------------------------------------------------

    def startService(self) -> None:
        Service.startService(self)
        self._open()

    @inlineCallbacks
    def stopService(self) -> Any:
        """Refuse new work, write every queued page, wait for all work in flight, then close."""
        Service.stopService(self)
        self.flush()
        self._stopping()
        yield DeferredList(list(self._busy))
        try:
            yield self._close()
        except Exception:
            log.failure("page store: closing {where} failed", where=self.where)

    # -- the backend's part ---------------------------------------------------------

    def _open(self) -> None:
        """Start threads or pools (called by startService)."""

    def _stopping(self) -> None:
        """Stop has begun; the queued pages are being written."""

    def _close(self) -> Deferred[None]:
        """Release everything; all work is done by now."""
        return succeed(None)

    def _write(self, batch: Batch) -> Deferred[Outcome]:
        raise NotImplementedError

    def _write_hubs(self, urls: list[str]) -> Deferred[int]:
        raise NotImplementedError

    def _get(self, urlhash: int) -> Deferred[tuple[str, bytes] | None]:
        raise NotImplementedError

    def _count(self) -> Deferred[int]:
        raise NotImplementedError

    def _hubs(self) -> Deferred[list[str]]:
        raise NotImplementedError

    # -- internals ------------------------------------------------------------------

    def _not_running(self, what: str) -> Exception | None:
        if self.running:
            return None
        return StoreNotRunning(f"page store {self.where} is not running (stopped, or not started yet): {what}")

    def _check_hub(self, url: Any) -> Exception | None:
        if not isinstance(url, str):
            return TypeError(f"hub url must be str, got {type(url).__name__}")
        return self._hub_too_long(url)

    def _hub_too_long(self, url: str) -> Exception | None:
        limit = self.max_hub_url_length
        if limit is not None and len(url) > limit:
            return ValueError(f"hub url longer than {limit} characters cannot be stored in {self.where}: {url[:80]!r}")
        return None

    def _track(self, d: Deferred[T]) -> Deferred[T]:
        """Remember ``d`` until it fires, so that stopService can wait for it."""
        waiter: Deferred[None] = Deferred()
        self._busy.add(waiter)

        def done(result: Any) -> Any:
            self._busy.discard(waiter)
            waiter.callback(None)
            return result

        return d.addBoth(done)

    def _write_queued(self, queued: list[tuple[Page, Deferred[None]]]) -> Deferred[None]:
        batch = Batch([page for page, _ in queued], self.preset)
        d = maybeDeferred(self._write, batch)
        return d.addCallbacks(self._settle, self._fail_all, callbackArgs=(queued,), errbackArgs=(queued,))

    def _settle(self, outcome: Outcome, queued: list[tuple[Page, Deferred[None]]]) -> None:
        self._writing -= len(queued)
        for (page, done), error in zip(queued, outcome):
            if error is None:
                done.callback(None)
                continue
            if storage_error(error) is None:  # a full disk fails every page: the storage gate tells of it once
                log.error(
                    "page store: {url!r} not stored in {where}: {error}",
                    url=page.url, where=self.where, error=f"{type(error).__name__}: {error}",
                )
            done.errback(Failure(error))

    def _fail_all(self, failure: Failure, queued: list[tuple[Page, Deferred[None]]]) -> None:
        self._writing -= len(queued)
        pages = plural(len(queued), "page")
        if failure.check(StoreUnavailable):
            log.error("page store: {pages} not stored: {error}", pages=pages, error=failure.getErrorMessage())
        elif storage_error(failure) is not None:
            log.debug("page store: {pages} not stored: {error}", pages=pages, error=storage_error(failure))
        else:
            log.failure("page store: a batch of {pages} was not stored in {where}", failure, pages=pages,
                        where=self.where)
        for _, done in queued:
            done.errback(failure)


def plural(count: int, noun: str) -> str:
    """``1 page``, ``2 pages``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _first(problems: Iterable[Exception | None]) -> Exception | None:
    return next((p for p in problems if p is not None), None)


class NullStore(PageStore):
    """A store that discards every page at once (for benchmarks): ``count`` stays 0."""

    def save(
        self, url: str, urlhash: int, html: bytes, hub: bool = False, compressed: bytes | None = None,
        digest: str | None = None, item: ItemRow | None = None,
    ) -> Deferred[None]:
        problem = self._not_running(f"page {url!r} not saved") or check_page(url, urlhash, html)
        return fail(problem) if problem else succeed(None)

    def _write_hubs(self, urls: list[str]) -> Deferred[int]:
        return succeed(0)

    def _get(self, urlhash: int) -> Deferred[tuple[str, bytes] | None]:
        return succeed(None)

    def _count(self) -> Deferred[int]:
        return succeed(0)

    def _hubs(self) -> Deferred[list[str]]:
        return succeed([])
