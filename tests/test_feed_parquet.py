"""``[items] format = "parquet"``: a job's feed as one typed Parquet file (the declared columns, ``_extra``, the
schema version), checked before it ships, shipped exactly once like the JSON lines."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer, reactor
from twisted.trial import unittest

from spiderd.core.rules import Field, Site
from spiderd.feed.errors import BadFeedError
from spiderd.feed.schema import columns
from spiderd.feed.shipper import FeedShipper
from tests.test_feed import write
from tests.test_worker import WorkerTestBase, items

pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is not installed: pip install 'spiderd[parquet]'")

from spiderd.feed import parquet  # noqa: E402  (needs pyarrow)

SITE = Site("shop", ("shop.example",), fields=(Field("title", "//h1"), Field("tags", "//li", all=True)))
ITEMS = [
    {"title": "A", "tags": ["x", "y"], "url": "http://shop.example/1", "urlhash": -5, "status": 200,
     "fetched_at": 1.5, "digest": "sha1:AAAA"},
    {"title": None, "tags": [], "url": "http://shop.example/2", "urlhash": 2**63 - 1, "status": 404,
     "fetched_at": 2.0, "digest": None, "note": "not declared"},
    {"title": 7, "tags": None, "url": "http://shop.example/3", "urlhash": 3, "status": 200, "fetched_at": 3,
     "digest": "sha1:CCCC"},
]


def jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    return write(path, b"".join(json.dumps(r).encode() + b"\n" for r in rows))


class ConvertTests(unittest.SynchronousTestCase):
    """JSON lines to Parquet with the site's columns."""

    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="spiderd-parquet-"))
        self.addCleanup(shutil.rmtree, self.root, True)

    def test_typed_columns_and_extra(self) -> None:
        """Declared columns are typed (BIGINT int64, INT int32, ARRAY<STRING> list<string>...); what is not declared,
        or does not fit its type, is in _extra as JSON; the schema version is in the file's metadata."""
        target = str(self.root / "out.parquet")
        rows = parquet.convert(jsonl(self.root / "in.jl", ITEMS), target, columns([SITE]))
        self.assertEqual(rows, 3)
        table = pq.read_table(target)
        self.assertEqual([(f.name, str(f.type)) for f in table.schema],
                         [("title", "string"), ("tags", "list<element: string>"), ("url", "string"),
                          ("urlhash", "int64"), ("status", "int32"), ("fetched_at", "double"), ("digest", "string"),
                          ("_extra", "string")])
        got = table.to_pylist()
        self.assertEqual(got[0]["tags"], ["x", "y"])
        self.assertEqual((got[1]["urlhash"], json.loads(got[1]["_extra"])), (2**63 - 1, {"note": "not declared"}))
        self.assertEqual((got[2]["title"], json.loads(got[2]["_extra"]), got[2]["fetched_at"]),
                         (None, {"title": 7}, 3.0))
        self.assertIsNone(got[0]["_extra"])
        metadata = pq.read_metadata(target)
        self.assertEqual(metadata.metadata[b"spiderd.schema_version"], b"1")
        self.assertEqual(metadata.row_group(0).column(0).compression, "ZSTD")
        self.assertEqual(parquet.validate_parquet(target), 3)
        self.assertFalse(os.path.exists(target + ".tmp"))

    def test_empty_batch(self) -> None:
        """A batch without items is a valid Parquet file of 0 rows (the batch is done)."""
        target = str(self.root / "empty.parquet")
        self.assertEqual(parquet.convert(jsonl(self.root / "e.jl", []), target, columns([SITE])), 0)
        self.assertEqual(parquet.validate_parquet(target), 0)

    def test_torn_file_refused(self) -> None:
        """A cut Parquet file is refused by the check."""
        target = self.root / "t.parquet"
        parquet.convert(jsonl(self.root / "t.jl", ITEMS), str(target), columns([SITE]))
        target.write_bytes(target.read_bytes()[:-20])
        with self.assertRaises(BadFeedError):
            parquet.validate_parquet(str(target))

    def test_names(self) -> None:
        self.assertEqual(parquet.parquet_uri("ftp://h/f/1_shop.jl"), "ftp://h/f/1_shop.parquet")


class ShipTests(unittest.TestCase):
    """The shipper checks a .parquet target as Parquet."""

    timeout = 30

    @defer.inlineCallbacks
    def test_checked_then_shipped_or_refused(self) -> Any:
        root = Path(tempfile.mkdtemp(prefix="spiderd-parquet-ship-"))
        self.addCleanup(shutil.rmtree, root, True)
        shipper = FeedShipper(reactor, str(root / "spool"))
        shipper.startService()
        self.addCleanup(shipper.stopService)
        good = str(root / "spool/incoming/a.parquet")
        os.makedirs(os.path.dirname(good), exist_ok=True)
        parquet.convert(jsonl(root / "a.jl", ITEMS), good, columns([SITE]))
        yield shipper.ship(good, f"file://{root}/out/1_shop.parquet")
        yield shipper.settled()
        self.assertEqual(pq.read_table(str(root / "out/1_shop.parquet")).num_rows, 3)
        bad = write(root / "spool/incoming/b.parquet", b'{"not":"parquet"}\n')
        yield self.assertFailure(shipper.ship(bad, f"file://{root}/out/2_shop.parquet"), BadFeedError)


class WorkerParquetTests(WorkerTestBase):
    """A worker with format "parquet" ships each job's feed as Parquet."""

    @defer.inlineCallbacks
    def test_job_feed_as_parquet(self) -> Any:
        """The job's items, one row each, under its FEED_URI with .parquet; no .jl is shipped or left."""
        self.gate.open()
        service = self.worker(feed_format="parquet")
        job_id = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                     ("batch", "9"), ("setting", self.urls(*items(4))))
        job = yield service.runner.when_done(job_id)
        yield self.shipper.settled()
        self.assertEqual(job.state, "finished")
        [name] = os.listdir(self.feeds)
        self.assertTrue(name.startswith("9_demo-shop_") and name.endswith(".parquet"), name)
        table = pq.read_table(os.path.join(self.feeds, name))
        self.assertEqual(sorted(table.column("url").to_pylist()), sorted(self.ok_finals(items(4))))
        self.assertEqual(str(table.schema.field("urlhash").type), "int64")
        self.assertEqual(os.listdir(self.shipper.incoming_dir), [])
