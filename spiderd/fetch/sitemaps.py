"""Sitemaps (sitemaps.org): parsed incrementally and safely, their URLs filtered as links are; no Twisted, no network.

A body is a ``<urlset>``, a ``<sitemapindex>`` or a text sitemap (one URL a line), gzip-compressed or not
(told by the magic bytes, whatever the name or the Content-Type says).  The limits are the protocol's: at most
50,000 entries and 50 MB (52,428,800 bytes) uncompressed per file, both lower if configured; past either, the
entries read so far are kept and ``error`` says which limit ended the file.  The gzip stream is inflated 64 KiB
at a time into lxml's pull parser, so a gzip bomb costs ``max_size`` bytes of output at most and the document is
never whole in memory; each entry's element is freed once read.

Hostile XML: the parser resolves no entity, loads no DTD and touches no network (``resolve_entities=False``,
``load_dtd=False``, ``no_network=True``, ``huge_tree`` off, so libxml2's own amplification limits hold); a
document with a DOCTYPE is refused outright (``error`` "doctype": sitemaps have none, and an entity bomb needs
one).  Broken XML is read in libxml2's recover mode: the entries before the damage (and after, when it can) are
kept.  Entry names are matched without their namespace (many sitemaps get it wrong).

:func:`read` is what the crawl calls (on a thread of its own: a 50 MB file takes a second or so): the parse, then
:func:`select`, which keeps a page URL only if it is on the host of the sitemap or of the robots.txt that named
it (the protocol's rule) and if the ``[[sites]]`` rules make it a list or detail link, canonicalised exactly as
links are (spiderd.fetch.extract.Rules).
"""

from __future__ import annotations

import calendar
import datetime
import re
import zlib
from dataclasses import dataclass, field
from typing import Iterator

from lxml import etree

from spiderd.core.rules import SITEMAP_MAX_SIZE, SITEMAP_MAX_URLS
from spiderd.core.urls import BadURL, canonicalize, host_of
from spiderd.fetch.extract import Rules

MAX_URLS = SITEMAP_MAX_URLS  # entries per file (the protocol's limit)
MAX_SIZE = SITEMAP_MAX_SIZE  # uncompressed bytes per file (the protocol's 52,428,800)
CHUNK = 64 * 1024
GZIP_MAGIC = b"\x1f\x8b"
MAX_LOC = 8192  # longer <loc> texts are skipped without a look (the URL length limit is far below)
_BOM = b"\xef\xbb\xbf"
_KINDS = {"urlset": "url", "sitemapindex": "sitemap"}  # root -> its entries' element
_W3C = re.compile(
    r"(\d{4})(?:-(\d\d)(?:-(\d\d)(?:[Tt ](\d\d):(\d\d)(?::(\d\d)(?:\.\d+)?)?\s*(Z|z|[+-]\d\d:?\d\d)?)?)?)?"
)


@dataclass(slots=True)
class Sitemap:
    """One parsed file: its kind, its entries as ``(loc, lastmod)`` (lastmod in epoch seconds, or None).

    ``kind`` is "urlset", "sitemapindex", "text", or None (no sitemap: an HTML page, a feed, an empty body).
    ``error`` is None or one word: "too-many" (more than ``max_urls`` entries: the first are kept),
    "too-large" (more than ``max_size`` bytes uncompressed: the entries in them are kept), "bad-gzip" (a
    damaged or cut gzip stream: the entries before the damage are kept), "doctype" (refused), "unparseable".
    """

    kind: str | None = None
    entries: list[tuple[str, float | None]] = field(default_factory=list)
    error: str | None = None
    size: int = 0  # uncompressed bytes read


@dataclass(slots=True)
class Found:
    """What one sitemap file gave the crawl: canonical page URLs by kind, or the index's sitemaps.

    ``changed_lists`` and ``changed_details`` are the URLs whose lastmod is later than the ``since`` given
    to :func:`read` (to queue again even if done); the others are in ``lists`` and ``details``.  ``skipped``
    counts entries dropped: bad or non-HTTP URLs, URLs of another host, URLs the site rules do not take.
    """

    kind: str | None = None
    lists: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    changed_lists: list[str] = field(default_factory=list)
    changed_details: list[str] = field(default_factory=list)
    sitemaps: list[str] = field(default_factory=list)
    entries: int = 0
    skipped: int = 0
    error: str | None = None

    @property
    def urls(self) -> int:
        """Page URLs taken."""
        return len(self.lists) + len(self.details) + len(self.changed_lists) + len(self.changed_details)


