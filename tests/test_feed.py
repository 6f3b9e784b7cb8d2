"""Feed URIs, the JSON-lines check, and the shipper against a real pyftpdlib server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any
from urllib.parse import quote

from twisted.internet import defer, reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import LogLevel, formatEvent, globalLogPublisher
from twisted.trial import unittest

from spiderd.core.feeduri import parse_target, render_uri, uri_time
from spiderd.core.retry import Backoff
from spiderd.core.secrets import redact
from spiderd.feed.errors import BadFeedError, FeedExistsError
from spiderd.feed.items import ItemWriter
from spiderd.core.itemline import json_line
from spiderd.feed.jsonl import validate_jsonl
from spiderd.feed import shipper as shipper_module
from spiderd.feed.shipper import FeedShipper
from spiderd.feed.upload import upload
from tests.ftpservers import PASSWORD, FTPd

SCRAPY = "%(batch)s_%(name)s_%(time)s.jl"
GOOD = b'{"url":"http://a/1","title":"\xc3\xa9t\xc3\xa9"}\n{"url":"http://a/2","n":[1,2.5,null]}\n'


def write(path: Path, data: bytes) -> str:
    """Write ``data`` to ``path`` (parents created); returns the path as text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path)


def big_feed(lines: int = 5000) -> bytes:
    """A valid feed large enough that a STOR spans many reads."""
    return b"".join(b'{"n":%d,"pad":"%s"}\n' % (i, b"x" * 80) for i in range(lines))


class LogEvents:
    """Every log event while a test runs."""

    def __init__(self, test: unittest.TestCase) -> None:
        self.events: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(self.events.append)
        test.addCleanup(globalLogPublisher.removeObserver, self.events.append)

    def texts(self, level: LogLevel) -> list[str]:
        """Formatted texts of the events at ``level``."""
        return [formatEvent(e) for e in self.events if e.get("log_level") == level]

    def everything(self) -> str:
        """All formatted events, with failures, as one text."""
        return "\n".join(formatEvent(e) + repr(e.get("log_failure", "")) for e in self.events)


# -- templates and redaction -----------------------------------------------------------------


