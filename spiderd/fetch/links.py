"""The links of a page: hrefs read in document order, resolved against the page (or its ``<base>``),
canonicalized and classified by the rules, with their anchor text and element path for the linkbase.
Pure, no Twisted; a page of millions of links costs linear time (see :class:`_Paths`)."""

from __future__ import annotations

import functools
import re
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable

from lxml import etree

from spiderd.core.linkinfo import clean_anchor, clean_xpath
from spiderd.core.urls import BadURL, canonicalize

if TYPE_CHECKING:
    from spiderd.fetch.extract import Extracted, Rules

GETPATH_BUDGET = 1_000_000  # links x elements below which lxml's getpath costs at most a few milliseconds
_COUNT_ELEMENTS = etree.XPath("count(//*)")
_TEXT = functools.partial(etree.tostring, method="text", encoding=str, with_tail=False)  # 6x itertext's speed
_SCHEME = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*):")
_TAB_NEWLINE = {9: None, 10: None, 13: None}



HREFS_PER_LINK = 10


def links(root: etree._Element, page: str, rules: Rules, max_links: int, result: Extracted) -> None:
    """The page's links into ``result``: resolved, canonical, classified by the rules (list or detail), each once."""
    hrefs, elements, base_href, nofollow = _hrefs(root, rules.page_robots.nofollow)
    result.skipped += nofollow
    examined = max_links * HREFS_PER_LINK  # junk hrefs (javascript:, mailto:) cannot hide the links after them
    if len(hrefs) > examined:
        result.skipped += len(hrefs) - examined
        del hrefs[examined:]
    resolve = Resolver(_base(page, base_href, rules)).resolve
    lookup = rules._lookup
    seen = {page} if result.canonical is None else {page, result.canonical}  # the canonical URL is this page
    lists, details = result.lists, result.details
    metadata = _LinkMetadata(root, len(hrefs), result) if rules.anchors else None
    skipped = 0
    for index, href in enumerate(hrefs):
        if len(lists) + len(details) >= max_links:
            skipped += len(hrefs) - index
            break
        absolute = resolve(href)
        if absolute is None:
            skipped += 1
            continue
        canonical, kind = lookup(absolute)
        if kind is None:
            skipped += 1
        elif canonical not in seen:
            seen.add(canonical)
            (details if kind == "detail" else lists).append(canonical)
            if metadata is not None:
                metadata.add(kind, elements[index])
    result.skipped += skipped


def _hrefs(root: etree._Element, obey_nofollow: bool) -> tuple[list[str], list[etree._Element], str | None, int]:
    """The hrefs of ``<a>``, ``<area>`` and ``<link rel=next|prev>`` in document order, their elements,
    the first base href, and how many links were left out as ``rel="nofollow"`` (when ``obey_nofollow``)."""
    hrefs: list[str] = []
    elements: list[etree._Element] = []
    base: str | None = None
    nofollow = 0
    for element in root.iter("a", "area", "link", "base"):
        href = element.get("href")
        if href is None:
            continue
        tag = element.tag
        if tag == "base":
            if base is None:
                base = href
        elif tag != "link" or _is_pagination(element):
            if obey_nofollow and _is_nofollow(element):
                nofollow += 1
                continue
            hrefs.append(href)
            elements.append(element)
    return hrefs, elements, base, nofollow


def _is_nofollow(element: etree._Element) -> bool:
    rel = element.get("rel")
    return rel is not None and "nofollow" in rel.lower().split()


class _LinkMetadata:
    """Collects the anchor text and the path of each kept link into an Extracted (for the linkbase)."""

    __slots__ = ("anchors", "path", "xpaths")

    def __init__(self, root: etree._Element, links: int, result: Extracted) -> None:
        self.path = _path_function(root, links)
        self.anchors = {"list": result.list_anchors, "detail": result.detail_anchors}
        self.xpaths = {"list": result.list_xpaths, "detail": result.detail_xpaths}

    def add(self, kind: str, element: etree._Element) -> None:
        self.anchors[kind].append(_anchor(element))
        self.xpaths[kind].append(clean_xpath(self.path(element)))


