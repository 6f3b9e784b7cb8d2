"""Where the page store's CPU goes, per page: lzma, the copy to and from a parse process, the SQLite write.

    python bench/store.py                  # 400 detail pages of the bench site (20-60 KB)
    python bench/store.py --pages 2000 --preset 1    # an XZ preset instead of the default "fast"

Each step is timed alone on the same pages, in this process (CPU time, ``time.process_time``):

- ``lzma``: :func:`spiderd.core.compression.compress` at the store's preset, what ``html_lzma`` costs, with the
  heap kept as a parser process keeps it (:func:`spiderd.core.memory.keep_heap`; ``--no-keep-heap`` shows
  the cost without);
- ``wire``: a parse request carrying the page and its answer carrying the compressed page, framed and
  unframed as :mod:`spiderd.fetch.parseworker` does (both ends, the parent's share and the child's);
- ``sqlite``: the store's upsert of the compressed rows in batches of ``batch_size`` (100), WAL mode, each
  batch one transaction (the writer thread's work).

Compare the sum with the crawl's own figure: ``bench/crawl.py --only fast,fast_store`` gives CPU s per
1000 pages with and without the store; the difference is what the store costs a crawl.  Needs, beyond
``pip install .``: nothing.  Ends with one ``RESULT`` line.
"""

from __future__ import annotations

import argparse
import marshal
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spiderd.core.compression import FAST, compress
from spiderd.core.memory import keep_heap
from spiderd.demo.pages import SiteSpec
from spiderd.demo.static import write_static
from spiderd.fetch.parseworker import FrameDecoder, frame
from spiderd.store.sqlite import SCHEMA


def per_page(step: Callable[[], object], pages: int) -> float:
    """CPU milliseconds per page of ``step()`` (which does every page once)."""
    started = time.process_time()
    step()
    return (time.process_time() - started) * 1000 / pages


def wire(pages: list[bytes], blobs: list[bytes]) -> None:
    """Each page to a parse process and its compressed copy back, as frames (both directions, both ends)."""
    decoder = FrameDecoder()
    for i, (page, blob) in enumerate(zip(pages, blobs)):
        request = frame((i, f"http://shop.example/item/{i}.html", page, "text/html", "detail", 0.0, 200, 1))
        answer = frame((i, [], [], {"title": "t"}, 0, None, None, None, blob))
        for data in (request, answer):
            for payload in decoder.feed(data):
                marshal.loads(payload)


def sqlite_writes(blobs: list[bytes], directory: str, batch_size: int) -> None:
    """The store's upsert of every row, ``batch_size`` rows a transaction."""
    db = sqlite3.connect(str(Path(directory) / "pages.sqlite3"))
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(SCHEMA)
    rows = [(i, f"http://shop.example/item/{i}.html", blob) for i, blob in enumerate(blobs)]
    upsert = ("INSERT INTO crawler_html (urlhash, url, html_lzma) VALUES (?, ?, ?) ON CONFLICT (urlhash) "
              "DO UPDATE SET url = excluded.url, html_lzma = excluded.html_lzma")
    for start in range(0, len(rows), batch_size):
        with db:
            db.executemany(upsert, rows[start:start + batch_size])
    db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=400)
    parser.add_argument("--preset", default="fast", help='"fast" (the store\'s default) or an XZ preset 0-9')
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--no-keep-heap", action="store_true")
    args = parser.parse_args()
    preset = FAST if args.preset == "fast" else int(args.preset)
    if not args.no_keep_heap:
        keep_heap()
    with tempfile.TemporaryDirectory(prefix="spiderd-bench-store-") as work:
        spec = SiteSpec(lists=max(1, args.pages // 50), details=args.pages, detail_size=(20000, 60000), faults=False, seed=7)
        write_static(spec, work)
        pages = [p.read_bytes() for p in sorted(Path(work, "item").glob("*.html"))]
        blobs: list[bytes] = []
        lzma_ms = per_page(lambda: blobs.extend(compress(p, preset) for p in pages), len(pages))
        wire_ms = per_page(lambda: wire(pages, blobs), len(pages))
        sqlite_ms = per_page(lambda: sqlite_writes(blobs, work, args.batch_size), len(pages))
    size = sum(map(len, pages)) / len(pages)
    ratio = sum(map(len, blobs)) / sum(map(len, pages))
    total = lzma_ms + wire_ms + sqlite_ms
    print(f"{len(pages)} pages of {size / 1000:.1f} KB on average, lzma preset {args.preset} "
          f"(compressed to {ratio:.1%})")
    for name, ms in (("lzma", lzma_ms), ("wire", wire_ms), ("sqlite", sqlite_ms)):
        print(f"  {name:<8} {ms:7.3f} ms CPU per page  {ms / total:6.1%}")
    print(f"RESULT lzma_ms_per_page={lzma_ms:.3f} wire_ms_per_page={wire_ms:.3f} sqlite_ms_per_page={sqlite_ms:.3f} "
          f"store_ms_per_page={total:.3f} lzma_share={lzma_ms / total:.2f} ratio={ratio:.3f}")


if __name__ == "__main__":
    main()
