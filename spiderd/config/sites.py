"""The ``[[sites]]`` tables of the configuration, validated into :class:`~spiderd.core.rules.Site` rules.

Hosts are lowercased, URL patterns compiled once to prove them, and each field's selector compiled to an XPath
(``css:`` selectors translated) and evaluated once against a probe page, so a bad rule is one line at load.
"""

from __future__ import annotations

import re
import re._constants as sre_constants  # the parser Python's re compiles with (3.11+)
import re._parser as sre_parse
from typing import Any

from lxml import etree

from spiderd.config.convert import ConfigError, convert, strings
from spiderd.config.schema import SITE_KEYS
from spiderd.core.proxyurl import ProxyURL
from spiderd.core.rules import Field, Site
from spiderd.core.urls import canonicalize


def load_sites(value: Any, source: str, labels: list[str] | None = None) -> tuple[Site, ...]:
    """The ``[[sites]]`` array of tables as Sites; ConfigError naming ``sites[i].key`` (or the table's label, one
    per table: where it comes from) otherwise.  Two sites of one name are refused (the sites API names them)."""
    if not isinstance(value, list):
        raise ConfigError(f"{source}: sites: expected an array of tables ([[sites]])")
    labels = labels or [f"{source}: sites[{i}]" for i in range(len(value))]
    sites = tuple(_site(table, label) for table, label in zip(value, labels))
    seen: dict[str, str] = {}
    for site, label in zip(sites, labels):
        if site.name in seen:
            raise ConfigError(f"{label}.name: {site.name!r} is the name of {seen[site.name]} too")
        seen[site.name] = label
    return sites


def _site(table: Any, where: str) -> Site:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table")
    for key in table:
        if key not in SITE_KEYS:
            raise ConfigError(f"{where}.{key}: unknown key (known: {', '.join(sorted(SITE_KEYS))})")
    name = convert("str", table.get("name", ""), f"{where}.name") or where
    try:
        hosts = tuple(h.lower() for h in strings(table.get("allowed_hosts", [])))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}.allowed_hosts: {e}") from None
    if not hosts:
        raise ConfigError(f"{where}.allowed_hosts: at least one host is needed")
    return Site(
        name=name,
        allowed_hosts=hosts,
        list_urls=_regexes(table.get("list_urls", []), f"{where}.list_urls"),
        detail_urls=_regexes(table.get("detail_urls", []), f"{where}.detail_urls"),
        fields=_fields(table.get("fields", {}), f"{where}.fields"),
        follow_detail_links=convert("bool", table.get("follow_detail_links", False), f"{where}.follow_detail_links"),
        recrawl_list=convert("non_negative", table.get("recrawl_list", 0), f"{where}.recrawl_list"),
        recrawl_detail=convert("non_negative", table.get("recrawl_detail", 0), f"{where}.recrawl_detail"),
        headers=_headers(table.get("headers", {}), f"{where}.headers"),
        proxy=_proxy(table.get("proxy", ""), f"{where}.proxy"),
        cookies=convert("bool", table.get("cookies", False), f"{where}.cookies"),
        max_hops=convert("max_hops", table.get("max_hops", 0), f"{where}.max_hops"),
        start_urls=_urls(table.get("start_urls", []), f"{where}.start_urls"),
        **_render(table, where),
    )


RENDER_MODES = ("never", "always", "auto")


def _render(table: dict[str, Any], where: str) -> dict[str, Any]:
    """The ``render``, ``render_wait`` and ``render_hosts`` keys of a site (a bad mode or selector: ConfigError)."""
    mode = convert("str", table.get("render", "never"), f"{where}.render")
    if mode not in RENDER_MODES:
        raise ConfigError(f"{where}.render: expected one of {', '.join(RENDER_MODES)}, got {mode!r}")
    wait = convert("str", table.get("render_wait", ""), f"{where}.render_wait").strip()
    if wait:
        _compile_selector("css:" + wait, f"{where}.render_wait")
    try:
        hosts = tuple(h.lower() for h in strings(table.get("render_hosts", [])))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}.render_hosts: {e}") from None
    return {"render": mode, "render_wait": wait, "render_hosts": hosts}


def _urls(value: Any, where: str) -> tuple[str, ...]:
    """A list of absolute http(s) URLs (a worker checks at each job that they are the site's)."""
    try:
        urls = strings(value)
        for url in urls:
            canonicalize(url)
    except (TypeError, ValueError) as e:  # a BadURL too: its reason and the URL, its password redacted
        raise ConfigError(f"{where}: {e}") from None
    return urls


# Headers a site may not set: hop-by-hop ones (RFC 9110 7.6.1), the framing and the host (HTTP/1.1 sets them
# from the URL and the body), and those the fetcher writes itself (its agent, the encodings it can decode, the
# conditional GET's validators).
FORBIDDEN_HEADERS = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length",
    "user-agent", "accept-encoding", "if-none-match", "if-modified-since",
})
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # a header name (RFC 9110 5.1)


