"""The crawl's rules as plain values: what each site is (:class:`Site`, its item :class:`Field`\\ s) and how each host
is paced (:class:`HostRule`).

The configuration builds them (``[[sites]]``, ``[fetch.hosts]``); the fetch role compiles the sites into its
extractor (in this process and in the parse workers), the frontier schedules their recrawls and paces hosts, the
worker serves them as spiders and paces its own fetches, the feed derives its Spark schema from their fields.  Used by
every role, so they live here, below all of them and below the configuration.
"""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass(frozen=True)
class HostRule:
    """A per-host override of the politeness defaults."""

    delay: float
    concurrency: int
