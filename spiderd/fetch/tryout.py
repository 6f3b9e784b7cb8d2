"""The template tester's report on one fetched page and one site's rules: pure, no Twisted.

:func:`report` gives the item as the crawl would extract it (:func:`~spiderd.fetch.extract.extract`), each field
selector's matches (their count and first values), the page's links split into list, detail and ignored with the
rule that decided each, and warnings (a selector that matched nothing, a field holding markup).  The node runs it in a
child process of its own (``python -m spiderd.fetch.tryout``, a marshal request on stdin, JSON on stdout) that it
kills at a deadline, so no draft's regular expression or XPath can hold the node, however long it backtracks.
"""

from __future__ import annotations

import dataclasses
import json
import marshal
import re
import sys
from typing import Any

from lxml import etree

from spiderd.core.rules import Field, Site
from spiderd.core.urls import BadURL, canonicalize
from spiderd.fetch.decode import is_html, parse_html
from spiderd.fetch.extract import ITEM_KEYS, Rules, extract
from spiderd.fetch.links import Resolver, _hrefs, path_depth

FIRST = 5  # values shown per selector
MAX_LINKS = 200  # links listed per kind (all are counted)
MAX_VALUE = 300  # characters of a value shown
_MARKUP = re.compile(r"<\s*/?\s*[A-Za-z][A-Za-z0-9-]*(\s[^<>]*)?/?>")
_STRING = etree.XPath("string()", smart_strings=False)


def report(url: str, body: bytes, content_type: str | None, site: Site, max_url_length: int,
           max_path_depth: int) -> dict[str, Any]:
    """The tester's answer for ``body`` (fetched from ``url``) and the rules of ``site``."""
    rules = Rules((site,), max_url_length, max_path_depth)
    warnings: list[str] = []
    try:
        page = canonicalize(url, max_url_length)
    except BadURL as e:
        return {"error": f"bad URL: {e.reason}", "warnings": []}
    if rules.site_for(page) is None:
        warnings.append(f"site {site.name!r} does not allow the host of {page} (allowed_hosts)")
    root = parse_html(body, content_type) if is_html(content_type, body) else None
    if root is None:
        return {"page_kind": None, "fields": {}, "selectors": {}, "links": _no_links(),
                "warnings": warnings + ["the page is not HTML (or cannot be parsed): nothing to extract"]}
    kind = rules.classify(page)
    if kind != "detail":
        warnings.append(f"the page is a {kind or 'skipped'} page by the rules: the crawl makes no item of it")
    extracted = extract(page, body, content_type, "detail", 0.0, 200, rules)
    fields = {k: v for k, v in (extracted.item or {}).items() if k not in ITEM_KEYS}
    selectors = {f.name: _selector(root, f, warnings) for f in site.fields}
    for name, value in fields.items():
        if any(_MARKUP.search(v) for v in (value if isinstance(value, list) else [value or ""])):
            warnings.append(f"field {name!r} holds markup (select its text: ::text or text())")
    return {"page_kind": kind, "fields": fields, "selectors": selectors, "links": _links(root, page, rules),
            "warnings": warnings}


def _selector(root: etree._Element, field: Field, warnings: list[str]) -> dict[str, Any]:
    try:
        found = etree.XPath(field.xpath, smart_strings=False)(root)
    except (etree.XPathError, ValueError) as e:
        warnings.append(f"field {field.name!r}: the selector failed: {e}")
        return {"xpath": field.xpath, "count": 0, "first": []}
    matches = found if isinstance(found, list) else [found]
    values = [_short(_text(m)) for m in matches[:FIRST]]
    if not matches or not any(values):
        warnings.append(f"field {field.name!r}: the selector matched nothing")
    return {"xpath": field.xpath, "count": len(matches), "first": values}


def _links(root: etree._Element, page: str, rules: Rules) -> dict[str, Any]:
    """Each link of the page once: list, detail or ignored, with the rule (or the reason) that decided it."""
    hrefs, _, base, _ = _hrefs(root, False)
    resolve = Resolver(page if base is None else (Resolver(page).resolve(base) or page)).resolve
    out = _no_links()
    seen: set[str] = set()
    compiled = rules._compiled_for(page)
    for href in hrefs:
        absolute = resolve(href)
        if absolute is None:
            continue
        canonical, kind = rules.lookup(absolute)
        key = canonical or absolute
        if key in seen or key == page:
            continue
        seen.add(key)
        which = kind or "ignored"
        out["counts"][which] += 1
        if len(out[which]) < MAX_LINKS:
            out[which].append({"url": key, "rule": _rule(rules, canonical, kind, compiled)})
    return out


def _rule(rules: Rules, canonical: str, kind: str | None, compiled: Any) -> str:
    """The rule that made a link what it is: the pattern that matched, or why it is skipped."""
    if not canonical:
        return "not a valid URL"
    target = rules._compiled_for(canonical)
    if target is None:
        return "off-site: no allowed_hosts entry"
    if path_depth(canonical) > rules.max_path_depth:
        return "deeper than pool.max_path_depth"
    for pattern in target.detail_res:
        if pattern.search(canonical):
            return f"detail_urls {pattern.pattern!r}"
    for pattern in target.list_res:
        if pattern.search(canonical):
            return f"list_urls {pattern.pattern!r}"
    if kind == "list":
        return "no list_urls: every allowed URL is a list page"
    return "matches no list_urls or detail_urls"


def _no_links() -> dict[str, Any]:
    return {"list": [], "detail": [], "ignored": [], "counts": {"list": 0, "detail": 0, "ignored": 0}}


def _text(value: Any) -> str:
    if isinstance(value, etree._Element):
        return str(_STRING(value)).strip()
    return str(value).strip()


def _short(text: str) -> str:
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE] + "..."


def request_message(url: str, body: bytes, content_type: str | None, site: Site, max_url_length: int,
                    max_path_depth: int) -> bytes:
    """The child's request (marshal: the same interpreter is on both ends)."""
    return marshal.dumps((url, body, content_type, dataclasses.asdict(site), max_url_length, max_path_depth))


def main() -> int:
    """Read one request on stdin, write its report as JSON on stdout."""
    url, body, content_type, plain, max_url_length, max_path_depth = marshal.loads(sys.stdin.buffer.read())
    site = Site(**{**plain, "fields": tuple(Field(**f) for f in plain["fields"])})
    answer = report(url, body, content_type, site, max_url_length, max_path_depth)
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
