"""Scrapy and spiderd's batches, both ends: :class:`BatchMiddleware` (seed 003's spider middleware: a CrawlSpider
that keeps its own frontier sends one rule's requests in batches to Scrapyd nodes, see
:mod:`spiderd.contrib.batchmiddleware`), and :class:`DistributedSpider`, which works those batches on real Scrapyd
like spiderd's own worker.

spiderd's batcher POSTs each batch to ``schedule.json`` as seed 003 does::

    project=P  spider=S  batch=N  setting=FEED_URI=...  setting=DISTRIBUTED_START_URLS=["http://...", ...]

Scrapyd runs ``scrapy crawl S -s FEED_URI=... -s DISTRIBUTED_START_URLS=[...] -a batch=N``.
A spider subclassing :class:`DistributedSpider` turns ``DISTRIBUTED_START_URLS``
into its start requests and makes items with spiderd's own extraction, so the
feed holds exactly what a spiderd worker writes: the site's fields, then
``url`` (canonical, after redirects), ``urlhash``, ``status`` and ``fetched_at``.
``batch`` is a spider argument, hence an attribute, hence usable in the feed
URI as ``%(batch)s``.

Settings read:

``DISTRIBUTED_START_URLS``
    a JSON list of URLs (or a Python list, when set in a settings module).
``SPIDERD_CONFIG``
    the path of a spiderd TOML configuration; its ``[[sites]]`` give the rules.
``SPIDERD_SITE``
    the name of the site to use (default: the spider's ``name``).

A bad value of any of them is logged as one line and raised as
:class:`DistributedSpiderError` while the crawler builds the spider: the
process ends with status 1 before fetching anything (Scrapyd never restarts a
job, so nothing loops).  Only detail URLs of the site are requested; others are
skipped with a log line.  Requires Scrapy (``pip install spiderd[scrapy]``).
"""

from __future__ import annotations

import json
import time
from typing import Any, AsyncIterator, Iterator

import scrapy
from scrapy.http import Response

from spiderd.config import settings as cfg
from spiderd.core.rules import Site
from spiderd.fetch.extract import Rules, extract
from spiderd.fetch.parsepool import page_robots
from spiderd.core.urls import BadURL, canonicalize

from spiderd.contrib.batchmiddleware import BatchMiddleware, BatchSettingError

__all__ = ["BatchMiddleware", "BatchSettingError", "DistributedSpider", "DistributedSpiderError", "parse_start_urls"]

START_URLS_SETTING = "DISTRIBUTED_START_URLS"
CONFIG_SETTING = "SPIDERD_CONFIG"
SITE_SETTING = "SPIDERD_SITE"


class DistributedSpiderError(ValueError):
    """A setting the spider cannot work with; the message names the setting."""


def parse_start_urls(value: Any) -> list[str]:
    """``DISTRIBUTED_START_URLS`` as a list of URLs: a JSON list of strings (or such a list already)."""
    if value is None or value == "":
        raise DistributedSpiderError(
            f"{START_URLS_SETTING} is not set: pass a JSON list of URLs "
            f"(-s '{START_URLS_SETTING}=[\"http://...\"]', as spiderd's batcher does)"
        )
    if isinstance(value, (str, bytes)):
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        try:
            value = json.loads(text)
        except ValueError as e:
            raise DistributedSpiderError(
                f"{START_URLS_SETTING} is not valid JSON ({e}): {_preview(text)}"
            ) from None
    if not isinstance(value, (list, tuple)):
        raise DistributedSpiderError(
            f"{START_URLS_SETTING} must be a JSON list of URLs, got {type(value).__name__}: {_preview(repr(value))}"
        )
    for i, url in enumerate(value):
        if not isinstance(url, str):
            raise DistributedSpiderError(
                f"{START_URLS_SETTING}[{i}] must be a URL string, got {type(url).__name__}: {_preview(repr(url))}"
            )
    return list(value)


def load_site(path: Any, name: str) -> tuple[cfg.Settings, Site]:
    """spiderd's settings at ``path`` and their site called ``name``."""
    if not path:
        raise DistributedSpiderError(
            f"{CONFIG_SETTING} is not set: it must name a spiderd configuration file whose [[sites]] "
            f"include one named {name!r}"
        )
    try:
        settings = cfg.load(str(path))
    except cfg.ConfigError as e:
        raise DistributedSpiderError(f"{CONFIG_SETTING}: {e}") from None
    for site in settings.sites:
        if site.name == name:
            return settings, site
    known = ", ".join(repr(s.name) for s in settings.sites) or "none"
    raise DistributedSpiderError(
        f"{SITE_SETTING}: {path} has no [[sites]] entry named {name!r} (sites: {known}); "
        f"name the spider after the site or set {SITE_SETTING}"
    )


