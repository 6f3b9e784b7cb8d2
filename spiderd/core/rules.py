"""The crawl's rules as plain values: what each site is (:class:`Site`, its item :class:`Field`\\ s) and how each host
is paced (:class:`HostRule`).

The configuration builds them (``[[sites]]``, ``[fetch.hosts]``); the fetch role compiles the sites into its
extractor (in this process and in the parse workers), the frontier schedules their recrawls and paces hosts, the
worker serves them as spiders and paces its own fetches, the feed derives its Spark schema from their fields.  Used by
every role, so they live here, below all of them and below the configuration.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
HOST_CACHE_SIZE = 16384  # hosts whose lookup a HostTable remembers (emptied when full)

MAX_HOPS = 255  # the highest link-hop limit ([pool] and [[sites]] max_hops): the pools keep a count in a byte
SITEMAP_MAX_URLS = 50_000  # entries in one sitemap file, at most (sitemaps.org): the most [sitemaps] max_urls takes
SITEMAP_MAX_SIZE = 50 * 1024 * 1024  # uncompressed bytes of one sitemap file (52,428,800): the most max_size takes


@dataclass(frozen=True)
class Field:
    """One item field: a compiled XPath (CSS is translated to XPath at load), first match or all."""

    name: str
    xpath: str
    all: bool = False


@dataclass(frozen=True)
class Site:
    """Per-site rules: which hosts are in, which URLs are list and detail pages, and the item fields."""

    name: str
    allowed_hosts: tuple[str, ...]
    list_urls: tuple[str, ...] = ()
    detail_urls: tuple[str, ...] = ()
    fields: tuple[Field, ...] = ()
    follow_detail_links: bool = False
    recrawl_list: float = 0.0  # seconds after which a done list page is fetched again; 0: never
    recrawl_detail: float = 0.0
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # extra request headers (name, value); may hold a token
    proxy: str = field(default="", repr=False)  # http://[user:pass@]host:port the site's URLs go through; "": none
    cookies: bool = False  # keep the cookies the site's hosts set (a jar per site, in memory) and send them back
    max_hops: int = 0  # link hops from a seed its URLs may be (its hosts' registered domains); 0: [pool] max_hops
    render: str = "never"  # "always" or "auto": its pages are rendered in a headless browser (spiderd.engine.render)
    render_wait: str = ""  # a CSS selector a rendered page has settled with ("": network idle)
    render_hosts: tuple[str, ...] = ()  # hosts besides allowed_hosts its rendered pages' sub-requests may go to
    start_urls: tuple[str, ...] = ()  # a worker job of this spider sent no URLs fetches these (Scrapy's start_urls)


def sites_digest(sites: Iterable[Site]) -> str:
    """A short digest naming one version of the sites' rules: the same rules give the same digest on every node
    and in every process (a worker job carries its site's, the parse children key their compiled rules by it)."""
    text = json.dumps([asdict(site) for site in sites], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class AdaptiveDelay:
    """Adaptive politeness (Heritrix's rule): after a fetch that took ``elapsed`` seconds, the host's next
    request waits ``factor x elapsed`` from the fetch's end, at least ``min_delay`` and at most ``max_delay``.

    A factor of 0 turns it off (no wait, whatever the bounds).  The configured delay (start to start) and a
    robots.txt Crawl-delay are lower bounds it never lowers: the next request starts no sooner than either.
    """

    factor: float = 0.0
    min_delay: float = 0.0
    max_delay: float = 30.0

    @property
    def on(self) -> bool:
        """True if fetch durations pace the host."""
        return self.factor > 0

    def wait(self, elapsed: float) -> float:
        """Seconds the host's next request waits after the end of a fetch that took ``elapsed`` seconds."""
        if not self.on:
            return 0.0
        return min(self.max_delay, max(self.min_delay, self.factor * max(0.0, elapsed)))

    def args(self) -> list[str]:
        """The factor and bounds as text (the Redis pool's script arguments and ``P conf`` fields)."""
        return [repr(float(self.factor)), repr(float(self.min_delay)), repr(float(self.max_delay))]


@dataclass(frozen=True)
class HostRule:
    """A per-host override of the politeness defaults; the adaptive keys left out (None) take ``[fetch]``'s."""

    delay: float
    concurrency: int
    delay_factor: float | None = None
    min_delay: float | None = None
    max_delay: float | None = None

    def adaptive(self, default: AdaptiveDelay) -> AdaptiveDelay:
        """This host's adaptive rule: its own keys, the others from ``default``."""
        return AdaptiveDelay(
            default.factor if self.delay_factor is None else self.delay_factor,
            default.min_delay if self.min_delay is None else self.min_delay,
            default.max_delay if self.max_delay is None else self.max_delay,
        )


@dataclass(frozen=True)
class PoliteRules:
    """How hosts are paced (``[fetch]``'s politeness keys): the default delay (seconds from one request's start to
    the next) and concurrency, each ``[fetch.hosts]`` table's (delay, concurrency), the default adaptive rule, and the
    hosts' own adaptive rules."""

    delay: float = 0.0
    concurrency: int = 1
    overrides: Mapping[str, tuple[float, int]] = field(default_factory=dict)
    adaptive: AdaptiveDelay = field(default_factory=AdaptiveDelay)
    adaptive_overrides: Mapping[str, AdaptiveDelay] = field(default_factory=dict)


def host_adaptive(rules: Mapping[str, HostRule], default: AdaptiveDelay) -> dict[str, AdaptiveDelay]:
    """The adaptive rule of each host of ``rules`` that sets one of its keys (the others take ``default``'s)."""
    return {host: rule.adaptive(default) for host, rule in rules.items()
            if (rule.delay_factor, rule.min_delay, rule.max_delay) != (None, None, None)}


def normalize_host(host: str) -> str:
    """An allowed_hosts entry as it appears in canonical URLs: lower-case, IDNA, no port, no leading dot."""
    host = host.strip().lower().lstrip("*").strip(".")
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    host = host.partition(":")[0]
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


class HostTable(Generic[T]):
    """Values by host, as ``[[sites]]`` allow hosts: the entry of the host itself, else of its nearest parent
    domain (``a.shop.example`` -> ``shop.example`` -> ``example``); the first entry given for a host wins.
    Lookups are cached (HOST_CACHE_SIZE hosts, then the cache starts again)."""

    def __init__(self, entries: Iterable[tuple[str, T]]) -> None:
        self._hosts: dict[str, T] = {}
        for host, value in entries:
            self._hosts.setdefault(normalize_host(host), value)
        self._cache: dict[str, T | None] = {}

    def __bool__(self) -> bool:
        return bool(self._hosts)

    def get(self, host: str) -> T | None:
        """The value for ``host`` (lower-case, as in a canonical URL; an IPv6 address in brackets), or None."""
        try:
            return self._cache[host]
        except KeyError:
            pass
        value = self._match(host)
        if len(self._cache) >= HOST_CACHE_SIZE:
            self._cache.clear()
        self._cache[host] = value
        return value

    def _match(self, host: str) -> T | None:
        while True:
            value = self._hosts.get(host)
            if value is not None:
                return value
            dot = host.find(".")
            if dot < 0:
                return None
            host = host[dot + 1 :]