class _TooLarge(Exception):
    pass


class _BadGzip(Exception):
    pass


def parse(body: bytes, max_urls: int = MAX_URLS, max_size: int = MAX_SIZE) -> Sitemap:
    """The kind and entries of one sitemap file (see :class:`Sitemap`); never raises on hostile input."""
    result = Sitemap()
    chunks = _chunks(body, max_size, result)
    try:
        first = next(chunks, b"")
        while first.strip() == b"" and first:  # a body of blank lines then content: decide on the content
            first = next(chunks, b"")
        head = first.lstrip()
        if head.startswith(_BOM):
            head = head[len(_BOM):].lstrip()
        if not head:
            return result
        if head.startswith(b"<"):
            _parse_xml(head, chunks, max_urls, result)
        else:
            _parse_text(head, chunks, max_urls, result)
    except _TooLarge:
        result.error = "too-large"
    except _BadGzip:
        result.error = "bad-gzip"
    except (etree.Error, ValueError):
        result.error = result.error or "unparseable"
    return result


def _chunks(body: bytes, limit: int, result: Sitemap) -> Iterator[bytes]:
    """The uncompressed body in pieces of at most CHUNK bytes; _TooLarge past ``limit``, _BadGzip if damaged."""
    if body[:2] != GZIP_MAGIC:
        for start in range(0, min(len(body), limit), CHUNK):
            piece = body[start:min(start + CHUNK, limit)]
            result.size += len(piece)
            yield piece
        if len(body) > limit:
            raise _TooLarge()
        return
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    data = body
    while True:
        try:
            piece = inflater.decompress(data, CHUNK)
        except zlib.error:
            raise _BadGzip() from None
        data = inflater.unconsumed_tail
        if piece:
            room = limit - result.size
            result.size += len(piece)
            if result.size > limit:
                result.size = limit
                yield piece[:room]
                raise _TooLarge()
            yield piece
        if inflater.eof or (not data and not piece):
            break
    if not inflater.eof:
        raise _BadGzip()


def _parse_xml(first: bytes, chunks: Iterator[bytes], max_urls: int, result: Sitemap) -> None:
    parser = etree.XMLPullParser(
        events=("start", "end"), resolve_entities=False, load_dtd=False, no_network=True, huge_tree=False,
        recover=True, remove_comments=True, remove_pis=True,
    )
    state = _XmlState(max_urls, result)
    parser.feed(first)
    if state.read(parser.read_events()):
        return
    for piece in chunks:
        parser.feed(piece)
        if state.read(parser.read_events()):
            return
    parser.close()
    state.read(parser.read_events())


class _XmlState:
    """Walks the pull parser's events: the root tells the kind, each entry element gives (loc, lastmod)."""

    def __init__(self, max_urls: int, result: Sitemap) -> None:
        self._max = max_urls
        self._result = result
        self._entry: str | None = None  # the entries' local name once the root is known
        self._depth = 0
        self._loc: str | None = None
        self._lastmod: str | None = None

    def read(self, events: Iterator[tuple[str, etree._Element]]) -> bool:
        """Handle ``events``; True when the file is over for us (not a sitemap, refused, or full)."""
        result = self._result
        for event, element in events:
            if event == "start":
                self._depth += 1
                if self._depth == 1 and self._root(element):
                    return True
                continue
            self._depth -= 1
            if self._entry is None:
                continue
            name = _local(element.tag)
            if self._depth == 2 and name == "loc":
                self._loc = element.text
            elif self._depth == 2 and name == "lastmod":
                self._lastmod = element.text
            elif self._depth == 1:
                if name == self._entry and self._loc:
                    if len(result.entries) >= self._max:
                        result.error = "too-many"
                        return True
                    loc = self._loc.strip()
                    if len(loc) <= MAX_LOC:
                        result.entries.append((loc, parse_lastmod(self._lastmod)))
                self._loc = self._lastmod = None
                _free(element)
        return False

    def _root(self, element: etree._Element) -> bool:
        """Take the kind from the root; True (stop) if the file is no sitemap or has a DOCTYPE."""
        info = element.getroottree().docinfo
        if info.doctype or info.internalDTD is not None:
            self._result.error = "doctype"
            return True
        kind = _local(element.tag)
        if kind not in _KINDS:
            return True
        self._result.kind = kind
        self._entry = _KINDS[kind]
        return False


