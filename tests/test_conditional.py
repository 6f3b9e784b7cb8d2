"""Conditional GET on recrawl: a page's ETag and Last-Modified, kept by the pool for the pages it hands out again,
sent back as If-None-Match / If-Modified-Since; a 304 is done and unchanged (not parsed, stored or linked again).

The parts first (sans I/O), then the fetcher and whole crawls against a real twisted.web site on 127.0.0.1, the
recrawl interval on a Clock.
"""

from __future__ import annotations

import email.utils

from twisted.trial import unittest

from spiderd.core import conditional as cg
from spiderd.core.conditional import Validators

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
