"""Tests for spiderd.fetch.extract: link resolution and filtering, classification, item fields, charsets, hostile input."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as s
from lxml import etree

from spiderd.fetch.extract import Extracted, Rules, extract
from spiderd.fetch.pagerobots import PageRobots
from spiderd.config.settings import from_dict
from spiderd.core.urls import canonicalize, fingerprint, to_signed64

SHOP = {
    "name": "shop",
    "allowed_hosts": ["shop.example.com", "Example.ORG:8080"],
    "list_urls": [r"/c/", r"/search\?"],
    "detail_urls": [r"/p/\d+$"],
    "fields": {
        "title": "css:h1.title::text",
        "price": "//span[@class='price']/text()",
        "tags": {"css": "ul.tags li::text", "all": True},
        "body": "//div[@id='body']",
        "missing": "//nothing/text()",
        "missing_all": {"xpath": "//nothing/text()", "all": True},
        "count": "count(//li)",
    },
}
BLOG = {"name": "blog", "allowed_hosts": ["blog.example.net"], "detail_urls": [r"/post/"], "follow_detail_links": True}
PAGE = "https://shop.example.com/c/shoes/index.html"


def make_rules(*sites: dict[str, Any], **pool: Any) -> Rules:
    """Rules built the way the daemon builds them: from a raw config through settings.from_dict."""
    settings = from_dict({"sites": list(sites or (SHOP, BLOG)), "pool": pool})
    return Rules(settings.sites, settings.pool.max_url_length, settings.pool.max_path_depth)


RULES = make_rules()


def run(
    body: str | bytes, url: str = PAGE, kind: str = "list", content_type: str | None = "text/html", **kw: Any
) -> Extracted:
    """Extract from a page with the default rules."""
    data = body.encode("utf-8") if isinstance(body, str) else body
    return extract(url, data, content_type, kind, 1234.5, 200, kw.pop("rules", RULES), **kw)


def links(*hrefs: str, head: str = "") -> str:
    """A page whose body holds one <a> per href."""
    return f"<html><head>{head}</head><body>" + "".join(f'<a href="{h}">x</a>' for h in hrefs) + "</body></html>"


# -- links ----------------------------------------------------------------------------------------------------


def test_relative_urls_resolve_against_the_page() -> None:
    """Path-relative, root-relative, protocol-relative, query-only and dot-segment hrefs resolve like a browser."""
    result = run(links("a/", "../b/", "/c/x", "//shop.example.com/c/y", "?q=1", "./d/", "https://shop.example.com/c/z"))
    assert result.lists == [
        "https://shop.example.com/c/shoes/a/",
        "https://shop.example.com/c/b/",
        "https://shop.example.com/c/x",
        "https://shop.example.com/c/y",
        "https://shop.example.com/c/shoes/index.html?q=1",
        "https://shop.example.com/c/shoes/d/",
        "https://shop.example.com/c/z",
    ]
    assert result.error is None and result.skipped == 0


def test_base_href_is_used_and_itself_resolved() -> None:
    """A relative <base href> is resolved against the page, then used for every link."""
    result = run(links("x", "/c/root", head='<base href="/c/other/">'))
    assert result.lists == ["https://shop.example.com/c/other/x", "https://shop.example.com/c/root"]
    result = run(links("x", head='<base href="http://example.org:8080/c/">'))
    assert result.lists == ["http://example.org:8080/c/x"]


def test_bad_base_href_falls_back_to_the_page() -> None:
    """A <base href> that is not an HTTP URL is ignored."""
    assert run(links("a/", head='<base href="javascript:void(0)">')).lists == ["https://shop.example.com/c/shoes/a/"]


def test_skipped_schemes_and_fragments() -> None:
    """javascript:, mailto:, tel:, data:, ftp: and fragment-only links are skipped and counted."""
    hrefs = ("javascript:go()", "mailto:a@b.c", "tel:+123", "data:text/html,x", "ftp://shop.example.com/c/", "#top")
    result = run(links(*hrefs, "/c/ok"))
    assert result.lists == ["https://shop.example.com/c/ok"]
    assert result.skipped == len(hrefs)


def test_off_site_and_unclassified_links_are_skipped() -> None:
    """Links to unknown hosts and allowed links matching no pattern are dropped and counted."""
    result = run(links("https://evil.example.com/c/", "https://example.com.evil.net/c/", "/about", "/c/fine"))
    assert result.lists == ["https://shop.example.com/c/fine"]
    assert result.skipped == 3


def test_whitespace_and_newlines_inside_hrefs() -> None:
    """Surrounding whitespace is stripped and tabs/newlines inside an href are removed."""
    result = run(links("  /c/a\n b  ", "/c/\tx"))
    assert result.lists == ["https://shop.example.com/c/a%20b", "https://shop.example.com/c/x"]


def test_dedup_document_order_and_page_itself_dropped() -> None:
    """Each URL appears once, in document order; the page itself and canonical duplicates are dropped."""
    result = run(links("/c/b?y=2&x=1", "/c/a", "/c/b?x=1&y=2#frag", "", "index.html", "/p/1", "/p/1"))
    assert result.lists == ["https://shop.example.com/c/b?x=1&y=2", "https://shop.example.com/c/a"]
    assert result.details == ["https://shop.example.com/p/1"]
    assert result.skipped == 0


def test_area_and_pagination_links_but_not_other_link_tags() -> None:
    """<area href> and <link rel=next/prev> are links; stylesheets, images and scripts are not."""
    head = '<link rel="stylesheet" href="/c/style.css"><link rel="Next" href="/c/2"><script src="/c/app.js"></script>'
    body = '<map><area href="/c/area"></map><img src="/c/img.png"><a name="anchor-only">x</a>'
    result = run(f"<html><head>{head}</head><body>{body}</body></html>")
    assert result.lists == ["https://shop.example.com/c/2", "https://shop.example.com/c/area"]


def test_link_xpaths_find_the_links_again() -> None:
    """For the linkbase, each kept link has its element's path in the page (lxml's getpath, seed 004's
    linkinfo xpath), and that path finds the element again; without the linkbase there are none."""
    page = ('<html><body><div><p><a href="/c/a">a</a></p><ul><li><a href="/c/b">b</a></li>'
            '<li><a href="/p/1">p</a></li></ul></div><a href="/c/a">again</a></body></html>')
    result = run(page, rules=Rules(RULES.sites, anchors=True))
    assert result.list_xpaths == ["/html/body/div/p/a", "/html/body/div/ul/li[1]/a"]
    assert result.detail_xpaths == ["/html/body/div/ul/li[2]/a"]
    tree = etree.fromstring(page, etree.HTMLParser()).getroottree()
    for url, path in zip(result.lists + result.details, result.list_xpaths + result.detail_xpaths):
        assert url.endswith(tree.xpath(path)[0].get("href"))
    assert (run(page).list_xpaths, run(page).detail_xpaths) == ([], [])


def test_a_link_path_too_long_is_left_out() -> None:
    """A link nested deeper than a path of MAX_XPATH characters keeps its place with an empty path."""
    deep = "<div>" * 200 + '<a href="/c/deep">x</a>' + "</div>" * 200 + '<a href="/c/flat">y</a>'
    result = run(deep, rules=Rules(RULES.sites, anchors=True))
    assert result.lists == ["https://shop.example.com/c/deep", "https://shop.example.com/c/flat"]
    assert result.list_xpaths[0] == "" and result.list_xpaths[1].endswith("/a")


def test_max_links_cap_counts_the_rest_as_skipped() -> None:
    """Only the first max_links hrefs are looked at; the others are counted as skipped."""
    result = run(links(*(f"/c/{i}" for i in range(100))), max_links=10)
    assert result.lists == [f"https://shop.example.com/c/{i}" for i in range(10)]
    assert result.skipped == 90


def test_absurdly_long_urls_are_skipped() -> None:
    """URLs longer than the configured maximum are skipped, not raised."""
    result = run(links("/c/" + "a" * 5000, "/c/short"))
    assert result.lists == ["https://shop.example.com/c/short"]
    assert result.skipped == 1


# -- classification -----------------------------------------------------------------------------------------


def test_site_for_exact_host_subdomain_and_port() -> None:
    """Hosts match exactly or as subdomains of an entry; ports are ignored on both sides."""
    assert RULES.site_for("https://shop.example.com/x").name == "shop"  # type: ignore[union-attr]
    assert RULES.site_for("https://a.b.shop.example.com:8443/x").name == "shop"  # type: ignore[union-attr]
    assert RULES.site_for("http://example.org/x").name == "shop"  # type: ignore[union-attr]
    assert RULES.site_for("http://blog.example.net/").name == "blog"  # type: ignore[union-attr]
    assert RULES.site_for("https://example.com/") is None
    assert RULES.site_for("https://notshop.example.com/") is None
    assert RULES.site_for("not a url") is None


def test_site_for_canonical_is_site_for() -> None:
    """A canonical URL's site, looked up without canonicalizing it again, is site_for's, the length limit too."""
    short = Rules(RULES.sites, max_url_length=60, max_path_depth=32)
    for url in ("https://shop.example.com/x", "https://a.b.shop.example.com:8443/x", "http://blog.example.net/",
                "https://example.com/", "https://shop.example.com/" + "a" * 40, "https://shop.example.com/" + "a" * 80):
        for rules in (RULES, short):
            assert rules.site_for_canonical(url) == rules.site_for(url), url


@pytest.mark.parametrize(
    "url, kind",
    [
        ("https://shop.example.com/p/12", "detail"),
        ("https://shop.example.com/c/shoes", "list"),
        ("https://shop.example.com/search?q=x", "list"),
        ("https://shop.example.com/about", None),
        ("https://other.example.com/c/", None),
        ("http://blog.example.net/post/1", "detail"),
        ("http://blog.example.net/anything", "list"),
        ("mailto:x@y.z", None),
    ],
)
def test_classify(url: str, kind: str | None) -> None:
    """Detail patterns win, list patterns next; a site without list patterns takes every other URL as a list."""
    assert RULES.classify(url) == kind


def test_classify_rejects_link_traps() -> None:
    """URLs deeper than max_path_depth segments or longer than max_url_length are not crawled."""
    rules = make_rules(BLOG, max_path_depth=3)
    assert rules.classify("http://blog.example.net/a/b/c/") == "list"
    assert rules.classify("http://blog.example.net/a/b/c/d") is None
    short = Rules(rules.sites, max_url_length=60, max_path_depth=32)
    grow = "http://blog.example.net/grow?x=" + "a" * 20
    assert short.classify(grow) == "list"
    assert short.classify(grow + "a" * 20) is None


# -- items --------------------------------------------------------------------------------------------------

DETAIL = """<html><body><h1 class="title big"> The  Title </h1><span class="price">9.99</span>
<ul class="tags"><li> red </li><li>blue</li><li>  </li></ul>
<div id="body"><p>Hello <b>bold</b> world</p></div><a href="/c/related">r</a></body></html>"""


def test_detail_item_fields_by_xpath_and_css() -> None:
    """Fields come from XPath and CSS selectors; the item carries url, urlhash, status, fetched_at and the body's
    digest (SHA-1, base32, as Heritrix and WARC write it)."""
    url = "https://shop.example.com/p/7"
    result = run(DETAIL, url=url, kind="detail")
    assert result.item == {
        "title": "The  Title",
        "price": "9.99",
        "tags": ["red", "blue"],
        "body": "Hello bold world",
        "missing": None,
        "missing_all": [],
        "count": "3",
        "url": url,
        "urlhash": to_signed64(fingerprint(url)),
        "status": 200,
        "fetched_at": 1234.5,
        "digest": "sha1:" + base64.b32encode(hashlib.sha1(DETAIL.encode()).digest()).decode(),
    }
    json.dumps(result.item)
    assert result.lists == [] and result.details == []


def test_detail_links_followed_only_when_the_site_says_so() -> None:
    """A detail page yields links only when its site has follow_detail_links."""
    page = links("/post/2", "/tags/x")
    result = run(page, url="http://blog.example.net/post/1", kind="detail")
    assert result.details == ["http://blog.example.net/post/2"]
    assert result.lists == ["http://blog.example.net/tags/x"]
    assert result.item is not None and result.item["url"] == "http://blog.example.net/post/1"


def test_detail_page_of_unknown_site() -> None:
    """A detail page whose host no site allows gives no item and says why."""
    result = run(DETAIL, url="https://unknown.example.com/p/1", kind="detail")
    assert result.item is None and result.error == "off-site"


def test_list_page_has_no_item() -> None:
    """List pages give links only."""
    assert run(DETAIL).item is None


# -- encodings, content types, empty and hostile bodies ---------------------------------------------------------

CAFE = '<html><head>{meta}</head><body><h1 class="title">café €</h1></body></html>'


def title_of(body: bytes, content_type: str | None) -> Any:
    """The extracted title of a detail page."""
    item = run(body, url="https://shop.example.com/p/1", kind="detail", content_type=content_type).item
    assert item is not None
    return item["title"]


def test_charset_from_header() -> None:
    """The header's charset is used when the body agrees."""
    assert title_of(CAFE.format(meta="").encode("cp1252"), "text/html; charset=windows-1252") == "café €"
    assert title_of(CAFE.format(meta="").encode("utf-8"), "text/html; charset=UTF-8") == "café €"


