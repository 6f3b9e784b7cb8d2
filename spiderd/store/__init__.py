"""The page store: fetched pages in seed 000's ``crawler_html`` table, hub URLs in ``crawler_hub``.

``open_store(url, data_dir, reactor)`` picks the backend from the URL:

- ``sqlite:///pages.sqlite3`` (under ``data_dir``) or ``sqlite:////abs/path``:
  embedded, one thread of its own (:mod:`spiderd.store.sqlite`);
- ``mysql://user:pass@host:port/db[?unix_socket=/path]``: shared, through
  adbapi, riding out server restarts (:mod:`spiderd.store.mysql`);
- ``none``: discards every page (benchmarks);
- a list of ``mysql://`` URLs: seed 004's shards, a page in shard
  ``urlhash % n`` (:mod:`spiderd.store.shards`).

``save`` queues a page; the queue is written as one batch when ``batch_size``
pages wait or ``flush_interval`` seconds after the first of them, and each
save's Deferred fires when its row is committed (or fails alone, with the
reason, if that row cannot be written).  A re-crawled page (same urlhash)
updates its row.  Compression happens on the writer's thread; nothing blocks
the reactor.  ``stopService`` writes everything queued, waits for the writes
in flight and closes; later calls fail with :class:`StoreNotRunning`.

Compression: XZ at ``preset`` 1 (:func:`spiderd.core.compression.compress`, with a
dictionary sized to the page), which plain ``lzma.decompress`` reads whatever
the preset.  With parser processes the crawler has them compress the page and
hands the store the result.  Measured here (Python 3.11,
one core of this 2-core machine) on 200 generated pages of 20-60 KB (39 KB
mean) of repeated markup, links, scripts and Zipf-distributed words:

=======  ==========  =========  ======================  =====================
preset   MB/s        pages/s    ratio (text-heavy)      ratio (markup-heavy)
=======  ==========  =========  ======================  =====================
0        26-32       650-790    2.90                    3.52
1        25-30       630-740    2.94                    3.56
6        7.1         180        3.18                    3.84
=======  ==========  =========  ======================  =====================

The default preset 6 would cap a core near 180 pages/s; preset 1 is 3.5-4x
faster for output about 8% larger.  The default, ``"fast"``
(``store.compression_preset``, :data:`spiderd.core.compression.FAST`), is
preset 0 with a short match search: 12% less CPU than preset 1 for output 2%
larger (measured on the bench site's 20-60 KB pages, heap kept between pages).
"""

from __future__ import annotations

import os
from typing import Sequence, TypedDict

from spiderd.config.sections import StoreSection
from spiderd.core.blocking import Lane
from spiderd.core.compression import FAST
from spiderd.core.reactors import IThreadedClock
from spiderd.store.base import NullStore, PageStore, StoreNotRunning, StoreUnavailable
from spiderd.store.mysql import MySQLStore, parse_mysql_url, redact
from spiderd.store.shards import ShardedStore
from spiderd.store.sqlite import SQLiteStore

__all__ = [
    "DEFAULT_PRESET",
    "MySQLStore",
    "NullStore",
    "PageStore",
    "SQLiteStore",
    "ShardedStore",
    "StoreNotRunning",
    "StoreUnavailable",
    "open_store",
    "page_store",
]

DEFAULT_PRESET = FAST


class _Options(TypedDict):
    """What every backend passes on to :class:`PageStore`."""

    preset: int
    batch_size: int
    flush_interval: float
    item_table: bool


def open_store(
    url: str | Sequence[str],
    data_dir: str,
    reactor: IThreadedClock,
    *,
    preset: int = DEFAULT_PRESET,
    batch_size: int = 100,
    flush_interval: float = 1.0,
    stop_timeout: float = 60.0,
    lane: Lane | None = None,
    item_table: bool = False,
) -> PageStore | ShardedStore:
    """The page store named by ``url`` (a Service: start it before use, stop it to flush and close).

    ``stop_timeout`` bounds how long a MySQL store keeps retrying at stop
    while the server is unreachable; ``lane`` is the SQLite store's (default: one of its own); ``item_table``: each
    page's item goes in ``crawler_item`` too.
    """
    options: _Options = {"preset": preset, "batch_size": batch_size, "flush_interval": flush_interval,
                         "item_table": item_table}
    if not isinstance(url, str):
        if not url or not all(u.startswith("mysql://") for u in url):
            raise ValueError("shards must be one or more mysql:// URLs")
        return ShardedStore([MySQLStore(parse_mysql_url(u), reactor, stop_timeout=stop_timeout, **options) for u in url])
    if url == "none":
        return NullStore(reactor, **options)
    if url.startswith("sqlite:///") and len(url) > len("sqlite:///"):
        path = url[len("sqlite:///"):]
        return SQLiteStore(path if os.path.isabs(path) else os.path.join(data_dir, path), reactor, lane, **options)
    if url.startswith("mysql://"):
        return MySQLStore(parse_mysql_url(url), reactor, stop_timeout=stop_timeout, **options)
    raise ValueError(f"expected sqlite:///PATH, mysql://USER:PASS@HOST:PORT/DB or none, got {redact(url)!r}")


def page_store(config: StoreSection, data_dir: str, reactor: IThreadedClock,
               lane: Lane | None = None) -> PageStore | ShardedStore | None:
    """The page store of the ``[store]`` section, or None with ``url = "none"``; ``lane``: the SQLite store's (the
    node's ``store`` lane)."""
    if config.url == "none":
        return None
    return open_store(config.url, data_dir, reactor, preset=config.compression_preset, batch_size=config.batch_size,
                      lane=lane, item_table=config.item_table)
