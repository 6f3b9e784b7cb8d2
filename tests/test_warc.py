"""WARC output: a crawl of a real twisted.web site on 127.0.0.1 writes WARC files warcio reads back (a request and
a response record per fetched answer, with the payload digest), rotated, torn files cut, shipped like feeds."""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.util
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.trial import unittest
from twisted.web import resource, server
from warcio.archiveiterator import ArchiveIterator

from spiderd.config import settings as cfg
from spiderd.core.blocking import Lane
from spiderd.demo.pages import SiteSpec, render
from spiderd.demo.site import listen
from spiderd.feed import warc
from spiderd.feed.errors import BadFeedError
from spiderd.feed.shipper import FeedShipper
from spiderd.feed.warcfiles import WarcWriter
from spiderd.fetch.body import accept_encoding
from spiderd.fetch.fetcher import FetchConfig, Fetcher

from .test_crawl import node_settings, run_crawl, run_with_worker
from .test_feed import FTPd


def records(path: Path) -> list[dict[str, Any]]:
    """Every record of a WARC file as warcio reads it: type, WARC headers, status line, HTTP headers, content."""
    out = []
    with open(path, "rb") as f:
        for record in ArchiveIterator(f, check_digests="raise"):
            http = record.http_headers
            out.append({"type": record.rec_type, "warc": dict(record.rec_headers.headers),
                        "status": http.statusline if http else None, "protocol": http.protocol if http else None, "http": dict(http.headers) if http else {},
                        "content": record.content_stream().read()})
    return out


