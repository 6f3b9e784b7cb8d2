"""The configuration: a TOML file parsed once into frozen, validated settings.

Every error is one line that names the file and the key (``etc/spiderd.toml:
fetch.timeout: expected a number, got 'ten'``) and is raised as
:class:`ConfigError` before anything starts.  Unknown keys are errors.

This module holds the :class:`Settings`, the loader and the checks across keys; the key table is
:mod:`spiderd.config.schema`, the value converters :mod:`spiderd.config.convert`, the ``[[sites]]`` tables
:mod:`spiderd.config.sites`.  The configuration imports no role of spiderd: the rules it builds
(:class:`~spiderd.core.rules.Site`, :class:`~spiderd.core.rules.HostRule`) and the checks it borrows (feed URI
templates, cron expressions) live in :mod:`spiderd.core`.
"""

from __future__ import annotations

import importlib.util
import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from spiderd.config.convert import ConfigError, convert
from spiderd.config.schema import SCHEMA
from spiderd.config.sites import load_sites
from spiderd.core.rules import SITEMAP_MAX_SIZE, SITEMAP_MAX_URLS, AdaptiveDelay, HostRule, Site
from spiderd.core.secrets import is_loopback
from spiderd.core.compression import FAST

__all__ = ["ConfigError", "Settings", "check_data_dir", "from_dict", "load", "with_overrides"]