def _free(element: etree._Element) -> None:
    """Drop an entry that was read, and the entries before it, from the tree being built."""
    element.clear()
    parent = element.getparent()
    if parent is not None:
        while element.getprevious() is not None:
            del parent[0]


def _local(tag: object) -> str:
    """An element's name without its namespace ("" for comments and the like)."""
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


def _parse_text(first: bytes, chunks: Iterator[bytes], max_urls: int, result: Sitemap) -> None:
    """A text sitemap: one URL a line (UTF-8); lines that are not http(s) URLs are left out."""
    result.kind = "text"
    rest = b""
    for piece in _prepend(first, chunks):
        lines = (rest + piece).split(b"\n")
        rest = lines.pop()
        if _text_lines(lines, max_urls, result):
            return
    _text_lines([rest], max_urls, result)


def _prepend(first: bytes, chunks: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from chunks


def _text_lines(lines: list[bytes], max_urls: int, result: Sitemap) -> bool:
    for raw in lines:
        line = raw.strip().lstrip(_BOM).decode("utf-8", "replace")
        if not line.lower().startswith(("http://", "https://")) or len(line) > MAX_LOC:
            continue
        if len(result.entries) >= max_urls:
            result.error = "too-many"
            return True
        result.entries.append((line, None))
    return False


def parse_lastmod(text: str | None) -> float | None:
    """A W3C datetime (``2026-01-31``, ``2026-01-31T10:00:00+02:00``, ...) in epoch seconds; None if absent or bad.

    A date alone is its midnight UTC, a time without a zone is UTC."""
    if not text:
        return None
    match = _W3C.fullmatch(text.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, zone = match.groups()
    try:
        moment = datetime.datetime(int(year), int(month or 1), int(day or 1), int(hour or 0), int(minute or 0),
                                   int(second or 0))
    except ValueError:
        return None
    offset = 0
    if zone and zone not in "Zz":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        offset = sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return float(calendar.timegm(moment.timetuple()) - offset)


def select(sitemap: Sitemap, sitemap_url: str, origin_host: str, rules: Rules, since: float | None = None) -> Found:
    """The crawl's part of a parsed file: page URLs that the site rules take, or an index's sitemap URLs.

    A page URL is kept if it is on ``origin_host`` (the host whose robots.txt named the sitemap, or where a
    configured path was tried) or on the sitemap's own host, and ``rules.lookup`` classifies it (list or
    detail): bad, non-HTTP, off-site, unclassified and too deep URLs are skipped as links are.  A sitemap URL
    of an index is kept if the rules allow its host.  ``since`` (or None): URLs whose lastmod is later go to
    the ``changed_`` lists.
    """
    found = Found(kind=sitemap.kind, entries=len(sitemap.entries), error=sitemap.error)
    lookup = rules.lookup
    if sitemap.kind == "sitemapindex":
        seen_maps: set[str] = set()
        for loc, _ in sitemap.entries:
            url = _canonical(loc, rules)
            if url is None or rules.site_for(url) is None:
                found.skipped += 1
            elif url not in seen_maps:
                seen_maps.add(url)
                found.sitemaps.append(url)
        return found
    hosts = {origin_host, _host(sitemap_url)}
    seen: set[str] = set()
    for loc, lastmod in sitemap.entries:
        if not loc[:8].lower().startswith(("http://", "https://")):
            found.skipped += 1
            continue
        canonical, kind = lookup(loc)
        if kind is None or host_of(canonical) not in hosts:
            found.skipped += 1
            continue
        if canonical in seen:
            continue
        seen.add(canonical)
        changed = since is not None and lastmod is not None and lastmod > since
        if kind == "detail":
            (found.changed_details if changed else found.details).append(canonical)
        else:
            (found.changed_lists if changed else found.lists).append(canonical)
    return found


def read(body: bytes, sitemap_url: str, origin_host: str, rules: Rules, since: float | None = None,
         max_urls: int = MAX_URLS, max_size: int = MAX_SIZE) -> Found:
    """:func:`parse`, then :func:`select`: one fetched sitemap file as the crawl takes it."""
    return select(parse(body, max_urls, max_size), sitemap_url, origin_host, rules, since)


def _canonical(loc: str, rules: Rules) -> str | None:
    if not loc[:8].lower().startswith(("http://", "https://")):
        return None
    try:
        return canonicalize(loc, rules.max_url_length)
    except BadURL:
        return None


def _host(url: str) -> str:
    try:
        return host_of(canonicalize(url))
    except BadURL:
        return ""
