"""spiderd.fetch.sitemaps: urlsets, indexes and text sitemaps, gzip, the protocol's limits, hostile files, and the
filter that takes their URLs as a page's links are taken."""

from __future__ import annotations

import gzip
import os
import resource
import time
from typing import Any

import pytest

from spiderd.config.settings import from_dict
from spiderd.fetch import sitemaps as sm
from spiderd.fetch.extract import Rules

ORIGIN = "http://shop.example.com"
SITES = [
    {"name": "shop", "allowed_hosts": ["shop.example.com", "cdn.example.com"], "list_urls": [r"/c/", r"/$"],
     "detail_urls": [r"/p/\d+$"]},
    {"name": "other", "allowed_hosts": ["other.example.org"]},
]


def rules(**pool: Any) -> Rules:
    settings = from_dict({"sites": SITES, "pool": pool})
    return Rules(settings.sites, settings.pool.max_url_length, settings.pool.max_path_depth)


def urlset(*locs: str, lastmod: str | None = None, ns: str = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"') -> bytes:
    mod = f"<lastmod>{lastmod}</lastmod>" if lastmod else ""
    entries = "".join(f"<url><loc>{loc}</loc>{mod}<changefreq>daily</changefreq></url>" for loc in locs)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {ns}>{entries}</urlset>'.encode()


def index(*locs: str) -> bytes:
    entries = "".join(f"<sitemap><loc>{loc}</loc></sitemap>" for loc in locs)
    return f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</sitemapindex>'.encode()


# -- parsing ------------------------------------------------------------------------------------------------


def test_urlset_entries_and_lastmod() -> None:
    body = (b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            b"<url><loc>\n  http://shop.example.com/p/1  </loc><lastmod>2026-01-02</lastmod><priority>1</priority></url>"
            b"<url><lastmod>2026-01-02T10:00:00+02:00</lastmod><loc>http://shop.example.com/p/2?a=1&amp;b=2</loc></url>"
            b"<url><loc>http://shop.example.com/p/3</loc><lastmod>yesterday</lastmod></url>"
            b"<url><priority>0.5</priority></url></urlset>")
    parsed = sm.parse(body)
    assert parsed.kind == "urlset" and parsed.error is None
    assert parsed.entries == [
        ("http://shop.example.com/p/1", 1767312000.0),
        ("http://shop.example.com/p/2?a=1&b=2", 1767312000.0 + 8 * 3600),
        ("http://shop.example.com/p/3", None),
    ]


def test_index_text_and_namespaces() -> None:
    """An index gives its sitemaps; a text sitemap its http(s) lines; a missing or odd namespace still reads."""
    assert sm.parse(index(ORIGIN + "/a.xml", ORIGIN + "/b.xml.gz")).entries == [(ORIGIN + "/a.xml", None),
                                                                                 (ORIGIN + "/b.xml.gz", None)]
    assert sm.parse(index(ORIGIN + "/a.xml")).kind == "sitemapindex"
    text = sm.parse(b"\xef\xbb\xbfhttp://shop.example.com/p/1\r\n\n# comment\nftp://x/y\n  https://shop.example.com/c/2")
    assert (text.kind, text.entries) == ("text", [(ORIGIN + "/p/1", None), ("https://shop.example.com/c/2", None)])
    for ns in ("", 'xmlns="http://www.google.com/schemas/sitemap/0.84"', 'xmlns:s="urn:x"'):
        assert sm.parse(urlset(ORIGIN + "/p/1", ns=ns)).entries == [(ORIGIN + "/p/1", None)]
    assert sm.parse(b"  \n\n  " + urlset(ORIGIN + "/p/1")).entries == [(ORIGIN + "/p/1", None)]


@pytest.mark.parametrize("body", [
    b"", b"   \n", b"<html><body><a href='http://shop.example.com/p/1'>x</a></body></html>",
    b"<rss><channel><item><link>http://shop.example.com/p/1</link></item></channel></rss>",
    b"\x00\x01\x02\xff<<<>>>", b"%PDF-1.4 binary",
])
def test_not_a_sitemap(body: bytes) -> None:
    """HTML, feeds, binary junk and empty bodies are no sitemap: no entries, no exception."""
    parsed = sm.parse(body)
    assert parsed.kind in (None, "text") and parsed.entries == []


def test_malformed_xml_keeps_what_it_can() -> None:
    """Broken XML (a bare &, a cut file, stray tags) is read in recover mode: the entries before the damage stay."""
    cut = b'<urlset><url><loc>http://shop.example.com/p/1?a=1&b=2</loc></url><url><loc>http://shop.example.com/p/2'
    parsed = sm.parse(cut)
    assert parsed.kind == "urlset"
    assert [loc for loc, _ in parsed.entries][:1] == ["http://shop.example.com/p/1?a=1=2"]
    junk = b"<urlset><url><loc>http://shop.example.com/p/1</loc></url></urlset><<<</urlset>garbage\x00"
    assert sm.parse(junk).entries == [(ORIGIN + "/p/1", None)]
    nested = b"<urlset><url><x><loc>http://shop.example.com/p/9</loc></x></url><url><loc>x</loc></url></urlset>"
    assert sm.parse(nested).entries == [("x", None)]  # a <loc> below its place is not the entry's


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<urlset><url><loc>http://shop.example.com/p/&lol9;</loc></url><url><loc>http://shop.example.com/p/1</loc></url></urlset>"""


def test_entity_bomb_and_external_entities_refused() -> None:
    """A DOCTYPE is refused before any entity is expanded: the billion laughs and external entities (a local file,
    a network URL) give nothing, at once."""
    started = time.process_time()
    assert (sm.parse(BILLION_LAUGHS).entries, sm.parse(BILLION_LAUGHS).error) == ([], "doctype")
    assert sm.parse(gzip.compress(BILLION_LAUGHS)).error == "doctype"
    assert time.process_time() - started < 1
    external = (b'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY x SYSTEM "file:///etc/passwd">'
                b'<!ENTITY y SYSTEM "http://127.0.0.1:1/evil.dtd">]>'
                b"<urlset><url><loc>http://shop.example.com/&x;&y;</loc></url></urlset>")
    parsed = sm.parse(external)
    assert (parsed.entries, parsed.error) == ([], "doctype")
    assert "root:" not in repr(parsed)


def test_gzip_by_magic_bytes_and_damaged_gzip() -> None:
    body = urlset(*(f"{ORIGIN}/p/{i}" for i in range(3)))
    assert sm.parse(gzip.compress(body)).entries == sm.parse(body).entries
    cut = sm.parse(gzip.compress(body)[:-20])
    assert cut.error == "bad-gzip" and cut.kind == "urlset"
    assert sm.parse(b"\x1f\x8b" + os.urandom(200)).error == "bad-gzip"


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def test_gzip_bomb_stops_at_the_size_limit() -> None:
    """A 1 GB gzip bomb (1 MB on the wire) is inflated only up to max_size, a piece at a time: memory stays flat."""
    head = urlset(ORIGIN + "/p/1")[:-len(b"</urlset>")]
    zipper = gzip.GzipFile(fileobj=(buffer := __import__("io").BytesIO()), mode="wb", compresslevel=9)
    zipper.write(head)
    block = b"<!-- " + b" " * (1024 * 1024 - 10) + b" -->"
    for _ in range(1024):
        zipper.write(block)
    zipper.close()
    bomb = buffer.getvalue()
    assert len(bomb) < 2 * 1024 * 1024
    before = _peak_rss()
    started = time.process_time()
    parsed = sm.parse(bomb, max_size=20 * 1024 * 1024)
    assert (parsed.error, parsed.size, parsed.entries) == ("too-large", 20 * 1024 * 1024, [(ORIGIN + "/p/1", None)])
    assert time.process_time() - started < 5
    assert _peak_rss() - before < 64 * 1024 * 1024
    plain = sm.parse(urlset(ORIGIN + "/p/1") + b" " * 1000, max_size=100)
    assert plain.error == "too-large" and plain.size == 100


def test_more_than_max_urls() -> None:
    """More than 50,000 entries: the first 50,000 are kept and the file says too-many; a lower limit holds too."""
    body = urlset(*(f"{ORIGIN}/p/{i}" for i in range(50_001)))
    parsed = sm.parse(body)
    assert (len(parsed.entries), parsed.error, parsed.entries[-1][0]) == (50_000, "too-many", f"{ORIGIN}/p/49999")
    assert len(sm.parse(urlset(*(f"{ORIGIN}/p/{i}" for i in range(50_000)))).entries) == 50_000
    assert sm.parse(urlset(*(f"{ORIGIN}/p/{i}" for i in range(50_000)))).error is None
    small = sm.parse(b"\n".join(f"{ORIGIN}/p/{i}".encode() for i in range(11)), max_urls=10)
    assert (len(small.entries), small.error) == (10, "too-many")


@pytest.mark.parametrize("text, expected", [
    ("2026", 1767225600.0), ("2026-02", 1769904000.0), ("2026-02-03", 1770076800.0),
    ("2026-02-03T04:05Z", 1770091500.0), ("2026-02-03T04:05:06.789+01:00", 1770087906.0),
    ("2026-02-03T04:05:06-0130", 1770096906.0), (" 2026-02-03 ", 1770076800.0), ("2026-13-01", None),
    ("2026-02-30", None), ("yesterday", None), ("", None), (None, None), ("2026-02-03T04", None),
])
def test_lastmod(text: str | None, expected: float | None) -> None:
    assert sm.parse_lastmod(text) == expected


# -- selecting ----------------------------------------------------------------------------------------------


def test_select_takes_urls_as_links_are_taken() -> None:
    """Only URLs of the sitemap's host (or the robots.txt's) that the site rules classify are taken, canonicalised;
    off-site, other hosts of the same site, rejected paths, bad URLs and too-deep paths are skipped; duplicates
    count once."""
    body = urlset(
        ORIGIN + "/p/1", "HTTP://SHOP.example.com:80/p/2#frag", ORIGIN + "/c/shoes", ORIGIN + "/",
        ORIGIN + "/about",  # the rules take neither list nor detail
        "http://other.example.org/p/3",  # another site
        "http://evil.example.net/p/4",  # no site
        "http://cdn.example.com/p/5",  # the same site, another host: the protocol refuses it
        "ftp://shop.example.com/p/6", "/p/7", "http://[::1/p/8",
        ORIGIN + "/c/" + "/".join("d" * 40),  # deeper than max_path_depth
        ORIGIN + "/p/1",  # a duplicate
    )
    found = sm.read(body, ORIGIN + "/sitemap.xml", "shop.example.com", rules())
    assert found.details == [ORIGIN + "/p/1", ORIGIN + "/p/2"]
    assert found.lists == [ORIGIN + "/c/shoes", ORIGIN + "/"]
    assert (found.skipped, found.entries, found.urls) == (8, 13, 4)


def test_select_cross_submit_and_index() -> None:
    """A sitemap on another host of the site takes its own host's URLs and the robots.txt host's; an index keeps
    sitemaps on hosts the rules allow, once each."""
    body = urlset("http://cdn.example.com/p/1", ORIGIN + "/p/2", "http://other.example.org/p/3")
    found = sm.read(body, "http://cdn.example.com/s.xml", "shop.example.com", rules())
    assert (found.details, found.skipped) == (["http://cdn.example.com/p/1", ORIGIN + "/p/2"], 1)
    maps = sm.read(index(ORIGIN + "/a.xml", "http://evil.example.net/b.xml", ORIGIN + "/a.xml", "not a url",
                         "http://other.example.org/c.xml"), ORIGIN + "/i.xml", "shop.example.com", rules())
    assert (maps.kind, maps.sitemaps, maps.skipped) == ("sitemapindex", [ORIGIN + "/a.xml",
                                                                         "http://other.example.org/c.xml"], 2)
    assert maps.urls == 0


def test_select_lastmod_since() -> None:
    """With ``since``, URLs whose lastmod is later are the changed ones; no lastmod, or an older one, is not."""
    body = (b"<urlset>"
            b"<url><loc>http://shop.example.com/p/1</loc><lastmod>2026-03-01</lastmod></url>"
            b"<url><loc>http://shop.example.com/p/2</loc><lastmod>2026-01-01</lastmod></url>"
            b"<url><loc>http://shop.example.com/p/3</loc></url>"
            b"<url><loc>http://shop.example.com/c/4</loc><lastmod>2026-03-01T00:00:00Z</lastmod></url>"
            b"</urlset>")
    since = sm.parse_lastmod("2026-02-01")
    found = sm.read(body, ORIGIN + "/s.xml", "shop.example.com", rules(), since)
    assert (found.changed_details, found.details) == ([ORIGIN + "/p/1"], [ORIGIN + "/p/2", ORIGIN + "/p/3"])
    assert (found.changed_lists, found.lists) == ([ORIGIN + "/c/4"], [])
    first = sm.read(body, ORIGIN + "/s.xml", "shop.example.com", rules())
    assert first.changed_details == [] and len(first.details) == 3
