"""Malformed answers named for what they are (issue 35), and counted as the server's fixed fault by every role."""

from __future__ import annotations

from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.trial import unittest

from spiderd.core import status as st
from spiderd.fetch.fetcher import FetchConfig, Fetcher
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool import open_memory_pool
from spiderd.worker.pipeline import retryable

from .helpers import ClockedReactor
from .rawpeers import Scripted, closed, listen

OK = b"HTTP/1.1 200 OK\r\n"
CHUNKED = OK + b"Transfer-Encoding: chunked\r\n\r\n"
ANSWERS = {
    b"/long-line": (OK + b"X-Big: " + b"a" * 1_000_000 + b"\r\nContent-Length: 2\r\n\r\nok", "close"),
    b"/many-lines": (OK + (b"X-Filler: " + b"a" * 40 + b"\r\n") * 20_000 + b"Content-Length: 2\r\n\r\nok", "close"),
    b"/short": (OK + b"Content-Length: 100\r\n\r\n0123456789", "close"),
    b"/short-reset": (OK + b"Content-Length: 100\r\n\r\n0123456789", "reset"),
    b"/bad-chunk": (CHUNKED + b"5\r\nhello\r\nzz\r\nxx\r\n0\r\n\r\n", "keep"),
    b"/chunks-cut": (CHUNKED + b"5\r\nhello\r\n50\r\nhello", "close"),
    b"/status": (b"HTTP/1.1 abc OK\r\nContent-Length: 2\r\n\r\nok", "keep"),
    b"/not-http": (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "close"),
    b"/lengths": (OK + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\nok", "keep"),
    b"/length": (OK + b"Content-Length: two\r\n\r\nok", "keep"),
    b"/coding": (OK + b"Transfer-Encoding: gzip\r\n\r\nok", "close"),
    b"/no-colon": (OK + b"Just words\r\nContent-Length: 2\r\n\r\nok", "keep"),
    b"/nothing": (b"", "close"),
}


class MalformedAnswerTests(unittest.TestCase):
    """Raw answers on 127.0.0.1 that break HTTP/1.1's syntax or framing, each fetched on a new fetcher."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.server = Scripted(ANSWERS)
        port = listen(self.server)
        self.addCleanup(port.stopListening)
        self.base = f"http://127.0.0.1:{port.getHost().port}"

    @defer.inlineCallbacks
    def fetch(self, path: str) -> Any:
        fetcher = Fetcher(ClockedReactor(reactor, self.clock), FetchConfig(max_body_size=10_000_000))
        result = yield fetcher.fetch(self.base + path)
        yield fetcher.close()
        yield closed(self.server)
        return result

    @defer.inlineCallbacks
    def check(self, path: str, status: int, reason: str) -> Any:
        result = yield self.fetch(path)
        self.assertEqual((result.status, result.reason, result.body), (status, reason, b""), path)

    def test_a_header_line_over_the_limit(self) -> Any:
        """A 1 MB header line is a malformed answer, "headers too long", not a clean close."""
        return self.check("/long-line", st.MALFORMED, "malformed answer: headers too long: a line of more than "
                                                      "16384 bytes")

    def test_headers_over_the_limit(self) -> Any:
        """1 MB of short header lines is a malformed answer too (no header line is over the limit)."""
        return self.check("/many-lines", st.MALFORMED, "malformed answer: headers too long: more than 262144 bytes")

    def test_a_body_cut_short(self) -> Any:
        """Content-Length 100, 10 bytes, then a clean close: "body shorter than Content-Length (10 of 100 bytes)"."""
        return self.check("/short", st.CUT_SHORT, "cut short: body shorter than Content-Length (10 of 100 bytes)")

    @defer.inlineCallbacks
    def test_a_body_cut_by_a_reset(self) -> Any:
        """The same body cut by a reset is a lost connection (retried), and says how much of the body came."""
        result = yield self.fetch("/short-reset")
        self.assertEqual(result.status, st.CONNECTION_LOST)
        self.assertRegex(result.reason, r"^reset: connection lost after 10 of the 100 bytes of the body \(.+\)$")

    def test_a_bad_chunk(self) -> Any:
        """A chunk size that is not hexadecimal is a malformed answer, "bad chunk"."""
        return self.check("/bad-chunk", st.MALFORMED, "malformed answer: bad chunk: Chunk-size must be an integer.")

    def test_a_chunked_body_cut_short(self) -> Any:
        """A chunked body closed before its last chunk is cut short, with the bytes that came."""
        return self.check("/chunks-cut", st.CUT_SHORT, "cut short: chunked body closed before its last chunk "
                                                       "(10 bytes came)")

    @defer.inlineCallbacks
    def test_bad_heads(self) -> Any:
        """A bad status line, a bad or conflicting Content-Length, an unknown Transfer-Encoding, a header line
        with no colon: each a malformed answer named for what it is."""
        expected = {
            "/status": "bad status line: 'HTTP/1.1 abc OK'",
            "/not-http": "bad status line: 'SSH-2.0-OpenSSH_9.6'",
            "/lengths": "bad Content-Length: '2', '3'",
            "/length": "bad Content-Length: 'two'",
            "/coding": "unknown Transfer-Encoding: 'gzip'",
            "/no-colon": "bad header line: 'Just words'",
        }
        for path, reason in expected.items():
            yield self.check(path, st.MALFORMED, "malformed answer: " + reason)

    @defer.inlineCallbacks
    def test_no_answer_at_all(self) -> Any:
        """A server that closes before answering is a lost connection (retried), said in words."""
        result = yield self.fetch("/nothing")
        self.assertEqual((result.status, result.reason),
                         (st.CONNECTION_LOST, "reset: the server closed the connection before answering"))


class MalformedIsFinalTests(unittest.TestCase):
    """The malformed codes, as the roles read them from spiderd.core.status."""

    def test_the_worker_does_not_retry_them(self) -> None:
        """The worker's retryable() says no to a malformed or cut-short answer, yes to an out-of-step one."""
        self.assertEqual([retryable(code) for code in (st.MALFORMED, st.CUT_SHORT, st.OUT_OF_STEP)],
                         [False, False, True])

    @defer.inlineCallbacks
    def test_the_pool_fails_them_for_good_at_once(self) -> Any:
        """The pool fails a URL for good at its first malformed answer, with the reason; an out-of-step one
        goes back in the queue."""
        pool = open_memory_pool(Clock(), politeness=Politeness(concurrency=10))
        self.addCleanup(pool.close)
        urls = ["http://a.example/1", "http://a.example/2"]
        yield pool.addmany(urls)
        yield pool.pop(10)
        yield pool.set_status(urls[0], st.MALFORMED, "malformed answer: bad chunk: x")
        yield pool.set_status(urls[1], st.OUT_OF_STEP, "out of step: x")
        stats = yield pool.stats()
        self.assertEqual((stats["failed"], stats["waiting"]), (1, 1))
        why = yield pool.why(urls[0])
        self.assertEqual((why["state"], why["last_failure"]["failures"], why["last_failure"]["reason"]),
                         ("failed", 1, "malformed answer: bad chunk: x"))


HEADERS = b"".join(b"X-Header-%d: value %d\r\n" % (i, i) for i in range(12))
BIG = bytes(range(256)) * 120  # 30,720 bytes
HEAD_FIRST = {
    b"/big": (OK + HEADERS + b"Content-Length: %d\r\n\r\n" % len(BIG) + BIG, "keep"),
    b"/chunked": (CHUNKED + b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (BIG[:10000], BIG[10000:]))
                  + b"0\r\n\r\n", "keep"),
    b"/continue": (b"HTTP/1.1 100 Continue\r\n\r\n" + OK + b"Content-Length: %d\r\n\r\n" % len(BIG) + BIG, "keep"),
    b"/empty-then-more": (OK + b"Content-Length: 0\r\n\r\n" + b"x" * 3000, "keep"),
    b"/no-content-then-more": (b"HTTP/1.1 204 No Content\r\n\r\n" + b"x" * 3000, "keep"),
}