def sha1_b32(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode()


def body_of(size: int) -> bytes:
    return random.Random(size).randbytes(size)


class Page(resource.Resource):
    """``/N`` answers ``N`` random bytes (seeded by N), gzip-encoded when asked (the WARC holds the decoded body)."""

    isLeaf = True

    def render_GET(self, request: Any) -> bytes:
        body = body_of(int(request.path.strip(b"/") or b"10"))
        request.setHeader(b"content-type", b"text/plain")
        if b"gzip" in (request.getHeader(b"accept-encoding") or b""):
            request.setHeader(b"content-encoding", b"gzip")
            return gzip.compress(body)
        return body


class CrawlWarcTests(unittest.TestCase):
    """A whole node crawls the demo site with ``[items] format = "warc"`` / ``"both"``."""

    timeout = 60

    def setUp(self) -> None:
        self.spec = SiteSpec(lists=4, details=60, slow_delay=0.05)
        self.port = listen(self.spec, reactor)
        self.addCleanup(self.port.stopListening)
        self.root = f"http://127.0.0.1:{self.port.getHost().port}/"
        self.data = Path(tempfile.mkdtemp(prefix="spiderd-warc-"))
        self.addCleanup(shutil.rmtree, self.data, True)

    @defer.inlineCallbacks
    def test_crawl_writes_warc(self) -> Any:
        """Every HTTP answer is a response record (target URI, status line, body, payload digest) and a request
        record pointing at it; files rotate at rotate_count answers; no JSON-lines file with format warc."""
        crawler, _ = yield run_crawl(node_settings(str(self.data), self.root,
                                                   items={"format": "warc", "rotate_count": 25}))
        files = sorted((self.data / "items").glob("*.warc.gz"))
        answers = crawler.stats.counts["archived"]
        self.assertEqual(answers, crawler.stats.counts["pages"])  # every fetch that got an HTTP answer
        self.assertEqual(len(files), -(-answers // 25))
        self.assertEqual(list((self.data / "items").glob("*.jl*")), [])
        self.assertEqual(list((self.data / "items").glob("*.part")), [])
        responses, requests = {}, {}
        for path in files:  # the answers fetched on the way (robots.txt, redirects) go with their page's
            got = records(path)
            self.assertEqual(warc.validate_warc(str(path)), len(got))
            self.assertGreaterEqual(len(got), 1 + 2 * min(25, answers))
            answers -= 25
            self.assertEqual(got[0]["type"], "warcinfo")
            self.assertEqual(got[0]["warc"]["WARC-Filename"], path.name)
            for record in got[1:]:
                (responses if record["type"] == "response" else requests)[record["warc"]["WARC-Record-ID"]] = record
        robots = [r for r in responses.values() if r["warc"]["WARC-Target-URI"] == self.root + "robots.txt"]
        self.assertEqual(len(robots), 1)  # fetched once, archived once (with the first page after it)
        hops = [r for r in responses.values() if r["status"].startswith("30") and r["http"].get("Location")]
        self.assertTrue(hops)  # each redirect of a chain, then where it led
        self.assertEqual(len(responses) - len(robots) - len(hops), crawler.stats.counts["pages"])
        self.assertEqual({r["warc"]["WARC-Concurrent-To"] for r in requests.values()}, set(responses))
        by_path: dict[str, list[dict[str, Any]]] = {}
        for record in responses.values():
            self.assertEqual(record["warc"]["WARC-Payload-Digest"], sha1_b32(record["content"]))
            self.assertEqual(record["http"]["Content-Length"], str(len(record["content"])))
            by_path.setdefault(record["warc"]["WARC-Target-URI"][len(self.root) - 1:], []).append(record)
        expected = self.spec.expected()
        for path in expected.details_ok:
            ok = [r for r in by_path[path] if r["status"] == "200 OK"]
            self.assertTrue(ok, path)
            self.assertEqual(ok[0]["content"], render(self.spec, path)[2])
        for path in expected.not_found:
            self.assertEqual(by_path[path][0]["status"], "404 Not Found")
        request = next(iter(requests.values()))
        self.assertEqual(request["protocol"], "GET")
        self.assertRegex(request["status"], r"^/\S* HTTP/1\.1$")
        self.assertEqual(request["http"]["Host"], self.root.split("/")[2])
        self.assertEqual(request["http"]["User-Agent"], crawler._fetcher._config.user_agent)

    @defer.inlineCallbacks
    def test_both_formats(self) -> Any:
        """format both: the JSON-lines items as ever, and the WARC files beside them."""
        crawler, _ = yield run_crawl(node_settings(str(self.data), self.root, items={"format": "both"}))
        items = sum(len(p.read_text().splitlines()) for p in (self.data / "items").glob("*.jl"))
        self.assertEqual(items, len(self.spec.expected().details_ok))
        files = list((self.data / "items").glob("*.warc.gz"))
        archived = sum(warc.validate_warc(str(p)) for p in files)
        on_the_way = sum(1 for p in files for r in records(p) if r["type"] == "response"
                         and (r["warc"]["WARC-Target-URI"].endswith("/robots.txt") or r["status"].startswith("30")))
        self.assertEqual(archived, len(files) + 2 * (crawler.stats.counts["pages"] + on_the_way))  # (warcinfo)


    @defer.inlineCallbacks
    def test_worker_ships_a_warc_file_per_batch(self) -> Any:
        """The all role's worker: each batch's answers as one WARC file, shipped beside where its feed goes
        (format warc: no JSON-lines feed); the frontier's own fetches (list pages) in its items directory."""
        feeds = self.data / "shipped"
        settings = node_settings(str(self.data), self.root, batch={"targets": ["local"], "size": 20},
                                 items={"format": "warc"},
                                 worker={"feed_template": f"file://{feeds}/%(batch)s_%(name)s_%(time)s.jl"})
        crawler, batcher, worker = yield run_with_worker(settings)
        self.assertEqual(list(feeds.glob("*.jl")), [])
        files = sorted(feeds.glob("*.warc.gz"))
        self.assertEqual(len(files), batcher.status()["sent"])
        fetched = {}
        for path in files:
            self.assertEqual(warc.validate_warc(str(path)), len(records(path)))
            for r in records(path):
                if r["type"] == "response" and r["status"] == "200 OK":
                    fetched[r["warc"]["WARC-Target-URI"][len(self.root) - 1:]] = r["content"]
        details = self.spec.expected().details_ok
        self.assertEqual(set(fetched) & set(details), set(details))
        for path in sorted(details)[:5]:
            self.assertEqual(fetched[path], render(self.spec, path)[2])
        own = [r["warc"]["WARC-Target-URI"] for p in (self.data / "items").glob("*.warc.gz") for r in records(p)
               if r["type"] == "response"]
        self.assertIn(self.root, own)  # the frontier fetched the list pages itself


class WriterTests(unittest.TestCase):
    """The writer alone, fed real fetches of a twisted.web site on 127.0.0.1."""

    timeout = 30

    def setUp(self) -> None:
        port = reactor.listenTCP(0, server.Site(Page()), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.base = f"http://127.0.0.1:{port.getHost().port}/"
        self.fetcher = Fetcher(reactor, FetchConfig())
        self.addCleanup(self.fetcher.close)
        self.dir = Path(tempfile.mkdtemp(prefix="spiderd-warc-"))
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.clock = Clock()  # the flush timer: never waited for, flush() is called
        self.rotated: list[str] = []

    def writer(self, **options: Any) -> WarcWriter:
        w = WarcWriter(self.clock, str(self.dir), Lane(reactor, "warc-test"), on_rotate=self.rotated.append,
                       **options)
        w.startService()
        self.addCleanup(lambda: w.stopService() if w.running else None)
        return w

    @defer.inlineCallbacks
    def write_pages(self, w: WarcWriter, sizes: list[int]) -> Any:
        results = yield defer.gatherResults([self.fetcher.fetch(f"{self.base}{n}") for n in sizes])
        written = [w.write(r) for r in results]
        yield w.flush()
        yield defer.gatherResults(written)
        return results

    @defer.inlineCallbacks
    def test_decoded_body_and_headers(self) -> Any:
        """A gzip answer is stored decoded: Content-Encoding kept as X-Crawler-Content-Encoding, the length set."""
        w = self.writer()
        yield w.ready
        yield self.write_pages(w, [300])
        self.assertEqual(os.listdir(self.dir), [os.path.basename(w._path) + ".part"])  # open until rotated
        yield w.stopService()
        [path] = self.rotated
        [_, response, request] = records(Path(path))
        self.assertEqual(response["content"], body_of(300))
        self.assertEqual(response["http"]["X-Crawler-Content-Encoding"], "gzip")
        self.assertEqual(response["http"]["Content-Length"], "300")
        self.assertEqual(response["warc"]["WARC-Target-URI"], f"{self.base}300")
        self.assertEqual(request["http"]["Accept-Encoding"], accept_encoding().decode())  # br where Brotli is

    @defer.inlineCallbacks
    def test_rotation_by_count_and_size(self) -> Any:
        """A file completes at rotate_count answers, or once it passes rotate_bytes."""
        w = self.writer(rotate_count=3)
        yield w.ready
        yield self.write_pages(w, [10] * 7)
        self.assertEqual([warc.validate_warc(p) for p in self.rotated], [7, 7])
        yield w.stopService()
        self.assertEqual(warc.validate_warc(self.rotated[2]), 3)
        shutil.rmtree(self.dir)
        self.rotated.clear()
        w = self.writer(rotate_bytes=20000)
        yield w.ready
        yield self.write_pages(w, [5000, 30000, 10])  # random bodies: gzip keeps their size
        self.assertEqual([warc.validate_warc(p) for p in self.rotated], [5])  # passed 20000 bytes at the second
        yield w.stopService()
        self.assertEqual(warc.validate_warc(self.rotated[1]), 3)

    @defer.inlineCallbacks
    def test_rotation_by_age_and_idle(self) -> Any:
        """A WARC file completes rotate_seconds after its first answer, or rotate_idle after its last, whatever
        its count; rotate() completes it at once (the crawl has finished)."""
        w = self.writer(rotate_seconds=300.0, rotate_idle=60.0)
        yield w.ready
        yield self.write_pages(w, [10])
        yield w.settled()
        self.clock.advance(59)
        yield self.write_pages(w, [20])
        yield w.settled()
        self.clock.advance(59)
        yield w.settled()
        self.assertEqual(self.rotated, [])
        self.clock.advance(1)  # idle for 60 s
        yield w.settled()
        self.assertEqual([warc.validate_warc(p) for p in self.rotated], [5])
        for _ in range(6):  # an answer every 50 s: never idle, complete by age
            yield self.write_pages(w, [10])
            yield w.settled()
            self.clock.advance(50)
            yield w.settled()
        self.assertEqual([warc.validate_warc(p) for p in self.rotated], [5, 13])
        yield self.write_pages(w, [10])
        yield w.rotate()
        self.assertEqual([warc.validate_warc(p) for p in self.rotated], [5, 13, 3])

    @defer.inlineCallbacks
    def test_torn_file_cut_at_next_start(self) -> Any:
        """A .part a killed run left (a torn last record) is cut after its last whole record and completed."""
        w = self.writer()
        yield w.ready
        yield self.write_pages(w, [10, 20])
        part = w._path + ".part"
        w._abandon()  # as if killed: the file stays .part
        torn = warc.answer_records((yield self.fetcher.fetch(f"{self.base}3000")))
        with open(part, "ab") as f:
            f.write(torn[: len(torn) // 2])  # into its response record
        yield w.stopService()
        self.rotated.clear()
        again = self.writer()
        yield again.ready
        [path] = self.rotated
        self.assertEqual(path, part[:-len(".part")])
        self.assertEqual(warc.validate_warc(path), 5)
        yield again.stopService()

    @defer.inlineCallbacks
    def test_unsettled_previous_file_is_a_start_failure(self) -> Any:
        """A .part of a previous run that cannot be read makes ``ready`` fail (a start failure, as the shipper's
        unreadable spool is), instead of the node archiving on beside it; the stop still works."""
        (self.dir / f"spiderd-x{warc.EXTENSION}.part").mkdir()  # listed like a torn file, unreadable as one
        w = self.writer()
        yield self.assertFailure(w.ready, IsADirectoryError)
        self.assertEqual(self.rotated, [])
        yield w.stopService()

    def test_check_refuses_what_is_not_whole(self) -> None:
        """The feed check: not gzip, bytes past the last record, no record."""
        good = self.dir / "good.warc.gz"
        good.write_bytes(warc.warcinfo_record("good.warc.gz"))
        self.assertEqual(warc.validate_warc(str(good)), 1)
        for data, why in ((b'{"a":1}\n', "not a gzip"), (good.read_bytes() + b"\x1f\x8b\x08", "only 1 whole"),
                          (gzip.compress(b""), "no WARC record")):
            bad = self.dir / "bad.warc.gz"
            bad.write_bytes(data)
            with self.assertRaisesRegex(BadFeedError, why):
                warc.validate_warc(str(bad))


class ShipTests(unittest.TestCase):
    """WARC files through the FeedShipper: checked as WARC, temp name then rename, spooled while FTP is down."""

    timeout = 30

    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="spiderd-warc-ship-"))
        self.addCleanup(shutil.rmtree, self.root, True)
        self.clock = Clock()
        self.shipper = FeedShipper(reactor, str(self.root / "spool"), clock=self.clock, ftp_timeout=10.0)
        self.shipper.startService()
        self.addCleanup(lambda: self.shipper.stopService() if self.shipper.running else None)

    def warc_file(self, name: str = "crawl-1.warc.gz") -> Path:
        path = self.root / "spool" / "incoming" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(warc.warcinfo_record(name))
        return path

    @defer.inlineCallbacks
    def test_file_target(self) -> Any:
        yield self.shipper.ready
        local = self.warc_file()
        data = local.read_bytes()
        yield self.shipper.ship(str(local), f"file://{self.root}/out/crawl-1.warc.gz")
        yield self.shipper.settled()
        self.assertEqual(os.listdir(self.root / "out"), ["crawl-1.warc.gz"])
        self.assertEqual((self.root / "out" / "crawl-1.warc.gz").read_bytes(), data)

    @defer.inlineCallbacks
    def test_bad_warc_quarantined(self) -> Any:
        """JSON lines shipped under a .warc.gz name are refused by the WARC check (and JSON lines pass as ever)."""
        yield self.shipper.ready
        local = self.root / "spool" / "incoming" / "x.warc.gz"
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(b'{"a":1}\n')
        with self.assertRaisesRegex(BadFeedError, "not a gzip"):
            yield self.shipper.ship(str(local), f"file://{self.root}/out/x.warc.gz")
        self.assertEqual(self.shipper.quarantined, 1)
        self.assertFalse((self.root / "out").exists())

    @defer.inlineCallbacks
    def test_ftp_down_then_up(self) -> Any:
        """FTP down: the WARC file waits in the spool, retried on the clock; once up, it lands by temp name."""
        yield self.shipper.ready
        ftpd = FTPd(self.root / "ftp")
        port = ftpd.port
        ftpd.stop()
        local = self.warc_file()
        data = local.read_bytes()
        uri = f"ftp://anonymous@127.0.0.1:{port}/warc/crawl-1.warc.gz"
        yield self.shipper.ship(str(local), uri)
        yield self.shipper.settled()
        self.assertEqual((self.shipper.waiting, self.shipper.shipped), (1, 0))
        self.assertGreaterEqual(self.shipper.failures, 1)
        ftpd = FTPd(self.root / "ftp", port)
        self.addCleanup(ftpd.stop)
        self.clock.advance(self.shipper._retry.after(0) * 2)
        yield self.shipper.settled()
        self.assertEqual(self.shipper.shipped, 1)
        self.assertEqual((ftpd.anon / "warc" / "crawl-1.warc.gz").read_bytes(), data)
        [stored] = ftpd.stored()
        self.assertRegex(stored, r"^\.crawl-1\.warc\.gz\.[0-9a-f]{8}\.part$")


class ConfigTests(unittest.TestCase):
    def test_format_setting(self) -> None:
        self.assertEqual(cfg.from_dict({}).items.format, "jsonl")
        self.assertEqual(cfg.from_dict({"items": {"format": "both", "warc_rotate_mb": 5}}).items.warc_rotate_mb, 5)
        with self.assertRaisesRegex(cfg.ConfigError, "items.format: must be one of jsonl, warc, both"):
            cfg.from_dict({"items": {"format": "warcs"}})

    def test_warcio_missing(self) -> None:
        """Asking for WARC output without warcio installed is a clear configuration error."""
        real = importlib.util.find_spec
        self.patch(importlib.util, "find_spec", lambda name, *a: None if name == "warcio" else real(name, *a))
        with self.assertRaisesRegex(cfg.ConfigError, r"items.format = 'warc': .*pip install 'spiderd\[warc\]'"):
            cfg.from_dict({"items": {"format": "warc"}})
        self.assertEqual(cfg.from_dict({}).items.format, "jsonl")  # the default needs no warcio
