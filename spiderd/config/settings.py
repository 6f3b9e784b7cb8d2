"""The configuration: a TOML file parsed once into frozen, validated settings.

Every error is one line that names the file and the key (``etc/spiderd.toml:
fetch.timeout: expected a number, got 'ten'``) and is raised as
:class:`ConfigError` before anything starts.  Unknown keys are errors.

This module holds the :class:`Settings` (a frozen section per TOML table, :mod:`spiderd.config.sections`), the
loader and the checks across sections; the key table is :mod:`spiderd.config.schema`, the value converters
:mod:`spiderd.config.convert`, the ``[[sites]]`` tables :mod:`spiderd.config.sites`.  The configuration imports
no role of spiderd: the rules it builds (:class:`~spiderd.core.rules.Site`, :class:`~spiderd.core.rules.HostRule`)
and the checks it borrows (feed URI templates, cron expressions) live in :mod:`spiderd.core`.
"""

from __future__ import annotations

import importlib.util
import os
import tomllib
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from spiderd.config.convert import ConfigError, convert
from spiderd.config.listen import Exposure, check_credentials, check_exposure, split
from spiderd.config.overlay import OVERLAY_FILE, Overlay, merge_sites, read_overlay
from spiderd.config.schema import SCHEMA
from spiderd.config.sections import (ApiSection, BatchSection, FeedSection, FetchSection, ItemsSection, ParseSection,
                                     PoolSection, RenderSection, SitemapsSection, SpiderdSection, StoreSection,
                                     WorkerSection)
from spiderd.config.sites import load_sites
from spiderd.core.rules import Site
from spiderd.core.urllist import URLList

__all__ = ["ConfigError", "Settings", "check_data_dir", "from_dict", "load", "with_overlay"]


SECTIONS: dict[str, type[Any]] = {  # the TOML section -> its dataclass (the Settings attribute of the same name)
    "spiderd": SpiderdSection, "pool": PoolSection, "fetch": FetchSection, "sitemaps": SitemapsSection,
    "parse": ParseSection, "render": RenderSection, "store": StoreSection, "items": ItemsSection, "batch": BatchSection,
    "worker": WorkerSection, "feed": FeedSection, "api": ApiSection,
}


@dataclass(frozen=True)
class Settings:
    """Everything spiderd reads from its configuration: a frozen section per TOML table, and the sites."""

    source: str = "<defaults>"
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the file's (and overrides),
    # its lists of URLs as validated (the same URLList as the section's: the file's strings are not kept twice)
    overlay: Overlay = field(default_factory=dict, compare=False, repr=False)  # sites changed at run time
    spiderd: SpiderdSection = field(default_factory=SpiderdSection)
    pool: PoolSection = field(default_factory=PoolSection)
    fetch: FetchSection = field(default_factory=FetchSection)
    sitemaps: SitemapsSection = field(default_factory=SitemapsSection)
    parse: ParseSection = field(default_factory=ParseSection)
    render: RenderSection = field(default_factory=RenderSection)
    store: StoreSection = field(default_factory=StoreSection)
    items: ItemsSection = field(default_factory=ItemsSection)
    batch: BatchSection = field(default_factory=BatchSection)
    worker: WorkerSection = field(default_factory=WorkerSection)
    feed: FeedSection = field(default_factory=FeedSection)
    api: ApiSection = field(default_factory=ApiSection)
    sites: tuple[Site, ...] = ()  # [[sites]]


def load(path: str, overrides: Mapping[str, Any] | None = None, overlay: Overlay | None = None) -> Settings:
    """Read and validate the TOML file at ``path``; ``overrides`` are ``section.key`` values, ``overlay`` the sites
    changed at run time (:mod:`spiderd.config.overlay`)."""
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from e
    return from_dict(raw, path, overrides, overlay)