def test_charset_from_meta_and_default_utf8() -> None:
    """Without a header charset, <meta charset> decides; without either, UTF-8."""
    body = CAFE.format(meta='<meta charset="iso-8859-15">').encode("iso-8859-15")
    assert title_of(body, "text/html") == "café €"
    body = CAFE.format(meta='<meta http-equiv="Content-Type" content="text/html; charset=shift_jis">')
    assert title_of(body.replace("café €", "日本語").encode("shift_jis"), None) == "日本語"
    assert title_of(CAFE.format(meta="").encode("utf-8"), None) == "café €"
    mojibake = CAFE.format(meta='<meta charset="windows-1252">').replace("café €", "Ã©").encode("cp1252")
    assert title_of(mojibake, None) == "Ã©"  # valid UTF-8 bytes, but the page says cp1252


def test_lying_charset_falls_back() -> None:
    """A header saying UTF-8 over a cp1252 body decodes as cp1252; over junk, replacement characters."""
    assert title_of(CAFE.format(meta="").encode("cp1252"), "text/html; charset=utf-8") == "café €"
    junk = b'<h1 class="title">ok\xff\xfe\xfd</h1>'
    assert title_of(junk, "text/html; charset=utf-8").startswith("ok")
    assert title_of(CAFE.format(meta="").encode("utf-8"), "text/html; charset=no-such-charset") == "café €"


