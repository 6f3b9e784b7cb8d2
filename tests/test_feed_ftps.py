"""ftps:// feeds against pyftpdlib's TLS handler on 127.0.0.1 (TLS required on the control and data connections),
with a certificate of the test's own CA: verified uploads, a certificate that does not check (at start and at run
time), ``insecure``, a data connection dropped mid-file, and exactly once across restarts."""

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
from tests.certs import make_ca, make_server
from tests.ftpservers import PASSWORD, FTPd
from tests.test_feed import GOOD, LogEvents, big_feed, write


class FTPSTests(unittest.TestCase):
    """A real FTPS server whose certificate our CA signed, and shippers trusting that CA (or another)."""

    timeout = 60

    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="spiderd-ftps-"))
        self.addCleanup(shutil.rmtree, self.root, True)
        self.ca = make_ca(self.root, "test-ca")
        self.other_ca = make_ca(self.root, "other-ca")
        self.certfile = str(make_server(self.root, self.ca))
        self.spool = str(self.root / "spool")
        self.clock = Clock()
        self.logs = LogEvents(self)
        self.ftpd = self.start_ftpd()

    def start_ftpd(self, port: int = 0) -> FTPd:
        ftpd = FTPd(self.root / "ftp", port, certfile=self.certfile)
        self.addCleanup(ftpd.stop)
        return ftpd

    def shipper(self, ca: Path | str | None = None, insecure: bool = False, **options: Any) -> FeedShipper:
        ca_file = str(self.ca[0] if ca is None else ca)
        options.setdefault("transport", TransportOptions(ca_file=ca_file, insecure=insecure, timeout=10.0))
        shipper = FeedShipper(reactor, self.spool, clock=self.clock, **options)
        shipper.startService()
        self.addCleanup(lambda: shipper.stopService() if shipper.running else None)
        return shipper

    def feed(self, name: str = "1_site_t.jl", data: bytes = GOOD) -> str:
        return write(self.root / "spool" / "incoming" / name, data)

    def queued(self) -> list[str]:
        return sorted(os.listdir(os.path.join(self.spool, "queue")))

    @defer.inlineCallbacks
    def test_upload_over_tls(self) -> Any:
        """The server refuses a login before AUTH TLS and data without PROT P: the file lands under a temp name and
        is renamed, the certificate checked against ca_file."""
        shipper = self.shipper()
        yield shipper.ship(self.feed(), self.ftpd.uri("/feeds/1_site_t.jl"))
        yield shipper.settled()
        self.assertEqual((self.ftpd.home / "feeds/1_site_t.jl").read_bytes(), GOOD)
        [(_, temp), _, _] = self.ftpd.seen
        self.assertEqual(self.ftpd.seen, [("STOR", temp), ("RNFR", temp), ("RNTO", "1_site_t.jl")])
        self.assertEqual((shipper.shipped, shipper.waiting, shipper.failures), (1, 0, 0))
        self.assertNotIn(PASSWORD, "\n".join(self.logs.texts(LogLevel.info)))

    @defer.inlineCallbacks
    def test_certificate_of_another_ca(self) -> Any:
        """A certificate our CA file does not vouch for: nothing is sent (not even the password), the file stays
        spooled, the error says why at error level and on the status, and retries wait the longest back-off."""
        shipper = self.shipper(ca=self.other_ca[0], retry_first=1.0, retry_max=300.0)
        yield shipper.ship(self.feed(), self.ftpd.uri("/1_site_t.jl"))
        yield shipper.settled()
        self.assertEqual(self.ftpd.seen, [])
        self.assertEqual((shipper.shipped, shipper.waiting, shipper.failures), (0, 1, 1))
        [row] = shipper.status()["files"]
        self.assertEqual(row["state"], "retrying")
        self.assertEqual(row["next_attempt_in"], 300.0)
        self.assertIn("FeedTrustError", row["error"])
        self.assertIn("certificate does not check", row["error"])
        self.assertTrue(any("certificate does not check" in t for t in self.logs.texts(LogLevel.error)))
        self.assertEqual(len(self.queued()), 2)

    @defer.inlineCallbacks
    def test_insecure_is_an_explicit_choice(self) -> Any:
        """insecure = true ships to a server whose certificate is not checked (here: no CA file at all)."""
        shipper = self.shipper(ca="", insecure=True)
        yield shipper.ship(self.feed(), self.ftpd.uri("/1_site_t.jl"))
        yield shipper.settled()
        self.assertEqual((self.ftpd.home / "1_site_t.jl").read_bytes(), GOOD)

    @defer.inlineCallbacks
    def test_system_cas_refuse_a_private_ca(self) -> Any:
        """No ca_file: the system's CAs, which do not know the test CA: refused."""
        shipper = self.shipper(ca="")
        yield shipper.ship(self.feed(), self.ftpd.uri("/1_site_t.jl"))
        yield shipper.settled()
        self.assertEqual((shipper.shipped, shipper.waiting), (0, 1))
        self.assertIn("certificate does not check", shipper.last_error or "")

    @defer.inlineCallbacks
    def test_start_check_refuses_a_bad_certificate(self) -> Any:
        """A configured ftps:// host whose certificate does not check fails the start with one line."""
        template = self.ftpd.uri("/").replace("%", "%%") + "%(date)s/%(batch)s.jl"
        shipper = self.shipper(ca=self.other_ca[0], probe=(template,))
        failure = yield self.assertFailure(shipper.ready, FeedTrustError)
        self.assertEqual(len(str(failure).splitlines()), 1)
        self.assertIn("127.0.0.1", str(failure))
        self.assertNotIn(PASSWORD, str(failure))

    @defer.inlineCallbacks
    def test_start_check_passes_and_a_host_down_only_warns(self) -> Any:
        """A host whose certificate checks starts; a host that does not answer is warned of, and the start goes on."""
        shipper = self.shipper(probe=(self.ftpd.uri("/").replace("%", "%%") + "%(batch)s.jl",))
        yield shipper.ready
        self.assertTrue(any("TLS certificate checks" in t for t in self.logs.texts(LogLevel.info)))
        yield shipper.stopService()
        port = self.ftpd.port
        self.ftpd.stop()
        second = self.shipper(probe=(f"ftps://u:pw@127.0.0.1:{port}/x.jl",))
        yield second.ready
        self.assertTrue(any("did not answer the start check" in t for t in self.logs.texts(LogLevel.warn)))

    @defer.inlineCallbacks
    def test_data_connection_dropped_mid_file(self) -> Any:
        """A TLS upload cut halfway never shows the final name; the retry ships the file whole."""
        self.ftpd.behaviour["drop"] = True
        data = big_feed()
        shipper = self.shipper(retry_first=5.0)
        yield shipper.ship(self.feed(data=data), self.ftpd.uri("/feeds/1_site_t.jl"))
        yield shipper.settled()
        self.assertFalse((self.ftpd.home / "feeds" / "1_site_t.jl").exists())
        self.assertEqual((shipper.waiting, shipper.failures), (1, 1))
        self.ftpd.behaviour["drop"] = False
        self.clock.advance(5.0)
        yield shipper.settled()
        self.assertEqual(shipper.shipped, 1, shipper.last_error)
        self.assertEqual((self.ftpd.home / "feeds" / "1_site_t.jl").read_bytes(), data)
        self.assertEqual(os.listdir(self.ftpd.home / "feeds"), ["1_site_t.jl"])

    @defer.inlineCallbacks
    def test_server_drops_the_data_connection(self) -> Any:
        """The server closes the TLS data connection alone, mid-file: the attempt fails, no final name shows, the
        next attempt ships the file whole over the same kind of connection."""
        self.ftpd.behaviour["drop_data"] = True
        data = big_feed()
        shipper = self.shipper(retry_first=5.0)
        yield shipper.ship(self.feed(data=data), self.ftpd.uri("/feeds/1_site_t.jl"))
        yield shipper.settled()
        self.assertFalse((self.ftpd.home / "feeds" / "1_site_t.jl").exists())
        self.assertEqual((shipper.waiting, shipper.failures, shipper.shipped), (1, 1, 0))
        self.clock.advance(5.0)
        yield shipper.settled()
        self.assertEqual(shipper.shipped, 1, shipper.last_error)
        self.assertEqual((self.ftpd.home / "feeds" / "1_site_t.jl").read_bytes(), data)
        self.assertEqual(os.listdir(self.ftpd.home / "feeds"), ["1_site_t.jl"])

    @defer.inlineCallbacks
    def test_down_across_restarts_ships_once_whole(self) -> Any:
        """The host is down while two shippers come and go; the third ships each file once, whole."""
        port = self.ftpd.port
        self.ftpd.stop()
        first = self.shipper()
        yield first.ship(self.feed("1.jl"), self.ftpd.uri("/1.jl"))
        yield first.settled()
        yield first.stopService()
        second = self.shipper()
        yield second.settled()
        self.assertEqual(second.waiting, 1)
        yield second.ship(self.feed("2.jl", big_feed()), self.ftpd.uri("/2.jl"))
        yield second.settled()
        yield second.stopService()
        ftpd = self.start_ftpd(port)
        third = self.shipper()
        yield third.settled()
        self.assertEqual((ftpd.home / "1.jl").read_bytes(), GOOD)
        self.assertEqual((ftpd.home / "2.jl").read_bytes(), big_feed())
        self.assertEqual(sorted(ftpd.stored()), sorted(a for c, a in ftpd.seen if c == "RNFR"))
        self.assertEqual(len(ftpd.stored()), 2)
        self.assertEqual((third.shipped, third.waiting, self.queued()), (2, 0, []))