def from_dict(raw: Mapping[str, Any], source: str = "<config>", overrides: Mapping[str, Any] | None = None,
              overlay: Overlay | None = None) -> Settings:
    """Validate an already-parsed configuration (used by ``load``, the demo, the sites API and the parse workers);
    ``overlay``: sites changed at run time, merged over the file's by name."""
    raw = _merge(raw, overrides or {})
    overlay = dict(overlay or {})
    sections: dict[str, Any] = {}
    sites: tuple[Site, ...] = ()
    if overlay and "sites" not in raw:
        raw["sites"] = []
    for section, table in raw.items():
        if section == "sites":
            if not isinstance(table, list):
                load_sites(table, source)  # the error: sites is not an array of tables
            tables, labels = merge_sites(table, overlay, source)
            sites = load_sites(tables, source, labels)
            continue
        schema = SCHEMA.get(section)
        if schema is None:
            raise ConfigError(f"{source}: {section}: unknown section (known: {', '.join([*SCHEMA, 'sites'])})")
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: {section}: expected a table")
        for key in table:
            if key not in schema:
                raise ConfigError(f"{source}: {section}.{key}: unknown key (known: {', '.join(schema)})")
        values = {key: convert(schema[key], value, f"{source}: {section}.{key}") for key, value in table.items()}
        table.update((key, value) for key, value in values.items() if isinstance(value, URLList))
        sections[section] = SECTIONS[section](**values)
    settings = Settings(source, raw, overlay, sites=sites, **sections)
    _check_together(settings)
    return settings


def with_overlay(settings: Settings) -> Settings:
    """``settings`` with the sites overlay of its data directory merged over its sites (the changes made through the
    sites API survive a restart); ConfigError naming the overlay when its sites no longer validate with the file."""
    overlay = read_overlay(settings.spiderd.path(OVERLAY_FILE))
    if not overlay:
        return settings
    try:
        return from_dict(settings.raw, settings.source, None, overlay)
    except ConfigError as e:
        raise ConfigError(f"{e} (with the sites changed at run time, kept in "
                          f"{settings.spiderd.path(OVERLAY_FILE)})") from None


def check_data_dir(settings: Settings) -> None:
    """Create the data directory and prove it writable, or raise ConfigError naming the key."""
    data_dir = settings.spiderd.data_dir
    try:
        os.makedirs(data_dir, exist_ok=True)
        probe = os.path.join(data_dir, ".spiderd-write-test")
        with open(probe, "w") as f:
            f.write("ok")
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(f"{settings.source}: spiderd.data_dir: {data_dir!r} is not writable: {e.strerror}") from e


