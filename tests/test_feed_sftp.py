"""sftp:// feeds against a real SFTP server (Twisted Conch's, on 127.0.0.1): uploads under a temp name then
renamed, the host key checked against known_hosts (unknown, changed, missing), a connection dropped mid-file, and
exactly once across restarts while the server is down."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.logger import LogLevel
from twisted.trial import unittest

from spiderd.feed.errors import FeedTrustError
from spiderd.feed.shipper import FeedShipper
from spiderd.feed.transport import TransportOptions
from tests.sftpserver import PASSWORD, SFTPd, new_host_key
from tests.test_feed import GOOD, LogEvents, big_feed, write


class SFTPTests(unittest.TestCase):
    """Conch's SFTP server, and shippers trusting its host key (or not)."""

    timeout = 60

    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="spiderd-sftp-"))
        self.addCleanup(shutil.rmtree, self.root, True)
        self.spool = str(self.root / "spool")
        self.clock = Clock()
        self.logs = LogEvents(self)
        self.sftpd = self.start_sftpd()
        self.known = self.sftpd.known_hosts(self.root / "known_hosts")

    def start_sftpd(self, port: int = 0, **kwargs: Any) -> SFTPd:
        sftpd = SFTPd(self.root / "sftp", **kwargs).listen(reactor, port)
        self.addCleanup(sftpd.stop)
        return sftpd

    def shipper(self, known: str | None = None, **options: Any) -> FeedShipper:
        transport = TransportOptions(known_hosts=self.known if known is None else known, timeout=10.0)
        options.setdefault("transport", transport)
        shipper = FeedShipper(reactor, self.spool, clock=self.clock, **options)
        shipper.startService()
        self.addCleanup(lambda: shipper.stopService() if shipper.running else None)
        return shipper

    def feed(self, name: str = "1_site_t.jl", data: bytes = GOOD) -> str:
        return write(self.root / "spool" / "incoming" / name, data)

    def queued(self) -> list[str]:
        return sorted(os.listdir(os.path.join(self.spool, "queue")))

    def assertNoSecret(self) -> None:
        self.assertNotIn(PASSWORD, self.logs.everything())

    @defer.inlineCallbacks
    def test_upload_temp_then_rename(self) -> Any:
        """The file is written under a hidden temp name in new directories, then renamed; nothing else is left."""
        shipper = self.shipper()
        yield shipper.ship(self.feed(data=big_feed()), self.sftpd.uri("/feeds/2026/1_site_t.jl"))
        yield shipper.settled()
        self.assertEqual(shipper.shipped, 1, shipper.last_error)
        self.assertEqual((self.sftpd.root / "feeds/2026/1_site_t.jl").read_bytes(), big_feed())
        self.assertEqual(os.listdir(self.sftpd.root / "feeds/2026"), ["1_site_t.jl"])
        [(temp, final)] = self.sftpd.renamed
        self.assertRegex(temp, r"^\.1_site_t\.jl\.[0-9a-f]{8}\.part$")
        self.assertEqual(final, "1_site_t.jl")
        self.assertNoSecret()

    @defer.inlineCallbacks
    def test_existing_final_name_is_never_overwritten(self) -> Any:
        """A final name already there: the file is refused (quarantined), the old one kept."""
        write(self.sftpd.root / "1.jl", b'{"old":1}\n')
        shipper = self.shipper()
        yield shipper.ship(self.feed(), self.sftpd.uri("/1.jl"))
        yield shipper.settled()
        self.assertEqual((self.sftpd.root / "1.jl").read_bytes(), b'{"old":1}\n')
        self.assertEqual((shipper.quarantined, shipper.shipped), (1, 0))

    @defer.inlineCallbacks
    def test_changed_host_key_is_refused(self) -> Any:
        """A server whose key is not the one known_hosts names: no login, the file stays spooled, the error says
        the key changed, at error level."""
        known = self.sftpd.known_hosts(self.root / "other_known_hosts", key=new_host_key())
        shipper = self.shipper(known=known)
        yield shipper.ship(self.feed(), self.sftpd.uri("/1.jl"))
        yield shipper.settled()
        self.assertEqual((shipper.shipped, shipper.waiting), (0, 1))
        self.assertIn("host key CHANGED", shipper.last_error or "")
        self.assertTrue(any("CHANGED" in t for t in self.logs.texts(LogLevel.error)))
        self.assertEqual(self.sftpd.stored, [])
        self.assertNoSecret()

    @defer.inlineCallbacks
    def test_host_missing_from_known_hosts(self) -> Any:
        """known_hosts without the host (or none at all): refused before connecting, at start and at run time."""
        empty = self.root / "empty_known_hosts"
        empty.write_text("")
        shipper = self.shipper(known=str(empty), probe=(self.sftpd.uri("/").replace("%", "%%") + "%(date)s/x.jl",))
        failure = yield self.assertFailure(shipper.ready, FeedTrustError)
        self.assertIn("no host key for [127.0.0.1]:", str(failure))
        self.assertEqual(len(str(failure).splitlines()), 1)
        yield shipper.stopService()
        second = self.shipper(known="")
        yield second.ship(self.feed(), self.sftpd.uri("/1.jl"))
        yield second.settled()
        self.assertIn("needs [feed] known_hosts", second.last_error or "")
        self.assertEqual(self.sftpd.stored, [])

    @defer.inlineCallbacks
    def test_start_check_passes(self) -> Any:
        """A configured sftp:// host whose key known_hosts names lets the start go on."""
        shipper = self.shipper(probe=(self.sftpd.uri("/").replace("%", "%%") + "%(date)s/x.jl",))
        yield shipper.ready
        self.assertTrue(any("SSH host key checks" in t for t in self.logs.texts(LogLevel.info)))

    @defer.inlineCallbacks
    def test_connection_dropped_mid_file(self) -> Any:
        """A connection cut halfway never shows the final name; the retry ships the file whole."""
        self.sftpd.behaviour["drop"] = True
        data = big_feed()
        shipper = self.shipper(retry_first=5.0)
        yield shipper.ship(self.feed(data=data), self.sftpd.uri("/feeds/1.jl"))
        yield shipper.settled()
        self.assertFalse((self.sftpd.root / "feeds" / "1.jl").exists())
        self.assertEqual((shipper.waiting, shipper.failures), (1, 1))
        self.sftpd.behaviour["drop"] = False
        self.clock.advance(5.0)
        yield shipper.settled()
        self.assertEqual(shipper.shipped, 1, shipper.last_error)
        self.assertEqual((self.sftpd.root / "feeds" / "1.jl").read_bytes(), data)
        self.assertEqual(os.listdir(self.sftpd.root / "feeds"), ["1.jl"])

    @defer.inlineCallbacks
    def test_down_across_restarts_ships_once_whole(self) -> Any:
        """The server is down while a shipper comes and goes; the next ships the file once, whole."""
        port = self.sftpd.port
        yield self.sftpd.stop()
        first = self.shipper()
        yield first.ship(self.feed("1.jl", big_feed()), self.sftpd.uri("/1.jl"))
        yield first.settled()
        self.assertEqual((first.waiting, first.failures), (1, 1))
        yield first.stopService()
        sftpd = self.start_sftpd(port, host_key=self.sftpd.host_key)
        second = self.shipper()
        yield second.settled()
        self.assertEqual((sftpd.root / "1.jl").read_bytes(), big_feed())
        self.assertEqual(len(sftpd.renamed), 1)
        self.assertEqual((second.shipped, second.waiting, self.queued()), (1, 0, []))