class TemplateTests(unittest.SynchronousTestCase):
    """render_uri, its path-escape checks, parse_target and redact."""

    def test_scrapy_template(self) -> None:
        """The seed's FEED_URI renders as Scrapy would, time in UTC with '-' for ':'."""
        params = {"batch": 7, "name": "site", "time": uri_time(1700000000.5)}
        self.assertEqual(render_uri("ftp://anonymous@spark/" + SCRAPY, params),
                         "ftp://anonymous@spark/7_site_2023-11-14T22-13-20+00-00.jl")
        self.assertEqual(uri_time(0), "1970-01-01T00-00-00+00-00")

    def test_directories_and_arguments(self) -> None:
        """The template decides directories; extra spider arguments fill in like batch and name."""
        uri = render_uri("file:///data/%(name)s/%(shard)s/%(batch)s.jl", {"name": "s", "shard": "eu", "batch": 3})
        self.assertEqual(uri, "file:///data/s/eu/3.jl")

    def test_no_width_precision_or_long_names(self) -> None:
        """Only %(key)s: a width, a precision or another conversion is refused before anything is rendered,
        and so is a rendered name longer than a file system takes."""
        for template in ("file:///data/%(batch)200000000s.jl", "file:///data/%(batch)05d.jl",
                         "file:///data/%(batch).3s.jl", "file:///data/%(batch)r.jl", "file:///data/%s.jl",
                         "file:///data/%(batch)-9s.jl", "file:///data/100%.jl"):
            with self.assertRaisesRegex(ValueError, "only %\\(key\\)s parameters", msg=template):
                render_uri(template, {"batch": "1"})
        with self.assertRaisesRegex(ValueError, "longer than a file system takes"):
            render_uri("file:///data/%(batch)s.jl", {"batch": "x" * 300})
        with self.assertRaisesRegex(ValueError, "longer than a file system takes"):
            render_uri("ftp://h/" + "d/" * 2100 + "%(batch)s.jl", {"batch": "1"})
        self.assertEqual(render_uri("file:///data/100%%_%(batch)s.jl", {"batch": "1"}), "file:///data/100%_1.jl")

    def test_escaping_values_rejected(self) -> None:
        """No value can leave the directory: slashes, backslashes, NUL, '.', '..', empty, ?, #, newlines."""
        template = "ftp://spark/feeds/%(batch)s_%(name)s_%(arg)s.jl"
        for key, value in [("batch", "../x"), ("batch", ".."), ("name", "a/b"), ("arg", "/etc/passwd"),
                           ("name", "."), ("arg", "a\\b"), ("arg", "a\0b"), ("name", ""), ("arg", "a?b"),
                           ("arg", "a#b"), ("name", "a\r\nDELE x")]:
            params = {"batch": 1, "name": "site", "arg": "x", key: value}
            with self.assertRaises(ValueError, msg=f"{key}={value!r}") as caught:
                render_uri(template, params)
            self.assertIn(key, str(caught.exception))

    def test_whole_value_is_a_directory(self) -> None:
        """A value that is the whole name is still checked."""
        with self.assertRaises(ValueError):
            render_uri("file:///data/%(name)s", {"name": ".."})

    def test_bad_templates(self) -> None:
        """Missing parameters, '..' in the template, other schemes and stray '%' are clear errors."""
        with self.assertRaisesRegex(ValueError, "'time'"):
            render_uri("ftp://h/" + SCRAPY, {"batch": 1, "name": "s"})
        for template in ["ftp://h/a/../%(name)s.jl", "http://h/%(name)s.jl", "ftp://h/dir/",
                         "file://host/x/%(name)s", "ftp://h/%(name)s.jl?x=1", "ftp://u:p%40ss@h/%(name)s"]:
            with self.assertRaises(ValueError, msg=template):
                render_uri(template, {"name": "s"})
        self.assertEqual(render_uri("ftp://u:p%%40ss@h/%(name)s", {"name": "s"}), "ftp://u:p%40ss@h/s")

    def test_parse_target(self) -> None:
        """The password is URL-decoded, anonymous has no user, paths are split into directory and name."""
        target = parse_target("ftp://spark:p%40ss%2Fw@host:2121/a/b/1_s.jl")
        self.assertEqual((target.host, target.port, target.user, target.password), ("host", 2121, "spark", "p@ss/w"))
        self.assertEqual((target.directory, target.name, target.temp_name), ("/a/b", "1_s.jl", ".1_s.jl.part"))
        self.assertNotIn("p@ss", repr(target) + str(target))
        anon = parse_target("ftp://spark/1.jl")
        self.assertEqual((anon.user, anon.port, anon.directory), ("", 21, "/"))
        self.assertEqual(parse_target("file:///tmp/x/1.jl").directory, "/tmp/x")

    def test_redact(self) -> None:
        """Passwords become ***; everything else is kept."""
        self.assertEqual(redact("ftp://spark:s3cret@host:21/a/b.jl"), "ftp://spark:***@host:21/a/b.jl")
        self.assertEqual(redact("ftp://spark:p%40ss@host/x"), "ftp://spark:***@host/x")
        self.assertEqual(redact("ftp://u:p@ss@host/x@y.jl"), "ftp://u:***@host/x@y.jl")
        self.assertEqual(redact("ftp://anonymous@spark/%(batch)s.jl"), "ftp://anonymous@spark/%(batch)s.jl")
        self.assertEqual(redact("file:///data/x.jl"), "file:///data/x.jl")
        self.assertEqual(redact("not a uri"), "not a uri")
        self.assertNotIn("pa", redact("ftp://u:pa/ss@host/x"))

    def test_backoff(self) -> None:
        """Delays double from the first up to the cap."""
        delays = [0.0]
        for _ in range(6):
            delays.append(Backoff(1.0, 10.0).after(delays[-1]))
        self.assertEqual(delays[1:], [1.0, 2.0, 4.0, 8.0, 10.0, 10.0])