def _proxy(value: Any, where: str) -> str:
    """"" (none) or ``http://[user:pass@]host:port``; the errors show it with its password redacted."""
    text = str(convert("str", value, where))
    if text:
        try:
            ProxyURL.parse(text)
        except ValueError as e:
            raise ConfigError(f"{where}: {e}") from None
    return text


def _headers(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    """A ``headers = {Name = "value"}`` table as (name, value) pairs; a bad or forbidden name is a ConfigError."""
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a table of Header-Name = \"value\"")
    result = []
    for name, text in value.items():
        here = f"{where}.{name}"
        if not _TOKEN.fullmatch(name):
            raise ConfigError(f"{here}: not a valid header name")
        if name.lower() in FORBIDDEN_HEADERS:
            why = ("set by the fetcher (fetch.user_agent, its encodings, conditional GET)"
                   if name.lower() in ("user-agent", "accept-encoding", "if-none-match", "if-modified-since")
                   else "a hop-by-hop or framing header, set by HTTP itself")
            raise ConfigError(f"{here}: a site may not set this header: {why}")
        if not isinstance(text, str):
            raise ConfigError(f"{here}: expected a string, got {text!r}")
        if any(c in text for c in "\r\n\0") or text != text.strip():
            raise ConfigError(f"{here}: must be a single line without leading or trailing spaces")
        try:
            text.encode("latin-1")
        except UnicodeEncodeError:
            raise ConfigError(f"{here}: must be Latin-1 text (HTTP header values are bytes)") from None
        result.append((name, text))
    if len({name.lower() for name, _ in result}) != len(result):
        raise ConfigError(f"{where}: the same header is named twice (names are case-insensitive)")
    return tuple(result)


def _regexes(value: Any, where: str) -> tuple[str, ...]:
    try:
        patterns = strings(value)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as e:
            raise ConfigError(f"{where}: bad regular expression {pattern!r}: {e}") from None
        if _nested_repeat(sre_parse.parse(pattern)):
            raise ConfigError(f"{where}: {pattern!r}: a repeated group that repeats inside, such as (a+)+, can "
                              "backtrack for minutes on one URL: write it without the nesting (a+), or make the "
                              "inner repeat possessive (a++)")
    return patterns


_REPEATS = (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT)


def _nested_repeat(parsed: Any) -> bool:
    """True if a group repeated more than once is itself one repeat, as in ``(a+)+`` or ``(?:\\d*)*``: the text
    splits between the two in exponentially many ways, all tried before a match fails.  (A repeated group with more
    in it, such as ``(\\w+\\.)*``, is not refused: its other part pins where each turn ends.)"""
    for op, av in parsed:
        if op in _REPEATS:
            if av[1] > 1 and _single_repeat(av[2]):
                return True
            if _nested_repeat(av[2]):
                return True
        elif op is sre_constants.SUBPATTERN and _nested_repeat(av[3]):
            return True
        elif op is sre_constants.BRANCH and any(_nested_repeat(b) for b in av[1]):
            return True
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT) and _nested_repeat(av[1]):
            return True
    return False


def _single_repeat(parsed: Any) -> bool:
    """True if ``parsed`` is one repeat (inside groups) that may match more than once."""
    items = list(parsed)
    while len(items) == 1 and items[0][0] is sre_constants.SUBPATTERN:
        items = list(items[0][1][3])
    return len(items) == 1 and items[0][0] in _REPEATS and items[0][1][1] > 1


def _fields(value: Any, where: str) -> tuple[Field, ...]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a table of name = selector")
    result = []
    for name, spec in value.items():
        here = f"{where}.{name}"
        every = False
        if isinstance(spec, dict):
            unknown = set(spec) - {"xpath", "css", "all"}
            if unknown or len({"xpath", "css"} & set(spec)) != 1:
                raise ConfigError(f"{here}: expected {{xpath = ...}} or {{css = ...}}, optionally all = true")
            every = convert("bool", spec.get("all", False), f"{here}.all")
            spec = spec.get("xpath") or ("css:" + str(spec.get("css")))
        if not isinstance(spec, str) or not spec.strip():
            raise ConfigError(f"{here}: expected an XPath, 'css:SELECTOR' or a table, got {spec!r}")
        result.append(Field(name, _compile_selector(spec, here), every))
    return tuple(result)


def _compile_selector(spec: str, where: str) -> str:
    """The XPath of a selector: XPath as given, ``css:`` selectors translated (``::text``, ``::attr(x)`` work)."""
    if spec.startswith("css:"):
        from parsel.csstranslator import HTMLTranslator

        try:
            xpath = HTMLTranslator().css_to_xpath(spec[4:].strip())
        except Exception as e:  # cssselect raises several unrelated types
            raise ConfigError(f"{where}: bad CSS selector {spec[4:]!r}: {e}") from None
    else:
        xpath = spec
    try:
        etree.XPath(xpath)(_PROBE)  # evaluated once: an unknown function, prefix or variable fails only here
    except etree.XPathError as e:
        raise ConfigError(f"{where}: bad XPath {spec!r}: {e}") from None
    return xpath


_PROBE = etree.fromstring("<html><body><a href='x'>probe</a></body></html>")