class DistributedSpider(scrapy.Spider):
    """Start requests from ``DISTRIBUTED_START_URLS``; items by spiderd's rules for one site.

    Subclass it with a ``name`` (the spiderd site's name, unless ``SPIDERD_SITE`` is set) and,
    if you like, ``custom_settings``.  After ``from_crawler``: ``start_urls_given`` (the URLs as
    sent), ``spiderd_settings``, ``spiderd_site`` and ``spiderd_rules``.
    """

    name = "distributed"
    batch: str = "0"  # set by Scrapyd's ``batch`` argument; ``%(batch)s`` in FEED_URI needs a value anyway

    start_urls_given: list[str]
    spiderd_settings: cfg.Settings
    spiderd_site: Site
    spiderd_rules: Rules

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> DistributedSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        try:
            spider.configure(crawler.settings)
        except DistributedSpiderError as e:
            spider.logger.error("Cannot start: %s", e)
            raise
        return spider

    def configure(self, settings: Any) -> None:
        """Read the start URLs and the spiderd site from Scrapy ``settings``; raise DistributedSpiderError."""
        self.start_urls_given = parse_start_urls(settings.get(START_URLS_SETTING))
        site_name = settings.get(SITE_SETTING) or self.name
        self.spiderd_settings, self.spiderd_site = load_site(settings.get(CONFIG_SETTING), site_name)
        pool = self.spiderd_settings.pool
        self.spiderd_rules = Rules((self.spiderd_site,), pool.max_url_length, pool.max_path_depth,
                                   page_robots=page_robots(self.spiderd_settings.fetch))
        self._made: set[str] = set()
        self.logger.info(
            "Batch %s: %d start URLs for site %r of %s",
            self.batch, len(self.start_urls_given), self.spiderd_site.name, self.spiderd_settings.source,
        )

    # -- start requests ----------------------------------------------------------------------------

    async def start(self) -> AsyncIterator[Any]:
        """Scrapy >= 2.13: the same requests as ``start_requests``."""
        for request in self.start_requests():
            yield request

    def start_requests(self) -> Iterator[scrapy.Request]:
        """One request per detail URL of the site; anything else is skipped with a log line."""
        for url in self.start_urls_given:
            why = self.skip_reason(url)
            if why is not None:
                self.logger.warning("Skipping start URL %s: %s", url[:300], why)
                self._count("spiderd/start_urls_skipped")
                continue
            self._count("spiderd/start_urls")
            yield scrapy.Request(url, callback=self.parse)

    def skip_reason(self, url: str) -> str | None:
        """None when ``url`` is a detail URL of the site, else why it is skipped."""
        kind = self.spiderd_rules.classify(url)
        if kind == "detail":
            return None
        try:
            canonicalize(url, self.spiderd_rules.max_url_length)
        except BadURL as e:
            return f"bad URL ({e.reason})"
        if self.spiderd_rules.site_for(url) is None:
            return f"off-site (not in the allowed_hosts of site {self.spiderd_site.name!r})"
        if kind == "list":
            return f"a list page of site {self.spiderd_site.name!r}, not a detail page"
        return f"matches no rule of site {self.spiderd_site.name!r} (or is too deep)"

    # -- items --------------------------------------------------------------------------------------

    def parse(self, response: Response, **kwargs: Any) -> Iterator[dict[str, Any]]:
        item = self.spiderd_item(response)
        if item is not None:
            yield item

    def spiderd_item(self, response: Response) -> dict[str, Any] | None:
        """spiderd's item of a detail page (None, logged, for non-200, off-site, non-HTML or repeated pages)."""
        if response.status != 200:
            self.logger.info("No item from %s: HTTP %d", response.url, response.status)
            return None
        content_type = response.headers.get(b"Content-Type")
        result = extract(
            response.url,
            response.body,
            content_type.decode("latin-1") if content_type else None,
            "detail",
            time.time(),
            response.status,
            self.spiderd_rules,
            robots_tag="\n".join(v.decode("latin-1") for v in response.headers.getlist(b"X-Robots-Tag")) or None,
        )
        if result.item is None:
            why = "noindex" if result.noindex else result.error
            self.logger.warning("No item from %s: %s", response.url, why)
            self._count(f"spiderd/no_item/{why}")
            return None
        if result.item["url"] in self._made:  # a redirect to a page this job already made an item of
            self._count("spiderd/duplicates")
            return None
        self._made.add(result.item["url"])
        self._count("spiderd/items")
        return result.item

    def _count(self, key: str) -> None:
        try:
            stats = self.crawler.stats  # not set before the crawl starts (RuntimeError or None)
        except (AttributeError, RuntimeError):
            return
        if stats is not None:
            stats.inc_value(key)


def _preview(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