def test_utf16_with_bom() -> None:
    """A byte order mark wins over everything else."""
    assert title_of(CAFE.format(meta="").encode("utf-16"), "text/html; charset=iso-8859-1") == "café €"


def test_mostly_utf8_with_a_bad_byte_stays_utf8() -> None:
    """A UTF-8 page with one stray byte keeps its UTF-8 text."""
    body = CAFE.format(meta="").encode("utf-8").replace(b"</h1>", b"\xff</h1>")
    assert title_of(body, "text/html; charset=utf-8") == "café €\ufffd"


@pytest.mark.parametrize("content_type", ["image/png", "application/pdf", "application/octet-stream", "text/css"])
def test_non_html(content_type: str) -> None:
    """Non-HTML content types give an error and nothing else."""
    assert run(links("/c/a"), content_type=content_type) == Extracted(error="not-html")


def test_binary_without_content_type() -> None:
    """A body that starts like a PDF or PNG is not HTML even without a content type."""
    assert run(b"%PDF-1.4 <a href='/c/a'>", content_type=None).error == "not-html"


@pytest.mark.parametrize("body", [b"", b"   \n\t"])
def test_empty_body(body: bytes) -> None:
    """An empty or blank body is unparseable."""
    assert run(body) == Extracted(error="unparseable")


