"""Links and items from fetched pages: pure functions of (page, rules), no Twisted.

:class:`Rules` compiles the per-site settings once (regular expressions,
``lxml.etree.XPath`` objects, a host table) and caches link classification;
:func:`extract` turns one page into an :class:`Extracted`.  Hostile input
(binary junk, lying charsets, NUL bytes, deep nesting, millions of links)
never raises: the worst outcome is an ``error`` word on the result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from lxml import etree

from spiderd.core.digest import content_digest
from spiderd.core.rules import HostTable, Site, sites_digest
from spiderd.core.urls import MAX_URL_LENGTH, BadURL, canonicalize, fingerprint, host_of, to_signed64
from spiderd.fetch.decode import is_html, parse_html
from spiderd.fetch.links import Resolver, links, path_depth
from spiderd.fetch.pagerobots import Directives, PageRobots, head_directives

Kind = Literal["list", "detail"]
ITEM_KEYS = frozenset({"url", "urlhash", "status", "fetched_at", "digest", "rendered"})  # an item's own, not fields
MAX_LINKS = 10000
_STRING_VALUE = etree.XPath("string()", smart_strings=False)
_CACHE_SIZE = 16384
_CACHEABLE_URL = 300
_BAD: tuple[str, None] = ("", None)


@dataclass(slots=True)
class Extracted:
    """What one page gave: canonical list and detail links, the item, and what was dropped.

    ``list_anchors`` and ``detail_anchors`` are the anchor texts of ``lists`` and ``details``, item for item,
    when the rules ask for them (else empty): whitespace collapsed, at most MAX_ANCHOR characters, the
    ``title`` or ``alt`` when there is no text.  ``list_xpaths`` and ``detail_xpaths`` are, likewise, the
    paths of the link elements in the document (seed 004's linkinfo ``xpath``), as lxml's ``getpath``
    gives them (``/html/body/div[2]/a[3]``), or "" for a path over MAX_XPATH characters.
    ``skipped`` counts links dropped as bad, non-HTTP, fragment-only, off-site, unclassified, marked
    ``rel="nofollow"`` or beyond ``max_links`` (duplicates and links to the page itself are not counted).  ``error`` is None or one
    word: ``not-html``, ``unparseable``, ``bad-url``, ``bad-kind``, ``off-site`` (a detail page no site
    allows) or ``internal-error``.  ``noindex``, ``nofollow`` and ``canonical`` are the page's own robots
    directives and canonical URL, as :class:`PageRobots` says to honour them (see :func:`extract`).
    ``digest`` is :func:`~spiderd.core.digest.content_digest` of the body, for every page that parsed as
    HTML (the item's ``digest`` and the stored page's column).  ``line`` is the item's JSON line as a parse worker
    encoded it (inline parsing leaves it None): whoever changes ``item`` after the parse sets it back to None.
    """

    lists: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    item: dict[str, Any] | None = None
    skipped: int = 0
    error: str | None = None
    list_anchors: list[str] = field(default_factory=list)
    detail_anchors: list[str] = field(default_factory=list)
    list_xpaths: list[str] = field(default_factory=list)
    detail_xpaths: list[str] = field(default_factory=list)
    noindex: bool = False  # the page's robots directives (meta or X-Robots-Tag) forbid its item and stored page
    nofollow: bool = False  # ... or forbid following any of its links (lists and details are then empty)
    canonical: str | None = None  # a detail page's <link rel=canonical> (the item's url), when another URL
    compressed: bytes | None = None  # the page XZ-compressed for the store, when a parse worker was asked to
    digest: str | None = None  # the body's content digest (spiderd.core.digest), for a parsed HTML page
    line: str | None = None  # the item's JSON line (spiderd.core.itemline.json_line), when a parse worker encoded it


def gave_nothing(lists: list[str], details: list[str], item: dict[str, Any] | None) -> bool:
    """True when a parsed page gave no link and no field value (its content may be written by JavaScript)."""
    if lists or details:
        return False
    return not any(value not in (None, "", []) for name, value in (item or {}).items() if name not in ITEM_KEYS)


@dataclass(frozen=True, slots=True)
class _CompiledSite:
    site: Site
    list_res: tuple[re.Pattern[str], ...]
    detail_res: tuple[re.Pattern[str], ...]
    fields: tuple[tuple[str, etree.XPath, bool], ...]


class Rules:
    """The sites' rules, compiled once; classifications are cached (bounded).

    A node's rules change at run time (a reload, the sites API) with :meth:`replace`: every part holding this
    object sees the new sites at once, and ``digest`` names the version in force.  :meth:`with_sites` gives a
    separate Rules of other sites under the same limits (a worker job's own version, kept while it runs).
    """

    def __init__(
        self, sites: tuple[Site, ...], max_url_length: int = MAX_URL_LENGTH, max_path_depth: int = 32,
        anchors: bool = False, page_robots: PageRobots = PageRobots(),
    ) -> None:
        self.page_robots = page_robots
        self.robot_names = frozenset(("robots", *page_robots.agents))  # meta names and X-Robots-Tag agents for us
        self.anchors = anchors  # collect anchor texts and paths (for the linkbase): ~1.7x the time of a list page
        self.max_url_length = max_url_length
        self.max_path_depth = max_path_depth
        self.replace(sites)

    def replace(self, sites: tuple[Site, ...]) -> None:
        """Take ``sites`` in place of the current ones (compiled first: a bad pattern leaves these as they are)."""
        hosts = HostTable((host, compiled) for compiled in map(_compile_site, sites)
                          for host in compiled.site.allowed_hosts)
        self.sites: tuple[Site, ...] = tuple(sites)
        self.digest = sites_digest(sites)
        self._hosts = hosts
        self._link_cache: dict[str, tuple[str, str | None]] = {}

    def with_sites(self, sites: tuple[Site, ...]) -> Rules:
        """A separate Rules of ``sites`` with these limits and page directives."""
        return Rules(sites, self.max_url_length, self.max_path_depth, self.anchors, self.page_robots)

    def site_for(self, url: str) -> Site | None:
        """The site allowing ``url``'s host (exact or a subdomain of an entry), or None."""
        try:
            canonical = canonicalize(url, self.max_url_length)
        except BadURL:
            return None
        return self.site_for_canonical(canonical)

    def site_for_canonical(self, canonical: str) -> Site | None:
        """``site_for`` of a URL canonical already (what ``canonicalize`` gave): not canonicalized again (None past
        ``max_url_length``, as ``site_for``)."""
        if len(canonical) > self.max_url_length:
            return None
        compiled = self._compiled_for(canonical)
        return compiled.site if compiled is not None else None

    def classify(self, url: str) -> Kind | None:
        """``"detail"``, ``"list"`` or None (off-site, unmatched, bad or too deep)."""
        return self._lookup(url)[1]  # type: ignore[return-value]  # _lookup's kinds are Kind's

    def lookup(self, url: str) -> tuple[str, str | None]:
        """(canonical URL, kind) of an absolute URL exactly as a page's links are classified (sitemaps take
        their URLs so); the kind is None when the link would be skipped, ``("", None)`` for a bad URL."""
        return self._lookup(url)

    def _lookup(self, absolute: str) -> tuple[str, str | None]:
        """(canonical, kind) of an absolute URL; ``("", None)`` when it is bad."""
        hit = self._link_cache.get(absolute)
        if hit is not None:
            return hit
        try:
            canonical = canonicalize(absolute, self.max_url_length)
        except BadURL:
            hit = _BAD
        else:
            hit = (canonical, self._classify_canonical(canonical))
        if len(absolute) <= _CACHEABLE_URL:
            if len(self._link_cache) >= _CACHE_SIZE:
                self._link_cache.clear()
            self._link_cache[absolute] = hit
        return hit

    def _classify_canonical(self, canonical: str) -> str | None:
        compiled = self._compiled_for(canonical)
        if compiled is None or path_depth(canonical) > self.max_path_depth:
            return None
        if any(r.search(canonical) for r in compiled.detail_res):
            return "detail"
        if not compiled.list_res or any(r.search(canonical) for r in compiled.list_res):
            return "list"
        return None

    def _compiled_for(self, canonical: str) -> _CompiledSite | None:
        host = host_of(canonical)
        if not host.endswith("]") and ":" in host:
            host = host.rpartition(":")[0]
        return self._hosts.get(host)


def extract(
    url: str,
    body: bytes,
    content_type: str | None,
    kind: str,
    fetched_at: float,
    status: int,
    rules: Rules,
    max_links: int = MAX_LINKS,
    robots_tag: str | None = None,
) -> Extracted:
    """Links (list pages, and detail pages whose site follows them) and the item (detail pages) of one page.

    ``robots_tag`` is the response's X-Robots-Tag (several headers one per line).  With the page's
    ``<meta name="robots">`` it can say ``noindex`` (no item: ``noindex`` set), ``nofollow`` (no links)
    or ``none`` (both), when the rules honour them; a header's ``noindex`` holds for any content type.
    """
    try:
        header = Directives.of_header(robots_tag, rules.robot_names) if robots_tag and rules.page_robots.meta else None
        if header is not None and header.noindex and header.nofollow:
            return Extracted(noindex=True, nofollow=True)  # nothing of the page is used: no need to parse it
        result = _extract(url, body, content_type, kind, fetched_at, status, rules, max_links, header)
    except Exception:  # never let a page take the caller down
        return Extracted(error="internal-error")
    if header is not None and header.noindex and not result.noindex:
        result.noindex, result.item, result.canonical = True, None, None
    return result


def _extract(
    url: str,
    body: bytes,
    content_type: str | None,
    kind: str,
    fetched_at: float,
    status: int,
    rules: Rules,
    max_links: int,
    header: Directives | None = None,
) -> Extracted:
    if kind not in ("list", "detail"):
        return Extracted(error="bad-kind")
    if not is_html(content_type, body):
        return Extracted(error="not-html")
    try:
        page = canonicalize(url, rules.max_url_length)
    except BadURL:
        return Extracted(error="bad-url")
    root = parse_html(body, content_type)
    if root is None:
        return Extracted(error="unparseable")
    result = Extracted(digest=content_digest(body))
    compiled = rules._compiled_for(page)
    head = head_directives(root, rules.page_robots, rules.robot_names, kind)
    if header is not None:
        head.noindex, head.nofollow = head.noindex or header.noindex, head.nofollow or header.nofollow
    result.noindex, result.nofollow = head.noindex, head.nofollow
    if kind == "detail":
        if compiled is None:
            result.error = "off-site"
            return result
        if not head.noindex:
            result.canonical = _canonical(head.canonical, page, rules, compiled)
            result.item = _item(root, compiled, result.canonical or page, status, fetched_at, result.digest)
        if not compiled.site.follow_detail_links:
            return result
    if not head.nofollow:
        links(root, page, rules, max_links, result)
    return result


# -- the canonical URL ----------------------------------------------------------------------------------


def _canonical(href: str | None, page: str, rules: Rules, compiled: _CompiledSite | None) -> str | None:
    """The canonical URL of a detail page's ``<link rel=canonical href>``: resolved against the page,
    canonicalized, of the page's own site and a detail URL there; None otherwise, or when it is the page."""
    if not href:
        return None
    absolute = Resolver(page).resolve(href)
    if absolute is None:
        return None
    canonical, kind = rules._lookup(absolute)
    if kind != "detail" or canonical == page or rules._compiled_for(canonical) is not compiled:
        return None
    return canonical


# -- items --------------------------------------------------------------------------------------------------


def _item(root: etree._Element, compiled: _CompiledSite, page: str, status: int, fetched_at: float,
          digest: str | None) -> dict[str, Any]:
    """The site's fields, then url, urlhash, status, fetched_at and digest (which win over fields of those names).

    ``urlhash`` is the fingerprint as a signed 64-bit integer, so Spark reads it as a BIGINT (see spiderd.feed.schema).
    """
    item: dict[str, Any] = {name: _field(root, xpath, every) for name, xpath, every in compiled.fields}
    item.update(url=page, urlhash=to_signed64(fingerprint(page)), status=status, fetched_at=fetched_at, digest=digest)
    return item


def _field(root: etree._Element, xpath: etree.XPath, every: bool) -> str | list[str] | None:
    """All non-blank values (``all``), else the first non-blank value or None."""
    try:
        found = xpath(root)
    except (etree.XPathError, RecursionError, ValueError):
        return [] if every else None
    values = (v for v in map(_text, found if isinstance(found, list) else [found]) if v)
    if every:
        return list(values)
    return next(values, None)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, etree._Element):
        return str(_STRING_VALUE(value)).strip()
    return str(value).strip()


# -- compiling ----------------------------------------------------------------------------------------------


def _compile_site(site: Site) -> _CompiledSite:
    return _CompiledSite(
        site=site,
        list_res=tuple(re.compile(p) for p in site.list_urls),
        detail_res=tuple(re.compile(p) for p in site.detail_urls),
        fields=tuple((f.name, _compile_xpath(f.xpath), f.all) for f in site.fields),
    )


def _compile_xpath(xpath: str) -> etree.XPath:
    if "has-class(" in xpath:
        from parsel import xpathfuncs  # parsel's CSS translation can emit has-class()

        xpathfuncs.setup()
    return etree.XPath(xpath, smart_strings=False)