# -- JSON lines ------------------------------------------------------------------------------------


class ValidateTests(unittest.SynchronousTestCase):
    """validate_jsonl accepts what Spark reads cleanly and names the first bad line."""

    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="spiderd-jl-"))
        self.addCleanup(shutil.rmtree, self.dir, True)

    def check(self, data: bytes) -> int:
        return validate_jsonl(write(self.dir / "f.jl", data))

    def test_good(self) -> None:
        """Objects, one a line, UTF-8, CRLF endings and an empty file pass."""
        self.assertEqual(self.check(GOOD), 2)
        self.assertEqual(self.check(b'{"a":1}\r\n{"b":2}\r\n'), 2)
        self.assertEqual(self.check(b""), 0)

    def test_bad(self) -> None:
        """Each kind of line Spark would count as corrupt is refused, with its line number."""
        cases = {
            b'{"a":1}\n\n{"b":2}\n': "line 2: blank",
            b'{"a":1}\n[1,2]\n': "line 2: a JSON list",
            b'"text"\n': "line 1: a JSON str",
            b'{"a":"\xff\xfe"}\n': "line 1: invalid UTF-8",
            b'{"a":NaN}\n': "line 1: not JSON",
            b'{"a":1}\n{"a":-Infinity}\n': "line 2: not JSON",
            b'{"a":1}\n{"b":2}': "line 2: no final newline",
            b'{"a":1,\r"b":2}\n': "line 1: carriage return",
            b'{"a":1\n': "line 1: not JSON",
            b'{"a":1}\n\xef\xbb\xbf{"b":2}\n': "line 2: not JSON: Unexpected UTF-8 BOM",
        }
        for data, message in cases.items():
            with self.assertRaises(BadFeedError, msg=repr(data)) as caught:
                self.check(data)
            self.assertIn(message, str(caught.exception))


class ItemsJSONTests(unittest.TestCase):
    """The item writer's lines: never NaN or Infinity; a line encoded already (by a parse child) is written as it is."""

    def writer(self, batch_size: int) -> ItemWriter:
        """A started ItemWriter in a directory of its own (removed after the test)."""
        directory = tempfile.mkdtemp(prefix="spiderd-items-")
        self.addCleanup(shutil.rmtree, directory, True)
        writer = ItemWriter(reactor, directory, batch_size=batch_size)
        writer.startService()
        return writer

    def test_json_line(self) -> None:
        """Non-finite floats become null (keys: their name); other values are unchanged."""
        line = json_line({"a": float("nan"), "b": [1.5, float("inf")], "c": {"d": -float("inf")}, "e": "é"})
        self.assertEqual(line, '{"a":null,"b":[1.5,null],"c":{"d":null},"e":"é"}\n')
        self.assertEqual(json.loads(json_line({float("nan"): 1})), {"nan": 1})

    @defer.inlineCallbacks
    def test_writer_output_validates(self) -> Any:
        """A file the ItemWriter wrote with NaN items passes validate_jsonl."""
        writer = self.writer(batch_size=1)
        yield writer.write({"price": float("nan"), "title": "x"})
        yield writer.write({"price": 1.0, "rank": float("inf")})
        yield writer.stopService()
        self.assertEqual([validate_jsonl(p) for p in writer.files], [2])

    @defer.inlineCallbacks
    def test_writer_takes_a_line_encoded_already(self) -> Any:
        """An item given with its line (a parse child encoded it) is written as that line; one without is encoded."""
        writer = self.writer(batch_size=2)
        yield defer.gatherResults([writer.write({"title": "x"}, line='{"title":"as the child wrote it"}\n'),
                                   writer.write({"title": "y"})])
        yield writer.stopService()
        [path] = writer.files
        with open(path, encoding="utf-8") as f:
            self.assertEqual(f.read(), '{"title":"as the child wrote it"}\n{"title":"y"}\n')


