"""Partitions of the feed (``dt=%(date)s/hour=%(hour)s/``) and their completion marker: ``_MANIFEST.json`` then
``_SUCCESS`` once the hour has passed and every file of it is shipped, never before the last file (holds of running
jobs, files still spooled, a restart), and written again after a late file."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.trial import unittest

from spiderd.core.feeduri import partition_window, render_uri, time_params
from spiderd.feed.shipper import PARTITION_CHECK, FeedShipper
from tests.ftpservers import FTPd
from tests.test_feed import GOOD, LogEvents, write

HOUR = 3600.0
T0 = 1_796_464_800.0  # 2026-12-05T10:00:00Z
TEMPLATE = "/feeds/dt=%(date)s/hour=%(hour)s/%(batch)s_%(site)s.jl"


class TemplateTests(unittest.SynchronousTestCase):
    """The partition parameters and windows of a template."""

    def test_time_params(self) -> None:
        """date and hour are UTC, beside Scrapy's time."""
        self.assertEqual(time_params(T0 + 59), {"time": "2026-12-05T10-00-59+00-00", "date": "2026-12-05",
                                                "hour": "10"})

    def test_windows(self) -> None:
        """The hour when the directory names %(hour)s, the day for %(date)s alone, none otherwise (a name is not a
        partition)."""
        self.assertEqual(partition_window("file://" + TEMPLATE, T0 + 1234), (T0, T0 + HOUR))
        self.assertEqual(partition_window("file:///f/dt=%(date)s/%(batch)s.jl", T0 + 1234),
                         (T0 - 10 * HOUR, T0 + 14 * HOUR))
        self.assertIsNone(partition_window("file:///f/%(date)s_%(hour)s_%(batch)s.jl", T0))

    def test_rendered(self) -> None:
        """The directories the consumer sees."""
        uri = render_uri("file://" + TEMPLATE, {"batch": "7", "site": "shop", **time_params(T0)})
        self.assertEqual(uri, "file:///feeds/dt=2026-12-05/hour=10/7_shop.jl")