@dataclass(frozen=True)
class Settings:
    """Everything spiderd reads from its configuration."""

    source: str = "<defaults>"
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # [spiderd]
    role: str = "all"
    data_dir: str = "./spiderd-data"
    log_interval: float = 60.0
    exit_when_done: bool = False
    # [pool]
    pool_backend: str = "leveldb"
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "spiderd:"
    redis_namespace: str = ""
    redis_seen_bucket_bits: int = 16
    redis_partitions: int = 12  # a redis+cluster:// URL only: partitions of the pool (see pool/redis/partitions.py)
    seed_cron: str = ""
    recrawl_every: float = 60.0
    recrawl_batch: int = 1000
    recrawl_list_ratio: float = 0.2
    recrawl_detail_ratio: float = 0.1
    list_ratio: float = 0.0  # seed 004's get_list: the share of a pop's waiting URLs reserved for list URLs
    detail_ratio: float = 0.0  # seed 004's get_detail: the same for detail URLs
    linkbase: bool = False
    linkbase_max: int = 0
    seeds: tuple[str, ...] = ()
    hubs: tuple[str, ...] = ()
    hub_refresh_span: float = 600.0
    hub_percent: int = 50  # seed 000's pop(count, hub_percent): the share of a pop that may go to due hubs
    failure_threshold: int = 3
    pending_threshold: float = 300.0
    max_url_length: int = 2083
    max_path_depth: int = 32
    max_urls_per_host: int = 0
    max_hops: int = 0  # links from a seed a URL may be (seeds, hubs, API adds: 0); 0 = no limit
    # [fetch]
    concurrency: int = 64
    per_host_concurrency: int = 8
    per_host_delay: float = 0.0
    delay_factor: float = 0.0  # adaptive politeness: a host's next request waits this many times the last fetch's duration; 0: off
    min_delay: float = 0.0  # ... at least this long (seconds, from the fetch's end), when delay_factor > 0
    max_delay: float = 30.0  # ... at most this long
    host_rules: Mapping[str, HostRule] = field(default_factory=dict)
    connect_timeout: float = 10.0
    timeout: float = 30.0
    max_body_size: int = 10 * 1024 * 1024
    max_redirects: int = 5
    keepalive_timeout: float = 10.0
    dns_cache_ttl: float = 300.0  # seconds a host name's addresses are reused; 0: look up at every connection
    user_agent: str = "spiderd/0.1 (+https://github.com/spiderd/spiderd)"
    robots: bool = True
    obey_nofollow: bool = True  # rel="nofollow" links are not followed
    obey_meta_robots: bool = True  # <meta name="robots"> and X-Robots-Tag: noindex, nofollow, none
    canonical: bool = True  # a detail page's <link rel="canonical">: the item's url, and that URL done
    source_addresses: tuple[str, ...] = ()
    max_retry_after: float = 3600.0  # a 429/503's Retry-After (or back-off) blocks its host this long at most
    max_throttles: int = 10  # a URL's throttled fetches before the next one counts as its failure
    conditional_get: bool = True  # hubs and recrawled pages are fetched with If-None-Match / If-Modified-Since
    # [sitemaps]
    sitemap_from_robots: bool = True  # the Sitemap: lines of robots.txt (read when robots.txt is: fetch.robots)
    sitemap_paths: tuple[str, ...] = ()  # paths tried on every site host besides, such as "/sitemap.xml"
    sitemap_max_urls: int = SITEMAP_MAX_URLS  # entries read per sitemap file (the protocol's 50,000 at most)
    sitemap_max_size: int = SITEMAP_MAX_SIZE  # uncompressed bytes read per file (the protocol's 50 MB at most)
    sitemap_max_files: int = 100  # sitemap files (indexes included) read per host each time its sitemaps are read
    sitemap_refresh: float = 86400.0  # seconds between two reads of one host's sitemaps; 0: once per run
    sitemap_lastmod: bool = True  # on a later read, a URL whose lastmod is after the previous read is queued again
    # [parse]
    parse_workers: int = -1
    parse_max_rss_mb: int = 512  # a parser process holding more is replaced (it answers what it holds first)
    # [store]
    store_url: str | tuple[str, ...] = "sqlite:///pages.sqlite3"  # a tuple: MySQL shards
    store_preset: int = FAST  # "fast" (XZ preset 0, short match search), or an XZ preset 0..9
    store_batch_size: int = 100
    # [items]
    items_dir: str = "items"
    items_rotate_count: int = 10000
    items_format: str = "jsonl"  # "warc" or "both": the fetched answers as WARC files too (needs warcio)
    warc_rotate_mb: int = 1000  # a WARC file is complete at this size (or at rotate_count answers)
    skip_duplicate_content: bool = False  # a detail page whose content digest another URL gave first: no item
    # [batch]
    batch_targets: tuple[str, ...] = ("local",)
    batch_project: str = "spiderd"
    batch_spider: str = ""
    batch_feed_uri: str = ""
    batch_size: int = 1000
    batch_flush_interval: float = 30.0
    batch_timeout: float = 10.0
    batch_max_setting_bytes: int = 100_000
    # [worker]
    worker_bind: str = "127.0.0.1"
    worker_port: int = -1  # -1: 6800 in the worker role, a free port for the all role's own worker
    worker_username: str = ""
    worker_password: str = ""
    worker_project: str = "spiderd"
    worker_node_name: str = ""
    worker_max_jobs: int = 4
    worker_concurrency: int = 0  # 0: fetch.concurrency
    worker_job_concurrency: int = 0
    worker_redirect_window: float = 86400.0
    worker_max_job_urls: int = 50_000
    worker_feed_template: str = ""
    worker_feed_dirs: tuple[str, ...] = ()
    worker_stop_timeout: float = 30.0
    worker_finished_to_keep: int = 100
    # [feed]
    feed_retry_max: float = 300.0
    feed_stop_timeout: float = 30.0
    # [api]
    api_bind: str = "127.0.0.1"
    api_port: int = 6810
    api_token: str = field(default="", repr=False)
    api_username: str = ""
    api_password: str = field(default="", repr=False)
    # [[sites]]
    sites: tuple[Site, ...] = ()

    @property
    def adaptive(self) -> AdaptiveDelay:
        """The ``[fetch]`` adaptive politeness rule (off with ``delay_factor = 0``)."""
        return AdaptiveDelay(self.delay_factor, self.min_delay, self.max_delay)

    def path(self, relative: str) -> str:
        """A path under the data directory (absolute paths are kept)."""
        return os.path.join(self.data_dir, relative)


def load(path: str, overrides: Mapping[str, Any] | None = None) -> Settings:
    """Read and validate the TOML file at ``path``; ``overrides`` are ``section.key`` values."""
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from e
    return from_dict(raw, path, overrides)


def from_dict(raw: Mapping[str, Any], source: str = "<config>", overrides: Mapping[str, Any] | None = None) -> Settings:
    """Validate an already-parsed configuration (used by ``load``, the demo and the parse workers)."""
    raw = _merge(raw, overrides or {})
    values: dict[str, Any] = {"source": source, "raw": raw}
    for section, table in raw.items():
        if section == "sites":
            values["sites"] = load_sites(table, source)
            continue
        schema = SCHEMA.get(section)
        if schema is None:
            raise ConfigError(f"{source}: {section}: unknown section (known: {', '.join([*SCHEMA, 'sites'])})")
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: {section}: expected a table")
        for key, value in table.items():
            if key not in schema:
                raise ConfigError(f"{source}: {section}.{key}: unknown key (known: {', '.join(schema)})")
            attribute, kind = schema[key]
            values[attribute] = convert(kind, value, f"{source}: {section}.{key}")
    settings = Settings(**values)
    _check_together(settings)
    return settings