# -- uploads ---------------------------------------------------------------------------------------


class ShipperTestBase(unittest.TestCase):
    """A spool, a Clock for timers, a real FTP server, and shippers that are stopped after the test."""

    timeout = 60

    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="spiderd-feed-"))
        self.addCleanup(shutil.rmtree, self.root, True)
        self.spool = str(self.root / "spool")
        self.clock = Clock()
        self.logs = LogEvents(self)
        self.ftpd = self.start_ftpd()

    def start_ftpd(self, port: int = 0) -> FTPd:
        ftpd = FTPd(self.root / "ftp", port)
        self.addCleanup(ftpd.stop)
        return ftpd

    def shipper(self, **options: Any) -> FeedShipper:
        options.setdefault("ftp_timeout", 10.0)
        shipper = FeedShipper(reactor, self.spool, clock=self.clock, **options)
        shipper.startService()
        self.addCleanup(lambda: shipper.stopService() if shipper.running else None)
        return shipper

    def feed(self, name: str = "1_site_t.jl", data: bytes = GOOD) -> str:
        """A finished file in the spool's incoming directory."""
        return write(self.root / "spool" / "incoming" / name, data)

    def queued(self) -> list[str]:
        return sorted(os.listdir(os.path.join(self.spool, "queue")))

    def bad(self) -> list[str]:
        return sorted(os.listdir(os.path.join(self.spool, "bad")))

    def assertNoSecret(self) -> None:
        for secret in (PASSWORD, quote(PASSWORD, safe="")):
            self.assertNotIn(secret, self.logs.everything())