def test_bad_kind_and_bad_page_url() -> None:
    """An unknown kind or an unusable page URL is an error, not an exception."""
    assert run(links("/c/a"), kind="hub").error == "bad-kind"
    assert run(links("/c/a"), url="ftp://shop.example.com/").error == "bad-url"


def test_nul_bytes_and_deep_nesting() -> None:
    """NUL bytes are dropped and absurd nesting does not raise."""
    assert run(b'<a href="/c/\x00a">x\x00</a>\x00<a href="/c/b">').lists == [
        "https://shop.example.com/c/a",
        "https://shop.example.com/c/b",
    ]
    deep = "<div>" * 100_000 + '<a href="/c/deep">x</a>' + "</div>" * 100_000
    assert run(deep).error is None
    nested = DETAIL.replace("<body>", "<body>" + "<span>" * 50_000)
    assert run(nested, url="https://shop.example.com/p/1", kind="detail").item


def test_many_links_are_capped() -> None:
    """A page with 200k links is processed up to the default cap without raising."""
    result = run(links(*(f"/c/{i % 20_000}" for i in range(200_000))))
    assert len(result.lists) == 10_000
    assert result.skipped == 190_000


# -- fuzzing ------------------------------------------------------------------------------------------------


def assert_sane(result: Extracted) -> None:
    """Every link is a canonical http(s) URL and the item is JSON-serialisable."""
    assert isinstance(result, Extracted)
    for url in (*result.lists, *result.details):
        assert url.startswith(("http://", "https://"))
        assert canonicalize(url) == url
    json.dumps(result.item)


