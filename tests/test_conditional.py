"""Conditional GET on recrawl: a page's ETag and Last-Modified, kept by the pool for the pages it hands out again,
sent back as If-None-Match / If-Modified-Since; a 304 is done and unchanged (not parsed, stored or linked again).

The parts first (sans I/O), then the fetcher and whole crawls against a real twisted.web site on 127.0.0.1, the
recrawl interval on a Clock.
"""

from __future__ import annotations

import email.utils
from collections import Counter
from typing import Any, Callable

from twisted.internet import defer, reactor
from twisted.trial import unittest
from twisted.web import http, resource, server

from spiderd.core import conditional as cg
from spiderd.core.conditional import Validators
from spiderd.fetch.fetcher import FetchConfig, Fetcher

T = 1_700_000_000  # Tue, 14 Nov 2023 22:13:20 GMT


def http_date(when: float) -> str:
    return email.utils.formatdate(when, usegmt=True)


class Parts(unittest.SynchronousTestCase):
    """Validators read from an answer's headers, sent back, and kept in a few bytes by both pools."""

    def test_read_from_headers(self) -> None:
        self.assertEqual(cg.from_headers(b'"abc"', http_date(T).encode()), Validators('"abc"', T))
        self.assertEqual(cg.from_headers('W/"v2"', None), Validators('W/"v2"'))
        self.assertEqual(cg.from_headers(None, " " + http_date(T) + " "), Validators(None, T))
        self.assertEqual(cg.from_headers("unquoted-tag", None), Validators("unquoted-tag"))
        for tag, date in ((None, None), ("", ""), ('"with space"', "yesterday"), ('"' + "x" * 200 + '"', None),
                          ('"\x7f"', "Mon, 99 Foo 2024 00:00:00 GMT"), (None, "Thu, 01 Jan 1970 00:00:00 -0000")):
            self.assertIsNone(cg.from_headers(tag, date), (tag, date))

    def test_request_headers(self) -> None:
        self.assertEqual(Validators('"abc"', T).headers(), [(b"If-None-Match", b'"abc"'),
                                                           (b"If-Modified-Since", b"Tue, 14 Nov 2023 22:13:20 GMT")])
        self.assertEqual(Validators(None, T).headers(), [(b"If-Modified-Since", http_date(T).encode())])
        self.assertEqual(Validators('"a"').headers(), [(b"If-None-Match", b'"a"')])

    def test_a_304_may_update_them(self) -> None:
        old = Validators('"a"', T)
        self.assertEqual(old.updated(None), old)
        self.assertEqual(old.updated(Validators('"b"')), Validators('"b"', T))
        self.assertEqual(old.updated(Validators(None, T + 5)), Validators('"a"', T + 5))

    def test_kept_in_a_few_bytes_both_ways(self) -> None:
        for v in (Validators('"abc"', T), Validators('W/"x"'), Validators(None, T), Validators("a", 1)):
            self.assertEqual(cg.unpack(cg.pack(v)), v)
            self.assertEqual(cg.from_text(cg.to_text(v)), v)
        self.assertEqual(len(cg.pack(Validators('"5f2b-1a"', T))), 4 + 9)
        self.assertEqual(cg.to_text(Validators('"5f2b-1a"', T)), '1700000000 "5f2b-1a"')
        for empty in (None, b"", b"\x00\x00\x00\x00"):
            self.assertIsNone(cg.unpack(empty))
        for bad in (None, "", b"", "- ", "x "):
            self.assertIsNone(cg.from_text(bad))


# -- a real site --------------------------------------------------------------------------------------------


class Versioned(resource.Resource):
    """Pages whose validator is an ETag (paths under /e/), a Last-Modified (/m/) or none (/n/), each in a version
    the test can change (``bump``); a conditional GET that matches gets 304 from twisted.web's own ``setETag`` and
    ``setLastModified``.  Logs each request: path and its If-None-Match and If-Modified-Since."""

    isLeaf = True

    def __init__(self, pages: dict[str, Callable[[int], bytes]]) -> None:
        super().__init__()
        self.pages = pages
        self.versions: Counter[str] = Counter()
        self.log: list[tuple[str, str | None, str | None]] = []

    def bump(self, path: str) -> None:
        self.versions[path] += 1

    def requests(self, path: str) -> list[tuple[str | None, str | None]]:
        return [(tag, date) for p, tag, date in self.log if p == path]

    def render_GET(self, request: Any) -> bytes:
        path = request.path.decode()
        header = request.getHeader
        self.log.append((path, header("if-none-match"), header("if-modified-since")))
        if path not in self.pages:
            request.setResponseCode(404)
            return b"no"
        version = self.versions[path]
        if path.startswith("/e/") and request.setETag(f'"{path.strip("/")}-v{version}"'.encode()) == http.CACHED:
            return b""
        if path.startswith("/m/") and request.setLastModified(T + 1000 * version) == http.CACHED:
            return b""
        request.setHeader(b"content-type", b"text/html")
        return self.pages[path](version)


def serve(test: unittest.TestCase, site: resource.Resource) -> str:
    factory = server.Site(site)
    factory.noisy = False
    port = reactor.listenTCP(0, factory, interface="127.0.0.1")
    test.addCleanup(port.stopListening)
    return f"http://127.0.0.1:{port.getHost().port}"


def page(body: str) -> Callable[[int], bytes]:
    return lambda version: f"<html><body><h1>v{version}</h1>{body}</body></html>".encode()


class FetcherTests(unittest.TestCase):
    """The fetcher reads a 200's validators and sends them back; the site answers 304."""

    timeout = 10

    def setUp(self) -> None:
        self.site = Versioned({"/e/1": page(""), "/m/1": page(""), "/n/1": page("")})
        self.base = serve(self, self.site)
        self.fetcher = Fetcher(reactor, FetchConfig(timeout=5))
        self.addCleanup(self.fetcher.close)

    @defer.inlineCallbacks
    def test_etag_sent_back_gets_304(self) -> Any:
        first = yield self.fetcher.fetch(self.base + "/e/1")
        self.assertEqual((first.status, first.validators), (200, Validators('"e/1-v0"')))
        again = yield self.fetcher.fetch(self.base + "/e/1", validators=first.validators)
        self.assertEqual((again.status, again.body, again.validators), (304, b"", Validators('"e/1-v0"')))
        self.assertEqual(self.site.requests("/e/1"), [(None, None), ('"e/1-v0"', None)])
        self.site.bump("/e/1")
        changed = yield self.fetcher.fetch(self.base + "/e/1", validators=first.validators)
        self.assertEqual((changed.status, changed.validators), (200, Validators('"e/1-v1"')))
        self.assertIn(b"v1", changed.body)

    @defer.inlineCallbacks
    def test_last_modified_sent_back_gets_304(self) -> Any:
        first = yield self.fetcher.fetch(self.base + "/m/1")
        self.assertEqual((first.status, first.validators), (200, Validators(None, T)))
        again = yield self.fetcher.fetch(self.base + "/m/1", validators=first.validators)
        self.assertEqual(again.status, 304)
        self.assertEqual(self.site.requests("/m/1")[1], (None, http_date(T)))

    @defer.inlineCallbacks
    def test_no_validators_no_conditional_request(self) -> Any:
        first = yield self.fetcher.fetch(self.base + "/n/1")
        self.assertEqual((first.status, first.validators), (200, None))
        yield self.fetcher.fetch(self.base + "/n/1")
        self.assertEqual(self.site.requests("/n/1"), [(None, None), (None, None)])