class UploadTests(ShipperTestBase):
    """Where files land, under which names, and what is never overwritten."""

    @defer.inlineCallbacks
    def test_two_files_for_one_name(self) -> Any:
        """Two files shipped to the same name at once: one lands, the other is refused (quarantined), never a
        mix of the two and never one over the other."""
        shipper = self.shipper()
        other = b'{"other": 1}\n'
        yield defer.gatherResults([shipper.ship(self.feed("a.jl"), self.ftpd.uri("/feeds/1_site_t.jl")),
                                   shipper.ship(self.feed("b.jl", other), self.ftpd.uri("/feeds/1_site_t.jl"))])
        yield shipper.settled()
        self.assertIn((self.ftpd.home / "feeds/1_site_t.jl").read_bytes(), (GOOD, other))
        self.assertEqual((shipper.status()["shipped"], shipper.status()["quarantined"]), (1, 1))

    @defer.inlineCallbacks
    def test_ftp_with_password(self) -> Any:
        """A user with a URL-encoded password: the file lands under its final name via a temp name."""
        shipper = self.shipper()
        yield shipper.ship(self.feed(), self.ftpd.uri("/feeds/2024/1_site_t.jl"))
        yield shipper.settled()
        self.assertEqual((self.ftpd.home / "feeds/2024/1_site_t.jl").read_bytes(), GOOD)
        [(_, temp), _, _] = self.ftpd.seen
        self.assertRegex(temp, r"^\.1_site_t\.jl\.[0-9a-f]{8}\.part$")  # hidden, not *.jl, this upload's own
        self.assertEqual(self.ftpd.seen, [("STOR", temp), ("RNFR", temp), ("RNTO", "1_site_t.jl")])
        self.assertEqual(os.listdir(self.ftpd.home / "feeds/2024"), ["1_site_t.jl"])
        self.assertEqual(shipper.status(), {"shipped": 1, "waiting": 0, "failures": 0, "quarantined": 0,
                                            "last_error": None, "files": []})
        self.assertEqual(self.queued(), [])
        self.assertTrue(any("1_site_t.jl shipped" in t for t in self.logs.texts(LogLevel.info)))
        self.assertNoSecret()

    @defer.inlineCallbacks
    def test_ftp_anonymous(self) -> Any:
        """No user: anonymous login, into the anonymous home."""
        shipper = self.shipper()
        yield shipper.ship(self.feed(), self.ftpd.uri("/1_site_t.jl", anonymous=True))
        yield shipper.settled()
        self.assertEqual((self.ftpd.anon / "1_site_t.jl").read_bytes(), GOOD)
        self.assertEqual(shipper.shipped, 1)

    @defer.inlineCallbacks
    def test_file_sink(self) -> Any:
        """file:// creates the directories and leaves only the final name."""
        shipper = self.shipper()
        out = self.root / "out" / "a" / "b"
        yield shipper.ship(self.feed(), f"file://{out}/1_site_t.jl")
        yield shipper.settled()
        self.assertEqual(os.listdir(out), ["1_site_t.jl"])
        self.assertEqual((out / "1_site_t.jl").read_bytes(), GOOD)

    @defer.inlineCallbacks
    def test_existing_final_name_is_never_overwritten(self) -> Any:
        """A final name that exists fails the upload: the file is quarantined, the old one kept."""
        write(self.ftpd.home / "feeds" / "1_site_t.jl", b'{"old":1}\n')
        write(self.root / "out" / "1_site_t.jl", b'{"old":1}\n')
        shipper = self.shipper()
        yield shipper.ship(self.feed(), self.ftpd.uri("/feeds/1_site_t.jl"))
        yield shipper.ship(self.feed("2.jl"), f"file://{self.root}/out/1_site_t.jl")
        yield shipper.settled()
        self.assertEqual((self.ftpd.home / "feeds" / "1_site_t.jl").read_bytes(), b'{"old":1}\n')
        self.assertEqual((self.root / "out" / "1_site_t.jl").read_bytes(), b'{"old":1}\n')
        self.assertEqual(self.ftpd.stored(), [])
        self.assertEqual((shipper.quarantined, shipper.waiting, shipper.shipped), (2, 0, 0))
        self.assertEqual(len([n for n in self.bad() if n.endswith(".jl")]), 2)
        self.assertIn("already exists", shipper.last_error or "")
        self.assertEqual(len([t for t in self.logs.texts(LogLevel.error) if "already exists" in t]), 2)
        self.assertNoSecret()

    def test_own_earlier_rename_is_not_a_clash(self) -> None:
        """An attempt that sent the rename but lost the reply finds its own file and succeeds."""
        local = write(self.root / "local.jl", GOOD)
        target = parse_target(f"file://{self.root}/out/1.jl")
        write(self.root / "out" / "1.jl", GOOD)
        upload(local, target, renamed_before=True)
        with self.assertRaises(FeedExistsError):
            upload(local, target, renamed_before=False)

    @defer.inlineCallbacks
    def test_bad_file_quarantined(self) -> Any:
        """A file that fails the JSON-lines check is refused at ship, moved to bad/, never uploaded."""
        shipper = self.shipper()
        d = shipper.ship(self.feed(data=b'{"a":1}\n{"a":NaN}\n'), self.ftpd.uri("/1.jl"))
        yield self.assertFailure(d, BadFeedError)
        yield shipper.settled()
        self.assertEqual(self.ftpd.seen, [])
        self.assertEqual(self.queued(), [])
        reason = [n for n in self.bad() if n.endswith(".reason")]
        self.assertEqual(len(self.bad()), 3)
        self.assertIn("line 2", (Path(self.spool) / "bad" / reason[0]).read_text())
        self.assertEqual((shipper.quarantined, shipper.waiting), (1, 0))
        self.assertTrue(any("refused" in t and "line 2" in t for t in self.logs.texts(LogLevel.error)))

    @defer.inlineCallbacks
    def test_ship_errors(self) -> Any:
        """A bad URI fails ship and leaves the file where it was; so does a stopped shipper."""
        shipper = self.shipper()
        path = self.feed()
        yield self.assertFailure(shipper.ship(path, "ftp://h/../x.jl"), ValueError)
        self.assertTrue(os.path.exists(path))
        yield shipper.stopService()
        yield self.assertFailure(shipper.ship(path, self.ftpd.uri("/x.jl")), RuntimeError)
        self.assertTrue(os.path.exists(path))