content_types = s.one_of(
    s.none(),
    s.sampled_from(["text/html", "text/html; charset=utf-8", "text/html; charset=latin-1", "text/html; charset=utf-16",
                    "text/html; charset=bogus", "application/xhtml+xml", "image/png", ";charset=", ""]),
    s.text(max_size=40),
)
hrefs = s.one_of(
    s.text(max_size=60),
    s.sampled_from(["/c/a", "../c/b", "//shop.example.com/c/", "http://blog.example.net/post/1", "#x", "?q=1",
                    "javascript:x", "http://[::1", "http://shop.example.com:99999/", "HTTP://SHOP.EXAMPLE.COM/c/%7e",
                    "/c/%", "\\\\evil", "/p/1", "http://xn--/", "http://a..b/", "/c/" + "x" * 3000]),
)
tags = s.sampled_from(["a", "area", "link", "base", "div", "p", "h1", "span", "ul", "li", "table", "script"])


@s.composite
def markup(draw: s.DrawFn) -> bytes:
    """Random HTML-ish markup: nested tags with random hrefs, text and broken bits."""
    parts = []
    for _ in range(draw(s.integers(0, 30))):
        tag = draw(tags)
        href = draw(hrefs).replace('"', "&quot;")
        parts.append(draw(s.sampled_from([f'<{tag} href="{href}" class="title">', f"</{tag}>", f"<{tag}>"])))
        parts.append(draw(s.text(max_size=20)))
    encoding = draw(s.sampled_from(["utf-8", "latin-1", "utf-16", "cp1252"]))
    return "".join(parts).encode(encoding, "replace")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=s.binary(max_size=2000), content_type=content_types, kind=s.sampled_from(["list", "detail"]))
def test_fuzz_random_bytes(body: bytes, content_type: str | None, kind: str) -> None:
    """Random bytes never raise and give only canonical http(s) URLs."""
    assert_sane(run(body, url="https://shop.example.com/p/1", kind=kind, content_type=content_type))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=markup(),
    content_type=content_types,
    kind=s.sampled_from(["list", "detail"]),
    url=s.sampled_from([PAGE, "https://shop.example.com/p/3", "http://blog.example.net/post/x", "http://x.test/"]),
)
def test_fuzz_html_ish_markup(body: bytes, content_type: str | None, kind: str, url: str) -> None:
    """Random markup with random hrefs never raises and gives only canonical http(s) URLs."""
    assert_sane(run(body, url=url, kind=kind, content_type=content_type))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=markup())
def test_fuzz_link_paths_are_getpaths(body: bytes) -> None:
    """The linear-time paths of large pages are the ones lxml's getpath gives (small pages use getpath)."""
    from spiderd.fetch.decode import parse_html
    from spiderd.fetch.links import _hrefs, _Paths

    root = parse_html(body + b"<!-- x --><p>1</p><p>2</p><!-- y -->", "text/html")
    if root is not None:
        paths, getpath = _Paths(), root.getroottree().getpath
        for element in _hrefs(root, True)[1] + list(root.iter(etree.Element)):
            assert paths(element) == getpath(element)


def test_large_pages_take_linear_time_paths() -> None:
    """A page of 20,000 sibling links, past the budget of lxml's getpath (quadratic there), gets the paths
    getpath would give, from the linear-time _Paths."""
    result = run(links(*(f"/c/{i}" for i in range(20_000))), rules=Rules(RULES.sites, anchors=True))
    assert len(result.list_xpaths) == 10_000 and result.list_xpaths[-1] == "/html/body/a[10000]"


