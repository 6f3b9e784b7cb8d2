"""The converters of the configuration's addresses: URLs and paths, IP addresses, the store's, Redis's and the
batch targets' URLs (each a type and range check; see :mod:`spiderd.config.convert`)."""

from __future__ import annotations

import ipaddress
import re
from typing import Any
from urllib.parse import urlsplit

from spiderd.config.values import expect, strings
from spiderd.core.urllist import URLList
from spiderd.core.urls import BadURL, canonicalize


def urls(value: Any) -> URLList:
    """Seed and hub URLs: each one canonicalizes.  Kept compactly (a node may have hundreds of thousands of seeds),
    and taken again as they are (settings made again from their ``raw`` values)."""
    items = value if isinstance(value, URLList) else strings(value)
    for item in items:
        try:
            canonicalize(item)
        except BadURL as e:
            raise ValueError(f"bad URL {item!r} ({e.reason})") from None
    return URLList.of(items)


def addresses(value: Any) -> tuple[str, ...]:
    """Source addresses: IPv4 or IPv6 literals."""
    items = strings(value)
    for item in items:
        ipaddress.ip_address(item)
    return items


def store_url(value: Any) -> str | tuple[str, ...]:
    """``sqlite:///PATH``, ``mysql://...``, ``none``, or a list of MySQL shards."""
    if isinstance(value, list):
        return _shards(value)
    text = expect(value, str, "a string or a list of mysql:// URLs")
    if text != "none" and not re.match(r"^(sqlite:///.+|mysql://.+)$", text):
        raise ValueError(f"expected sqlite:///PATH, mysql://USER:PASS@HOST:PORT/DB or none, got {text!r}")
    if text.startswith("mysql://"):
        _network_port(text)
    return text


def _network_port(url: str) -> None:
    """Refuse a URL whose port is not a number in 1..65535 (urllib would raise later, with a traceback)."""
    try:
        port = urlsplit(url).port
    except ValueError:
        port = 0
    if port == 0:  # None (no port: the default) is fine
        raise ValueError(f"the port of {url!r} must be a number in 1..65535")


def _shards(value: list[Any]) -> tuple[str, ...]:
    """MySQL shards: one or more distinct mysql:// URLs (a page goes to shard urlhash % count)."""
    urls = strings(value)
    if not urls:
        raise ValueError("a list of shards needs at least one mysql:// URL")
    for url in urls:
        if not url.startswith("mysql://"):
            raise ValueError(f"shards must be mysql:// URLs, got {url.partition('://')[0] + '://...'!r}")
        _network_port(url)
    if len(set(urls)) != len(urls):
        raise ValueError("the same shard is listed twice")
    return urls


def redis_url(value: Any) -> str:
    """``redis://[:PASSWORD@]HOST[:PORT][/DB]``, or a Redis Cluster's ``redis+cluster://[:PASSWORD@]HOST:PORT,...``."""
    text = expect(value, str, "a string")
    if text.startswith("redis+cluster://"):
        return _cluster_url(text)
    if not re.match(r"^redis://([^@/]*@)?[^/:@]+(:\d+)?(/\d+)?$", text):
        raise ValueError("expected redis://[:PASSWORD@]HOST[:PORT][/DB]")
    _network_port(text)
    return text


def _cluster_url(text: str) -> str:
    """``redis+cluster://[:PASSWORD@]HOST:PORT[,HOST:PORT...]/``: some of a cluster's nodes, each with its port."""
    if not re.match(r"^redis\+cluster://([^@/]*@)?[^/:@,]+:\d{1,5}(,[^/:@,]+:\d{1,5})*/?$", text):
        raise ValueError("expected redis+cluster://[:PASSWORD@]HOST:PORT[,HOST:PORT...]/")
    if any(not 0 < int(port) < 65536 for port in re.findall(r":(\d+)(?=,|/|$)", text.rpartition("@")[2])):
        raise ValueError("a port must be a number in 1..65535")
    return text


def targets(value: Any) -> tuple[str, ...]:
    """Batch targets: ``"local"``, ``HOST:PORT`` or ``http://[USER:PASS@]HOST:PORT``."""
    items = strings(value)
    for item in items:
        if item != "local" and not re.match(r"^(https?://([^@/]*@)?)?[^/:@\s]+:\d+/?$", item):
            raise ValueError(f"expected \"local\", HOST:PORT or http://[USER:PASS@]HOST:PORT, got {item!r}")
        if item != "local":
            _network_port(item if "://" in item else "http://" + item)
    return items


def url_paths(value: Any) -> tuple[str, ...]:
    """Paths tried on every site host (``/sitemap.xml``): each absolute, with no host of its own."""
    paths = strings(value)
    for path in paths:
        if not path.startswith("/") or path.startswith("//") or any(c.isspace() for c in path) or "#" in path:
            raise ValueError(f"expected paths such as '/sitemap.xml', got {path!r}")
        try:
            canonicalize("http://example.com" + path)
        except BadURL as e:
            raise ValueError(f"bad path {path!r} ({e.reason})") from None
    return tuple(dict.fromkeys(paths))