class OutageTests(ShipperTestBase):
    """Dropped uploads, a server that is down, restarts and stops."""

    @defer.inlineCallbacks
    def test_connection_lost_mid_stor(self) -> Any:
        """A STOR cut halfway never shows the final name; the file stays spooled and goes out later."""
        self.ftpd.behaviour["drop"] = True
        data = big_feed()
        shipper = self.shipper(retry_first=5.0)
        yield shipper.ship(self.feed(data=data), self.ftpd.uri("/feeds/1_site_t.jl"))
        yield shipper.settled()
        [temp] = self.ftpd.stored()
        self.assertRegex(temp, r"^\.1_site_t\.jl\.[0-9a-f]{8}\.part$")
        partial = self.ftpd.home / "feeds" / temp
        self.assertEqual(os.listdir(self.ftpd.home / "feeds"), [partial.name])
        self.assertLess(partial.stat().st_size, len(data))
        self.assertEqual(len(self.queued()), 2)
        self.assertEqual((shipper.waiting, shipper.failures, shipper.shipped), (1, 1, 0))
        self.assertIsNotNone(shipper.last_error)
        self.ftpd.behaviour["drop"] = False
        self.clock.advance(4.9)
        yield shipper.settled()
        self.assertEqual(shipper.shipped, 0)
        self.clock.advance(0.1)
        yield shipper.settled()
        self.assertEqual((self.ftpd.home / "feeds" / "1_site_t.jl").read_bytes(), data)
        self.assertEqual(os.listdir(self.ftpd.home / "feeds"), ["1_site_t.jl"])
        self.assertEqual((shipper.waiting, shipper.shipped), (0, 1))
        self.assertEqual(self.queued(), [])

    @defer.inlineCallbacks
    def test_files_refused_then_waiting(self) -> Any:
        """status()["files"]: the refused file first, then the waiting ones (the most failed attempts first), each
        with its state, attempts, next attempt and error, no password; whereabouts() names the spooled and the
        refused ones until the spooled ones are uploaded."""
        port = self.ftpd.port
        self.ftpd.stop()
        shipper = self.shipper(retry_first=1.0, retry_max=4.0)
        yield shipper.ship(self.feed("old.jl"), self.ftpd.uri("/old.jl"))
        yield shipper.settled()
        self.clock.advance(1.0)  # its second attempt fails too
        yield shipper.settled()
        yield shipper.ship(self.feed("new.jl"), self.ftpd.uri("/new.jl"))
        yield self.assertFailure(shipper.ship(self.feed("bad.jl", b'{"a":NaN}\n'), self.ftpd.uri("/bad.jl")),
                                 BadFeedError)
        yield shipper.settled()
        files = shipper.status()["files"]
        self.assertEqual([(f["name"], f["state"], f["attempts"], f["next_attempt_in"]) for f in files],
                         [("bad.jl", "refused", 0, None), ("old.jl", "retrying", 2, 2.0), ("new.jl", "retrying", 1, 1.0)])
        self.assertIn("line 1", files[0]["error"])
        self.assertIn("refused", files[1]["error"].lower())
        self.assertTrue(files[1]["target"].endswith("/old.jl") and "***" in files[1]["target"], files[1])
        self.assertNotIn(PASSWORD, json.dumps(files))
        self.assertEqual(shipper.whereabouts(), {"old.jl": "spooled", "new.jl": "spooled", "bad.jl": "refused"})
        self.start_ftpd(port)
        self.clock.advance(2.0)
        yield shipper.settled()
        self.assertEqual(shipper.whereabouts(), {"bad.jl": "refused"})
        self.assertEqual([f["name"] for f in shipper.status()["files"]], ["bad.jl"])

    @defer.inlineCallbacks
    def test_server_down_then_back(self) -> Any:
        """Refused connections keep the file spooled with one warning; it ships once the server is back."""
        port = self.ftpd.port
        self.ftpd.stop()
        shipper = self.shipper(retry_first=1.0, retry_max=4.0)
        yield shipper.ship(self.feed(), self.ftpd.uri("/1_site_t.jl"))
        yield shipper.settled()
        for delay in (1.0, 2.0, 4.0, 4.0):
            self.assertEqual(self.clock.getDelayedCalls()[0].getTime() - self.clock.seconds(), delay)
            self.clock.advance(delay)
            yield shipper.settled()
        self.assertEqual((shipper.waiting, shipper.failures, shipper.shipped), (1, 5, 0))
        warnings_ = [t for t in self.logs.texts(LogLevel.warn) if "1_site_t.jl" in t]
        self.assertEqual(len(warnings_), 1)
        self.assertIn("spooled", warnings_[0])
        with open(os.path.join(self.spool, "queue", self.queued()[1])) as f:
            self.assertEqual(json.load(f)["attempts"], 5)
        ftpd = self.start_ftpd(port)
        self.clock.advance(4.0)
        yield shipper.settled()
        self.assertEqual((ftpd.home / "1_site_t.jl").read_bytes(), GOOD)
        self.assertEqual((shipper.waiting, shipper.shipped), (0, 1))
        self.assertEqual(len([t for t in self.logs.texts(LogLevel.info) if "1_site_t.jl shipped" in t]), 1)
        self.assertNotIn(PASSWORD, shipper.last_error or "")
        self.assertNoSecret()

    @defer.inlineCallbacks
    def test_restart_resumes_spool(self) -> Any:
        """A new shipper on the same spool ships what the last one could not."""
        port = self.ftpd.port
        self.ftpd.stop()
        first = self.shipper()
        yield first.ship(self.feed("1.jl"), self.ftpd.uri("/1.jl"))
        yield first.ship(self.feed("2.jl"), self.ftpd.uri("/2.jl", anonymous=True))
        yield first.settled()
        yield first.stopService()
        self.assertEqual(len(self.queued()), 4)
        ftpd = self.start_ftpd(port)
        second = self.shipper()
        yield second.ready  # the spool is read on the shipper's lane
        self.assertEqual(second.waiting, 2)
        yield second.settled()
        self.assertEqual((ftpd.home / "1.jl").read_bytes(), GOOD)
        self.assertEqual((ftpd.anon / "2.jl").read_bytes(), GOOD)
        self.assertEqual((second.shipped, second.waiting, self.queued()), (2, 0, []))

    @defer.inlineCallbacks
    def test_spooled_file_checked_once(self) -> Any:
        """A file spooled by this shipper is read by the JSON-lines check once, when spooled, not again at its
        upload (its record count kept); the upload still gives that count."""
        checked: list[str] = []
        self.patch(shipper_module, "validate_jsonl", lambda path: checked.append(path) or validate_jsonl(path))
        shipper = self.shipper()
        yield shipper.ship(self.feed(), self.ftpd.uri("/1_site_t.jl"))
        yield shipper.settled()
        self.assertEqual(((self.ftpd.home / "1_site_t.jl").read_bytes(), len(checked)), (GOOD, 1))
        self.assertTrue(any("1_site_t.jl shipped" in t and "2 records" in t for t in self.logs.texts(LogLevel.info)))

    @defer.inlineCallbacks
    def test_recovered_file_checked_before_upload(self) -> Any:
        """A file found in the spool at start (spooled by another run) is checked before its upload: a bad one is
        quarantined, never uploaded."""
        queue = Path(self.spool) / "queue"
        write(queue / "0001-a.json", json.dumps({"target": self.ftpd.uri("/bad.jl"), "name": "bad.jl",
                                                 "attempts": 0, "first_seen": 5.0}).encode())
        write(queue / "0001-a.jl", b'{"a":1}\n{"a":NaN}\n')
        shipper = self.shipper()
        yield shipper.ready
        yield shipper.settled()
        self.assertEqual((self.ftpd.seen, shipper.quarantined, self.queued()), ([], 1, []))

    @defer.inlineCallbacks
    def test_crash_leftovers(self) -> Any:
        """At start: half-written temp files go, a lone sidecar goes, a lone file or bad sidecar is quarantined."""
        queue = Path(self.spool) / "queue"
        good = {"target": self.ftpd.uri("/ok.jl"), "name": "ok.jl", "attempts": 3, "first_seen": 5.0}
        write(queue / "0001-a.json", json.dumps(good).encode())
        write(queue / "0001-a.jl", GOOD)
        write(queue / "0002-b.json", json.dumps(dict(good, name="gone.jl")).encode())
        write(queue / "0003-c.json.tmp", b'{"targ')
        write(queue / "0004-d.jl", GOOD)
        write(queue / "0005-e.json", b'{"target": ')
        write(queue / "0005-e.jl", GOOD)
        write(queue / "0006-f.jl.tmp", b'{"a"')
        shipper = self.shipper()
        yield shipper.ready
        self.assertEqual((shipper.waiting, shipper.quarantined), (1, 2))
        refused = [(f["name"], f["error"][:20]) for f in shipper.status()["files"] if f["state"] == "refused"]
        self.assertEqual(refused, [("0005-e.jl", "unreadable sidecar: "), ("0004-d.jl", "a spooled file witho")])
        yield shipper.settled()
        self.assertEqual((self.ftpd.home / "ok.jl").read_bytes(), GOOD)
        self.assertEqual(self.queued(), [])
        self.assertEqual(self.bad(), ["0004-d.jl", "0004-d.reason", "0005-e.jl", "0005-e.json", "0005-e.reason"])
        self.assertIn("3 failed attempts before", " ".join(self.logs.texts(LogLevel.info)))

    @defer.inlineCallbacks
    def test_stop_waits_for_upload_in_flight(self) -> Any:
        """stopService fires only after the running upload has gone through."""
        release, entered = self.block_stor()
        shipper = self.shipper()
        yield shipper.ship(self.feed(), self.ftpd.uri("/1.jl"))
        yield entered
        stopping = shipper.stopService()
        self.assertNoResult(stopping)
        release.set()
        yield stopping
        self.assertEqual((shipper.shipped, shipper.waiting), (1, 0))
        self.assertEqual((self.ftpd.home / "1.jl").read_bytes(), GOOD)

    @defer.inlineCallbacks
    def test_stop_gives_up_at_the_deadline(self) -> Any:
        """Past stop_timeout the upload is aborted; the file stays spooled and the final name never appears."""
        release, entered = self.block_stor()
        shipper = self.shipper(stop_timeout=30.0)
        yield shipper.ship(self.feed(), self.ftpd.uri("/1.jl"))
        yield entered
        stopping = shipper.stopService()
        self.clock.advance(29.0)
        self.assertNoResult(stopping)
        self.clock.advance(1.0)
        yield stopping
        self.assertEqual((shipper.shipped, shipper.waiting, len(self.queued())), (0, 1, 2))
        self.assertTrue(any("aborted" in t for t in self.logs.texts(LogLevel.warn)))
        release.set()

    def block_stor(self) -> tuple[threading.Event, Deferred[None]]:
        """Make the server hold the next STOR until the event is set; the Deferred fires when it arrives."""
        release = threading.Event()
        entered: Deferred[None] = Deferred()
        self.ftpd.behaviour.update(block=release, entered=entered)
        self.addCleanup(release.set)  # runs before the server's stop (cleanups run last-added first)
        return release, entered