@settings(max_examples=200, deadline=None)
@given(text=s.text(max_size=500), url=s.text(max_size=50))
def test_fuzz_text_bodies_and_page_urls(text: str, url: str) -> None:
    """Arbitrary text bodies and page URLs never raise."""
    assert_sane(run(text.encode("utf-8", "surrogatepass"), url=url))


# -- robots directives in pages and the canonical URL -------------------------------------------------------


def page_with(head: str = "", body: str = "") -> str:
    """A page with ``head`` in its head and ``body`` in its body."""
    return f"<html><head><title>t</title>{head}</head><body><h1 class='title'>T</h1>{body}</body></html>"


ITEM_URL = "https://shop.example.com/p/1"


def test_rel_nofollow_links_are_not_followed() -> None:
    """A link marked rel="nofollow" (with other rel words too, any case) is skipped; the others are kept."""
    body = '<a href="/p/1" rel="nofollow">a</a><a href="/p/2" rel="External NoFollow">b</a><a href="/p/3">c</a>'
    result = run(page_with(body=body))
    assert result.details == ["https://shop.example.com/p/3"] and result.skipped == 2
    assert not result.nofollow


def test_rel_nofollow_followed_when_turned_off() -> None:
    """With obey_nofollow off, rel="nofollow" links are followed like the others."""
    rules = Rules(RULES.sites, page_robots=PageRobots(nofollow=False))
    result = run(page_with(body='<a href="/p/1" rel="nofollow">a</a>'), rules=rules)
    assert result.details == ["https://shop.example.com/p/1"]


@pytest.mark.parametrize("content", ["nofollow", "NOFOLLOW, noarchive", "none", "noindex nofollow"])
def test_meta_robots_nofollow_drops_every_link(content: str) -> None:
    """<meta name="robots" content="nofollow"> (or none): no link of the page is followed."""
    result = run(page_with(f'<meta name="Robots" content="{content}">', '<a href="/p/1">a</a><a href="/c/x">b</a>'))
    assert result.nofollow and result.lists == [] and result.details == []


def test_meta_robots_noindex_gives_no_item_but_keeps_links() -> None:
    """noindex on a detail page: no item (and noindex set, so nothing is stored); links still followed."""
    page = page_with('<meta name="robots" content="noindex">', '<a href="/post/2">n</a>')
    result = run(page, url="http://blog.example.net/post/1", kind="detail")
    assert result.noindex and result.item is None and not result.nofollow and result.error is None
    assert result.details == ["http://blog.example.net/post/2"]


def test_meta_for_our_user_agent_counts_and_others_do_not() -> None:
    """<meta name="spiderd"> speaks to us when our token is one of the rules' agents; googlebot's does not."""
    rules = Rules(RULES.sites, page_robots=PageRobots(agents=("spiderd",)))
    ours = run(page_with('<meta name="spiderd" content="noindex">'), url=ITEM_URL, kind="detail", rules=rules)
    theirs = run(page_with('<meta name="googlebot" content="noindex">'), url=ITEM_URL, kind="detail", rules=rules)
    assert ours.noindex and ours.item is None
    assert not theirs.noindex and theirs.item is not None


def test_meta_robots_ignored_when_turned_off() -> None:
    """With obey_meta_robots off, noindex and nofollow in the page and the header change nothing."""
    rules = Rules(RULES.sites, page_robots=PageRobots(meta=False))
    page = page_with('<meta name="robots" content="none">', '<a href="/c/x">b</a>')
    result = run(page, url=ITEM_URL, kind="detail", rules=rules, robots_tag="noindex")
    assert not result.noindex and result.item is not None


@pytest.mark.parametrize(
    ("header", "noindex", "nofollow"),
    [
        ("noindex", True, False),
        ("NoFollow", False, True),
        ("none", True, True),
        ("noindex, nofollow", True, True),
        ("googlebot: noindex", False, False),
        ("spiderd: noindex", True, False),
        ("googlebot: nofollow\nnoindex", True, False),
        ("googlebot: noindex, spiderd: nofollow", False, True),
        ("unavailable_after: 25 Jun 2010 15:00:00 PST", False, False),
        ("all", False, False),
    ],
)
def test_x_robots_tag(header: str, noindex: bool, nofollow: bool) -> None:
    """The X-Robots-Tag header's words, for every agent or for ours (one header per line)."""
    rules = Rules(RULES.sites, page_robots=PageRobots(agents=("spiderd",)))
    page = page_with(body='<a href="/c/x">b</a>')
    result = run(page, url=ITEM_URL, kind="detail", rules=rules, robots_tag=header)
    assert (result.noindex, result.nofollow) == (noindex, nofollow)
    assert (result.item is None) == noindex