class PartitionTests(unittest.TestCase):
    """A shipper over a real FTP server (and a directory), the clock injected."""

    timeout = 60

    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="spiderd-partitions-"))
        self.addCleanup(shutil.rmtree, self.root, True)
        self.spool = str(self.root / "spool")
        self.clock = Clock()
        self.clock.advance(T0 + 100)
        self.logs = LogEvents(self)
        self.ftpd = FTPd(self.root / "ftp")
        self.addCleanup(self.ftpd.stop)
        self.hour = self.ftpd.home / "feeds/dt=2026-12-05/hour=10"

    def shipper(self, arm: bool = True, **options: Any) -> FeedShipper:
        options.setdefault("ftp_timeout", 10.0)
        options.setdefault("partition_grace", 60.0)
        shipper = FeedShipper(reactor, self.spool, clock=self.clock, **options)
        shipper.startService()
        if arm:
            shipper.arm_partitions()
        self.addCleanup(lambda: shipper.stopService() if shipper.running else None)
        return shipper

    def uri(self, batch: str, at: float = T0) -> str:
        template = self.ftpd.uri("/").replace("%", "%%") + TEMPLATE[1:]
        return render_uri(template, {"batch": batch, "site": "shop", **time_params(at)})

    def ship(self, shipper: FeedShipper, batch: str, data: bytes = GOOD, **kwargs: Any) -> Any:
        path = write(self.root / "spool" / "incoming" / f"{batch}.jl", data)
        return shipper.ship(path, self.uri(batch), (T0, T0 + HOUR), **kwargs)

    @defer.inlineCallbacks
    def tick(self, shipper: FeedShipper, seconds: float = PARTITION_CHECK) -> Any:
        self.clock.advance(seconds)
        yield shipper.settled()

    def manifest(self) -> dict[str, Any]:
        return json.loads((self.hour / "_MANIFEST.json").read_text())  # type: ignore[no-any-return]

    @defer.inlineCallbacks
    def test_marker_after_the_last_file(self) -> Any:
        """The hour's files ship; no marker inside the hour or its grace; then the manifest (each file's records,
        bytes and SHA-256), then _SUCCESS, each under a temp name and renamed."""
        shipper = self.shipper()
        yield self.ship(shipper, "1")
        yield self.ship(shipper, "2", b'{"a":1}\n')
        yield shipper.settled()
        self.assertEqual(sorted(os.listdir(self.hour)), ["1_shop.jl", "2_shop.jl"])
        self.clock.advance(HOUR - 100 + 59 - PARTITION_CHECK)  # one check before the end of the grace
        yield self.tick(shipper)
        self.assertFalse((self.hour / "_SUCCESS").exists())
        yield self.tick(shipper)
        self.assertEqual((self.hour / "_SUCCESS").read_bytes(), b"")
        manifest = self.manifest()
        self.assertEqual(manifest["files"], [
            {"name": "1_shop.jl", "records": 2, "bytes": len(GOOD), "sha256": hashlib.sha256(GOOD).hexdigest()},
            {"name": "2_shop.jl", "records": 1, "bytes": 8, "sha256": hashlib.sha256(b'{"a":1}\n').hexdigest()}])
        self.assertEqual((manifest["records"], manifest["version"]), (3, 1))
        self.assertEqual(manifest["window"], {"start": "2026-12-05T10:00:00Z", "end": "2026-12-05T11:00:00Z"})
        self.assertEqual(manifest["partition"], "/feeds/dt=2026-12-05/hour=10/")
        marker = [(c, a) for c, a in self.ftpd.seen if "_MANIFEST" in a or "_SUCCESS" in a]
        self.assertEqual(marker, [("DELE", "_SUCCESS"), ("STOR", "._MANIFEST.json.part"), ("DELE", "_MANIFEST.json"),
                                  ("RNFR", "._MANIFEST.json.part"), ("RNTO", "_MANIFEST.json"),
                                  ("STOR", "._SUCCESS.part"), ("DELE", "_SUCCESS"), ("RNFR", "._SUCCESS.part"),
                                  ("RNTO", "_SUCCESS")])
        yield self.tick(shipper)
        self.assertEqual(len([a for c, a in self.ftpd.seen if c == "RNTO" and a == "_SUCCESS"]), 1)  # once

    @defer.inlineCallbacks
    def test_a_running_job_holds_the_partition(self) -> Any:
        """A job that will still ship into the hour keeps it open past its end; its file ends the hold."""
        shipper = self.shipper()
        yield self.ship(shipper, "1")
        shipper.hold("job-2", self.uri("2"))
        yield self.tick(shipper, 2 * HOUR)
        self.assertFalse((self.hour / "_SUCCESS").exists())
        yield self.ship(shipper, "2", release="job-2")
        yield shipper.settled()
        self.assertTrue((self.hour / "_SUCCESS").exists())
        self.assertEqual([f["name"] for f in self.manifest()["files"]], ["1_shop.jl", "2_shop.jl"])

    @defer.inlineCallbacks
    def test_a_file_still_spooled_holds_the_partition(self) -> Any:
        """A file of the hour that cannot be uploaded yet keeps the hour open; once it lands, the marker."""
        shipper = self.shipper(retry_first=HOUR, retry_max=HOUR)
        yield self.ship(shipper, "1")
        yield shipper.settled()
        self.ftpd.behaviour["drop"] = True
        yield self.ship(shipper, "2", b"".join(b'{"n":%d,"pad":"%s"}\n' % (i, b"x" * 80) for i in range(5000)))
        yield shipper.settled()
        self.assertEqual(shipper.waiting, 1)
        self.ftpd.behaviour["drop"] = False
        yield self.tick(shipper, HOUR - 1)
        self.assertFalse((self.hour / "_SUCCESS").exists())
        yield self.tick(shipper, 1)
        self.assertEqual(shipper.waiting, 0)
        self.assertEqual([f["records"] for f in self.manifest()["files"]], [2, 5000])

    @defer.inlineCallbacks
    def test_restart_mid_partition(self) -> Any:
        """A node killed mid-hour: after the restart no marker before the worker's jobs hold their partitions
        (arm), none while a job of the hour runs again, and the marker lists the files of both runs."""
        first = self.shipper()
        yield self.ship(first, "1")
        first.hold("job-2", self.uri("2"))
        yield first.settled()
        yield first.stopService()  # (holds live in memory only: a stop keeps no more of them than a kill -9)
        second = self.shipper(arm=False)
        yield second.ready
        yield self.tick(second, 2 * HOUR)
        self.assertFalse((self.hour / "_SUCCESS").exists())  # not armed: the jobs are not loaded yet
        second.hold("job-2", self.uri("2"))
        second.arm_partitions()
        yield self.tick(second)
        self.assertFalse((self.hour / "_SUCCESS").exists())
        yield self.ship(second, "2", release="job-2")
        yield second.settled()
        self.assertEqual([f["name"] for f in self.manifest()["files"]], ["1_shop.jl", "2_shop.jl"])

    @defer.inlineCallbacks
    def test_late_file_rewrites_the_marker(self) -> Any:
        """A file after the marker: _SUCCESS goes first, the manifest is rewritten with it, _SUCCESS again."""
        shipper = self.shipper()
        yield self.ship(shipper, "1")
        yield self.tick(shipper, HOUR)
        self.assertEqual(len(self.manifest()["files"]), 1)
        del self.ftpd.seen[:]
        yield self.ship(shipper, "late")
        yield shipper.settled()
        self.assertEqual([f["name"] for f in self.manifest()["files"]], ["1_shop.jl", "late_shop.jl"])
        self.assertTrue((self.hour / "_SUCCESS").exists())
        names = [a for c, a in self.ftpd.seen if c in ("DELE", "RNTO")]
        self.assertEqual(names, ["late_shop.jl", "_SUCCESS", "_MANIFEST.json", "_MANIFEST.json", "_SUCCESS",
                                 "_SUCCESS"])

    @defer.inlineCallbacks
    def test_local_directory(self) -> Any:
        """file:// partitions get the same marker (written atomically)."""
        shipper = self.shipper()
        path = write(self.root / "spool" / "incoming" / "1.jl", GOOD)
        out = self.root / "out"
        yield shipper.ship(path, f"file://{out}/dt=2026-12-05/hour=10/1.jl", (T0, T0 + HOUR))
        yield self.tick(shipper, HOUR)
        self.assertEqual(sorted(os.listdir(out / "dt=2026-12-05/hour=10")), ["1.jl", "_MANIFEST.json", "_SUCCESS"])

    @defer.inlineCallbacks
    def test_no_window_no_marker(self) -> Any:
        """Files shipped without a partition window (no %(hour)s or %(date)s directory) never get a marker."""
        shipper = self.shipper()
        path = write(self.root / "spool" / "incoming" / "1.jl", GOOD)
        yield shipper.ship(path, self.uri("1"))
        yield self.tick(shipper, 2 * HOUR)
        self.assertEqual(os.listdir(self.hour), ["1_shop.jl"])