def _path_function(root: etree._Element, links: int) -> Callable[[etree._Element], str]:
    """lxml's ``getpath`` (fast, in C), unless the page is large enough for its cost to matter: then _Paths.

    ``getpath`` counts an element's siblings again for every element (libxml2's
    xmlGetNodePath), so its cost grows with links x elements: a page of 10,000
    sibling links would cost 100 million steps (a quarter of a second).
    """
    if links * _COUNT_ELEMENTS(root) <= GETPATH_BUDGET:
        return root.getroottree().getpath  # type: ignore[no-any-return]  # lxml is untyped
    return _Paths()


class _Paths:
    """Element paths as ``getpath`` writes them (``/html/body/div[2]/a``), in time linear in the page: each
    parent's children are numbered once and each ancestor's path is kept (slower than ``getpath`` per link)."""

    __slots__ = ("_paths", "_steps")

    def __init__(self) -> None:
        self._paths: dict[etree._Element, str] = {}
        self._steps: dict[etree._Element, str] = {}

    def __call__(self, element: etree._Element) -> str:
        parent = element.getparent()
        if parent is None:
            return f"/{element.tag}"
        base = self._paths.get(parent)
        if base is None:
            base = self._paths[parent] = self(parent)
        step = self._steps.get(element)
        if step is None:
            self._number(parent)
            step = self._steps[element]
        return f"{base}/{step}"

    def _number(self, parent: etree._Element) -> None:
        """The steps of ``parent``'s children: the tag, and the position among siblings of that tag if any."""
        children = list(parent)
        steps = self._steps
        if len(children) == 1:  # an only child (the usual ancestor of a link)
            steps[children[0]] = str(children[0].tag)
            return
        tags = [child.tag for child in children]
        if len(set(tags)) == len(tags):
            steps.update(zip(children, map(str, tags)))
            return
        counts = Counter(tags)
        seen: dict[Any, int] = {}
        for child, tag in zip(children, tags):
            if counts[tag] > 1:
                seen[tag] = position = seen.get(tag, 0) + 1
                steps[child] = f"{tag}[{position}]"
            else:
                steps[child] = str(tag)


def _anchor(element: etree._Element) -> str:
    """The anchor text of a link element: its text (or title, or alt), on one line, cut at MAX_ANCHOR."""
    text = _TEXT(element) if len(element) else element.text
    if not text or text.isspace():
        text = element.get("title") or element.get("alt") or ""
    return clean_anchor(text)


def _is_pagination(element: etree._Element) -> bool:
    rel = (element.get("rel") or "").lower().split()
    return "next" in rel or "prev" in rel


def _base(page: str, base_href: str | None, rules: Rules) -> str:
    """The canonical base URL: ``<base href>`` resolved against the page, or the page."""
    if base_href is None:
        return page
    absolute = Resolver(page).resolve(base_href)
    if absolute is None:
        return page
    try:
        return canonicalize(absolute, rules.max_url_length)
    except BadURL:
        return page


class Resolver:
    """Resolves hrefs against a canonical base; most take a string-concatenation fast path."""

    __slots__ = ("base", "scheme", "origin", "no_query", "directory")

    def __init__(self, base: str) -> None:
        self.base = base
        self.scheme, _, rest = base.partition("://")
        slash = rest.find("/")
        self.origin = base if slash < 0 else f"{self.scheme}://{rest[:slash]}"
        self.no_query = base.partition("?")[0]
        self.directory = self.no_query[: self.no_query.rfind("/") + 1]

    def resolve(self, href: str) -> str | None:
        """The absolute URL of ``href``, or None for fragments and non-HTTP schemes (a skipped link)."""
        href = href.strip()
        if "\n" in href or "\t" in href or "\r" in href:
            href = href.translate(_TAB_NEWLINE)
        if href.startswith(("http://", "https://")):
            return href
        first = href[:1]
        if first == "/":
            return f"{self.scheme}:{href}" if href[1:2] == "/" else self.origin + href
        if not href:
            return self.base
        if first == "#":
            return None
        if first == "?":
            return self.no_query + href
        scheme = _SCHEME.match(href)
        if scheme is not None:
            return href if scheme.group(1).lower() in ("http", "https") else None
        return self.directory + href


def path_depth(canonical: str) -> int:
    """The number of path segments of a canonical URL (``/`` is 0, ``/a/b/`` is 2)."""
    start = canonical.find("/", canonical.index("//") + 2)
    if start < 0:
        return 0
    end = canonical.find("?", start)
    if end < 0:
        end = len(canonical)
    return canonical.count("/", start, end) - (canonical[end - 1] == "/")
