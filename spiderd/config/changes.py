"""What changed between two validated configurations, key by key, and which of those keys a running node takes.

Keys are named as in the file: ``fetch.timeout``, ``sites.NAME.fields`` (sites are matched by name; a site added
or removed changes each of its keys).  Values are compared as validated, so writing ``1`` for ``1.0`` or moving a
table is no change.  A running node takes at once the sites, the seeds, the politeness keys, and the keys of the
parts it runs (the sitemap reader's, the recrawler's: LiveConfig's ``live_keys``); every other key waits for
a restart (the listening addresses, the data directory, the pool's backend, and the rest).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from spiderd.config.sections import RenderSection, SitemapsSection
from spiderd.core.rules import Site

POLITENESS_KEYS = frozenset({
    "fetch.per_host_delay", "fetch.per_host_concurrency", "fetch.delay_factor", "fetch.min_delay", "fetch.max_delay",
    "fetch.hosts",
})  # how hosts are paced: the pools', the worker's and the sub-requests' politeness take them
SITEMAP_KEYS = frozenset(f"sitemaps.{f.name}" for f in fields(SitemapsSection))  # live where a sitemap reader runs
RENDER_KEYS = frozenset(f"render.{f.name}" for f in fields(RenderSection)) - {"render.browser", "render.browsers"}
# (live where a render pool runs: the browsers' own bounds as they are replaced; the browser and their number: a
# restart)
LIVE_KEYS = frozenset({"pool.seeds", "pool.hubs", "pool.hub_refresh_span", *POLITENESS_KEYS})  # besides the sites'
# (LIVE_SITE_KEYS)
LIVE_SITE_KEYS = frozenset({
    "name", "allowed_hosts", "list_urls", "detail_urls", "fields", "follow_detail_links", "headers", "proxy",
    "cookies", "render", "render_wait", "render_hosts", "start_urls", "max_hops",
})  # the others (recrawl_list, recrawl_detail: RECRAWL_SITE_KEYS) are live where a recrawler runs
RECRAWL_SITE_KEYS = frozenset({"recrawl_list", "recrawl_detail"})
SECTIONS = ("spiderd", "pool", "fetch", "sitemaps", "parse", "render", "store", "items", "batch", "worker", "feed",
            "api")


def changed_keys(old: Any, new: Any) -> list[str]:
    """The keys whose value differs between two Settings, sections first (in the file's order), then sites."""
    changed = [f"{section}.{f.name}" for section in SECTIONS for f in fields(getattr(old, section))
               if getattr(getattr(old, section), f.name) != getattr(getattr(new, section), f.name)]
    return changed + site_changes(old.sites, new.sites)


def site_changes(old: tuple[Site, ...], new: tuple[Site, ...]) -> list[str]:
    """``sites.NAME.key`` for each key of each site that differs (a site added or removed: those that differ from
    their defaults, and its ``allowed_hosts``)."""
    before, after = {s.name: s for s in old}, {s.name: s for s in new}
    changed = []
    for name in [*before, *(n for n in after if n not in before)]:
        a, b = before.get(name, Site(name, ())), after.get(name, Site(name, ()))
        changed += [f"sites.{name}.{f.name}" for f in fields(Site) if getattr(a, f.name) != getattr(b, f.name)]
    return changed


def needs_restart(key: str) -> bool:
    """True for a key a running node does not take (it is used after the next start)."""
    if key.startswith("sites."):
        return key.rpartition(".")[2] not in LIVE_SITE_KEYS
    return key not in LIVE_KEYS


def touches(keys: list[str], wanted: frozenset[str]) -> bool:
    """True if one of ``keys`` is one of ``wanted`` (a site's key: ``sites.*.KEY`` is named ``KEY`` there)."""
    return any(key in wanted or (key.startswith("sites.") and key.rpartition(".")[2] in wanted) for key in keys)


def changed_sites(keys: list[str]) -> list[str]:
    """The names of the sites ``keys`` change, in order."""
    names: dict[str, None] = {}
    for key in keys:
        if key.startswith("sites."):
            names[key[len("sites."):].rpartition(".")[0]] = None
    return list(names)