def test_x_robots_tag_noindex_holds_for_pages_that_are_not_html() -> None:
    """A PDF with X-Robots-Tag: noindex is noindex (so the crawler stores nothing of it)."""
    result = run(b"%PDF-1.4", url=ITEM_URL, kind="detail", content_type="application/pdf", robots_tag="noindex")
    assert result.noindex and result.error == "not-html"


def test_canonical_link_makes_the_item_url() -> None:
    """<link rel=canonical> of a detail page (relative, not canonical in form) is the item's url and urlhash."""
    page = page_with('<link rel="canonical" href="//SHOP.example.com:443/p/9#top">')
    result = run(page, url="https://shop.example.com/p/1?session=x", kind="detail")
    canonical = canonicalize("https://shop.example.com/p/9")
    assert result.canonical == canonical
    assert result.item is not None and result.item["url"] == canonical
    assert result.item["urlhash"] == to_signed64(fingerprint(canonical))


def test_links_to_the_canonical_url_are_links_to_the_page() -> None:
    """A detail page that links to its canonical URL does not put that URL in its links (it is this page)."""
    page = page_with('<link rel="canonical" href="/post/9">', '<a href="/post/9">c</a><a href="/post/2">n</a>')
    result = run(page, url="http://blog.example.net/post/1", kind="detail")
    assert result.canonical == "http://blog.example.net/post/9"
    assert result.details == ["http://blog.example.net/post/2"]


@pytest.mark.parametrize(
    "href",
    [
        "http://blog.example.net/post/1",  # another site
        "https://elsewhere.example/p/1",  # off every site
        "/c/shoes",  # a list page
        "/p/1",  # the page itself
        "javascript:void(0)",
        "",
    ],
)
def test_canonical_ignored_off_site_to_a_list_or_to_itself(href: str) -> None:
    """A canonical URL of another site, of no site, of a list page or of the page itself changes nothing."""
    result = run(page_with(f'<link rel="canonical" href="{href}">'), url=ITEM_URL, kind="detail")
    assert result.canonical is None and result.item is not None and result.item["url"] == ITEM_URL


def test_canonical_ignored_on_list_pages_and_when_turned_off() -> None:
    """Only detail pages have a canonical URL, and only while the canonical setting is on."""
    page = page_with('<link rel="canonical" href="/p/9">')
    assert run(page).canonical is None
    rules = Rules(RULES.sites, page_robots=PageRobots(canonical=False))
    result = run(page, url=ITEM_URL, kind="detail", rules=rules)
    assert result.canonical is None and result.item is not None and result.item["url"] == ITEM_URL


def test_page_directives_cross_the_parse_worker_pipe() -> None:
    """The init message carries the PageRobots; an answer carries noindex, nofollow and canonical."""
    import marshal

    from spiderd.fetch.parseworker import answer, extracted_from, init_message, rules_from

    rules = Rules(RULES.sites, page_robots=PageRobots(canonical=False, agents=("spiderd",)))
    rebuilt, max_links = rules_from(marshal.loads(marshal.dumps(init_message(rules))))
    assert rebuilt.page_robots == rules.page_robots
    page = page_with('<link rel="canonical" href="/p/9">').encode()
    request = (1, ITEM_URL, page, "text/html", "detail", 0.0, 200, 0, "spiderd: nofollow")
    got = extracted_from(marshal.loads(marshal.dumps(answer(rebuilt, max_links, request))))
    assert (got.noindex, got.nofollow, got.canonical) == (False, True, None)  # canonical: off in these rules
    assert got.compressed is not None
    request = (2, ITEM_URL, page, "text/html", "detail", 0.0, 200, 0, "noindex")
    got = extracted_from(answer(Rules(RULES.sites), max_links, request))
    assert got.noindex and got.item is None and got.compressed is None  # nothing to store: nothing compressed