class HeadFirstTests(unittest.TestCase):
    """Reads that bring an answer's head and more at once (framing.Protocol._feed), on 127.0.0.1."""

    def setUp(self) -> None:
        self.server = Scripted(HEAD_FIRST)
        port = listen(self.server)
        self.addCleanup(port.stopListening)
        self.base = f"http://127.0.0.1:{port.getHost().port}"

    @defer.inlineCallbacks
    def fetch(self, path: str) -> Any:
        fetcher = Fetcher(ClockedReactor(reactor, Clock()), FetchConfig(max_body_size=10_000_000))
        result = yield fetcher.fetch(self.base + path, robots=False)
        yield fetcher.close()
        return result

    @defer.inlineCallbacks
    def test_the_head_goes_to_the_parser_alone(self) -> Any:
        """A 30 KB page whose head and body come in one read: the parser's line reader is given the head
        alone (it copied what it held past each of the 14 lines, the body too), then the body; the page whole."""
        from twisted.web._newclient import HTTPClientParser

        given: list[bytes] = []
        real = HTTPClientParser.dataReceived
        self.patch(HTTPClientParser, "dataReceived", lambda parser, data: given.append(data) or real(parser, data))
        result = yield self.fetch("/big")
        self.assertEqual((result.status, result.body), (200, BIG))
        self.assertTrue(given[0].endswith(b"\r\n\r\n") and BIG.startswith(given[1]), [len(g) for g in given])

    @defer.inlineCallbacks
    def test_answers_read_as_before(self) -> Any:
        """A chunked body, and an answer after a 100 Continue, come whole; bytes past the end of an answer
        without a body are counted whole (3,000, not what was past its head): a first 200 with Content-Length 0
        is malformed for them, a first 204 is let be, as before."""
        chunked = yield self.fetch("/chunked")
        after = yield self.fetch("/continue")
        empty = yield self.fetch("/empty-then-more")
        no_content = yield self.fetch("/no-content-then-more")
        self.assertEqual([(r.status, r.body) for r in (chunked, after, no_content)],
                         [(200, BIG), (200, BIG), (204, b"")])
        self.assertEqual((empty.status, empty.reason),
                         (st.MALFORMED, "malformed answer: 3000 bytes past the end of the answer (Content-Length 0)"))