def _merge(raw: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    merged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for dotted, value in overrides.items():
        section, _, key = dotted.partition(".")
        merged.setdefault(section, {})[key] = value
    return merged


def _check_together(settings: Settings) -> None:
    source, fetch = settings.source, settings.fetch
    _check_recrawl(settings)
    _check_feed(settings)
    if settings.items.format in ("warc", "both") and importlib.util.find_spec("warcio") is None:
        raise ConfigError(f"{source}: items.format = {settings.items.format!r}: WARC output needs the "
                          "warcio package: pip install 'spiderd[warc]' (or pip install warcio)")
    if settings.pool.pending_threshold <= fetch.timeout:
        raise ConfigError(
            f"{source}: pool.pending_threshold: must be longer than fetch.timeout "
            f"({settings.pool.pending_threshold} <= {fetch.timeout}), or leases expire while pages are still fetched"
        )
    if fetch.connect_timeout > fetch.timeout:
        raise ConfigError(f"{source}: fetch.connect_timeout: must not exceed fetch.timeout")
    _check_listening(settings)
    _check_adaptive(fetch, source)
    _check_render(settings)


def _check_feed(settings: Settings) -> None:
    """Parquet needs pyarrow; an sftp:// feed needs Conch and known_hosts: one line naming what is missing."""
    source = settings.source
    if settings.items.format == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise ConfigError(f"{source}: items.format = 'parquet': needs the pyarrow package: "
                          "pip install 'spiderd[parquet]'")
    for key, template in (("batch.feed_uri", settings.batch.feed_uri), ("worker.feed_template",
                                                                        settings.worker.feed_template)):
        if not template.startswith("sftp://"):
            continue
        if importlib.util.find_spec("bcrypt") is None:
            raise ConfigError(f"{source}: {key}: SFTP needs Twisted's conch extra: pip install 'spiderd[sftp]'")
        if not settings.feed.known_hosts:
            raise ConfigError(f"{source}: {key}: an sftp:// feed needs feed.known_hosts (the host keys to trust)")


def _check_render(settings: Settings) -> None:
    """A site that asks to render needs Playwright and the browser: one line naming what to install."""
    asking = [site.name for site in settings.sites if site.render != "never"]
    if not asking:
        return
    where = f"{settings.source}: sites {', '.join(asking[:3])}: render"
    if importlib.util.find_spec("playwright") is None:
        raise ConfigError(f"{where}: rendering needs the playwright package: pip install 'spiderd[render]'")
    browser = settings.render.browser
    if not (os.path.isfile(browser) and os.access(browser, os.X_OK)):
        raise ConfigError(f"{where}: no browser at render.browser = {browser!r}: apt-get install chromium "
                          "(or set render.browser to a Chromium)")


def _check_adaptive(fetch: FetchSection, source: str) -> None:
    """``min_delay`` does not exceed ``max_delay``, in ``[fetch]`` and for each host (its keys with ``[fetch]``'s)."""
    rules = {"fetch": fetch.adaptive}
    rules.update({f'fetch.hosts."{host}"': rule.adaptive(fetch.adaptive) for host, rule in fetch.hosts.items()})
    for where, rule in rules.items():
        if rule.min_delay > rule.max_delay:
            raise ConfigError(f"{source}: {where}.min_delay: must not exceed max_delay "
                              f"({rule.min_delay:g} > {rule.max_delay:g})")


def _check_recrawl(settings: Settings) -> None:
    """Recrawls leave new URLs a share of the fetches, the kinds' shares of a pop add up to at most 1; "local"
    needs this node's worker (detail pages sent in batches are recrawled in batches too)."""
    pool, source = settings.pool, settings.source
    if pool.recrawl_list_ratio + pool.recrawl_detail_ratio > 1:
        raise ConfigError(
            f"{source}: pool.recrawl_detail_ratio: with pool.recrawl_list_ratio, the share of fetches "
            f"recrawls may take while new URLs wait; the sum must not exceed 1 "
            f"({pool.recrawl_list_ratio} + {pool.recrawl_detail_ratio})"
        )
    if pool.list_ratio + pool.detail_ratio > 1:
        raise ConfigError(
            f"{source}: pool.detail_ratio: with pool.list_ratio, the share of a pop reserved for "
            f"each kind of waiting URL; the sum must not exceed 1 ({pool.list_ratio} + {pool.detail_ratio})"
        )
    if not settings.batch.targets or settings.spiderd.role == "worker":
        return
    if "local" in settings.batch.targets and settings.spiderd.role != "all":
        raise ConfigError(f"{source}: batch.targets: \"local\" needs the all role (this node's worker)")


def _check_listening(settings: Settings) -> None:
    """The API, and the worker where one runs: credentials in pairs, ``listen`` instead of ``bind`` and ``port``
    (not with them), and credentials wherever other machines can reach it."""
    api, worker = settings.api, settings.worker
    _check_api_keys(settings, api.username, api.password, Exposure(
        "api", api.listen, api.bind, bool(api.token or api.username),
        "the API can pause the crawl and change the pool",
        "api.token (bearer token) or api.username and api.password (basic auth)"))
    if not _runs_worker(settings):
        return
    _check_api_keys(settings, worker.username, worker.password, Exposure(
        "worker", worker.listen, worker.bind, bool(worker.username),
        "the worker API runs jobs for anyone who can reach it",
        "worker.username and worker.password (HTTP basic auth)"))
    if settings.spiderd.role == "all" and worker.listen and not split(worker.listen).tcp:
        raise ConfigError(f"{settings.source}: worker.listen: the \"local\" batch target sends batches to this "
                          "node's worker over TCP: listen on tcp:0:interface=127.0.0.1 (or drop \"local\")")


def _runs_worker(settings: Settings) -> bool:
    """True when the node runs a worker: the worker role, or the all role with the "local" batch target."""
    role = settings.spiderd.role
    return role == "worker" or (role == "all" and "local" in settings.batch.targets)


def _check_api_keys(settings: Settings, username: str, password: str, exposure: Exposure) -> None:
    given = sorted({"bind", "port"} & set(settings.raw.get(exposure.section, {})))
    alone = (f"{exposure.section}.listen: set it or {' and '.join(exposure.section + '.' + k for k in given)}, "
             "not both") if exposure.listen and given else None
    for error in (check_credentials(exposure.section, username, password), alone, check_exposure(exposure)):
        if error:
            raise ConfigError(f"{settings.source}: {error}")


assert all({f.name for f in fields(SECTIONS[name])} == set(keys) for name, keys in SCHEMA.items()), \
    "each section's dataclass has a field per key of its schema"
assert set(SECTIONS) == set(SCHEMA) and set(SECTIONS) <= {f.name for f in fields(Settings)}