def with_overrides(settings: Settings, **changes: Any) -> Settings:
    """A copy of ``settings`` with some attributes changed (already-valid values only)."""
    return replace(settings, **changes)


def check_data_dir(settings: Settings) -> None:
    """Create the data directory and prove it writable, or raise ConfigError naming the key."""
    where = f"{settings.source}: spiderd.data_dir"
    try:
        os.makedirs(settings.data_dir, exist_ok=True)
        probe = os.path.join(settings.data_dir, ".spiderd-write-test")
        with open(probe, "w") as f:
            f.write("ok")
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(f"{where}: {settings.data_dir!r} is not writable: {e.strerror}") from e


def _merge(raw: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    merged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for dotted, value in overrides.items():
        section, _, key = dotted.partition(".")
        merged.setdefault(section, {})[key] = value
    return merged


def _check_together(settings: Settings) -> None:
    _check_recrawl(settings)
    if settings.items_format != "jsonl" and importlib.util.find_spec("warcio") is None:
        raise ConfigError(f"{settings.source}: items.format = {settings.items_format!r}: WARC output needs the "
                          "warcio package: pip install 'spiderd[warc]' (or pip install warcio)")
    if settings.pending_threshold <= settings.timeout:
        raise ConfigError(
            f"{settings.source}: pool.pending_threshold: must be longer than fetch.timeout "
            f"({settings.pending_threshold} <= {settings.timeout}), or leases expire while pages are still fetched"
        )
    if settings.connect_timeout > settings.timeout:
        raise ConfigError(f"{settings.source}: fetch.connect_timeout: must not exceed fetch.timeout")
    _check_api(settings)
    _check_adaptive(settings)


def _check_adaptive(settings: Settings) -> None:
    """``min_delay`` does not exceed ``max_delay``, in ``[fetch]`` and for each host (its keys with ``[fetch]``'s)."""
    rules = {"fetch": settings.adaptive}
    rules.update({f'fetch.hosts."{host}"': rule.adaptive(settings.adaptive) for host, rule in settings.host_rules.items()})
    for where, rule in rules.items():
        if rule.min_delay > rule.max_delay:
            raise ConfigError(f"{settings.source}: {where}.min_delay: must not exceed max_delay "
                              f"({rule.min_delay:g} > {rule.max_delay:g})")


def _check_recrawl(settings: Settings) -> None:
    """Recrawls leave new URLs a share of the fetches, the kinds' shares of a pop add up to at most 1; detail
    pages sent in batches cannot be recrawled here."""
    if settings.recrawl_list_ratio + settings.recrawl_detail_ratio > 1:
        raise ConfigError(
            f"{settings.source}: pool.recrawl_detail_ratio: with pool.recrawl_list_ratio, the share of fetches "
            f"recrawls may take while new URLs wait; the sum must not exceed 1 "
            f"({settings.recrawl_list_ratio} + {settings.recrawl_detail_ratio})"
        )
    if settings.list_ratio + settings.detail_ratio > 1:
        raise ConfigError(
            f"{settings.source}: pool.detail_ratio: with pool.list_ratio, the share of a pop reserved for "
            f"each kind of waiting URL; the sum must not exceed 1 ({settings.list_ratio} + {settings.detail_ratio})"
        )
    if not settings.batch_targets or settings.role == "worker":
        return
    for i, site in enumerate(settings.sites):
        if site.recrawl_detail:
            raise ConfigError(
                f"{settings.source}: sites[{i}].recrawl_detail: detail pages sent in batches are fetched by "
                "workers, not by this node: recrawling them needs batch.targets = []"
            )


def _check_api(settings: Settings) -> None:
    """Credentials come in pairs, and an API reachable from other machines must ask for them."""
    where = settings.source
    if bool(settings.api_username) != bool(settings.api_password):
        raise ConfigError(f"{where}: api.username, api.password: set both (HTTP basic auth) or neither")
    if ":" in settings.api_username:
        raise ConfigError(f"{where}: api.username: must not contain ':'")
    if not is_loopback(settings.api_bind) and not (settings.api_token or settings.api_username):
        raise ConfigError(
            f"{where}: api.bind: {settings.api_bind or '(all interfaces)'!r} is not a loopback address, and the API "
            "can pause the crawl and change the pool: set api.token (bearer token) or api.username and "
            "api.password (basic auth), or bind 127.0.0.1"
        )


assert {f.name for f in fields(Settings)} >= {a for s in SCHEMA.values() for a, _ in s.values()}
