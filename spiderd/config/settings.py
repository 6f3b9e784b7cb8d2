"""The configuration: a TOML file parsed once into frozen, validated settings.

Every error is one line that names the file and the key (``etc/spiderd.toml:
fetch.timeout: expected a number, got 'ten'``) and is raised as
:class:`ConfigError` before anything starts.  Unknown keys are errors.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from lxml import etree

from spiderd.core.secrets import is_loopback, redact_text

ROLES = ("all", "frontier", "worker")
POOL_BACKENDS = ("leveldb", "memory", "redis")


class ConfigError(ValueError):
    """A bad configuration: the message names the file and the key."""


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
    # [fetch]
    concurrency: int = 64
    per_host_concurrency: int = 8
    per_host_delay: float = 0.0
    host_rules: Mapping[str, HostRule] = field(default_factory=dict)
    connect_timeout: float = 10.0
    timeout: float = 30.0
    max_body_size: int = 10 * 1024 * 1024
    max_redirects: int = 5
    keepalive_timeout: float = 10.0
    dns_cache_ttl: float = 300.0  # seconds a host name's addresses are reused; 0: look up at every connection
    user_agent: str = "spiderd/0.1 (+https://github.com/spiderd/spiderd)"
    robots: bool = True
    source_addresses: tuple[str, ...] = ()
    # [parse]
    parse_workers: int = -1
    parse_max_rss_mb: int = 512  # a parser process holding more is replaced (it answers what it holds first)
    # [store]
    store_url: str | tuple[str, ...] = "sqlite:///pages.sqlite3"  # a tuple: MySQL shards
    store_preset: int = 1
    store_batch_size: int = 100
    # [items]
    items_dir: str = "items"
    items_rotate_count: int = 10000
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

    def path(self, relative: str) -> str:
        """A path under the data directory (absolute paths are kept)."""
        return os.path.join(self.data_dir, relative)


# section -> key -> (attribute, type); the types are checked and converted by _convert.
_SCHEMA: dict[str, dict[str, tuple[str, str]]] = {
    "spiderd": {
        "role": ("role", "role"),
        "data_dir": ("data_dir", "str"),
        "log_interval": ("log_interval", "positive"),
        "exit_when_done": ("exit_when_done", "bool"),
    },
    "pool": {
        "backend": ("pool_backend", "backend"),
        "seeds": ("seeds", "urls"),
        "hubs": ("hubs", "urls"),
        "hub_refresh_span": ("hub_refresh_span", "positive"),
        "hub_percent": ("hub_percent", "percent"),
        "failure_threshold": ("failure_threshold", "count"),
        "pending_threshold": ("pending_threshold", "positive"),
        "max_url_length": ("max_url_length", "positive_int"),
        "max_path_depth": ("max_path_depth", "positive_int"),
        "max_urls_per_host": ("max_urls_per_host", "count"),
        "redis_url": ("redis_url", "redis_url"),
        "redis_prefix": ("redis_prefix", "str"),
        "redis_namespace": ("redis_namespace", "str"),
        "redis_seen_bucket_bits": ("redis_seen_bucket_bits", "bucket_bits"),
        "seed_cron": ("seed_cron", "cron"),
        "recrawl_every": ("recrawl_every", "positive"),
        "recrawl_batch": ("recrawl_batch", "positive_int"),
        "recrawl_list_ratio": ("recrawl_list_ratio", "ratio"),
        "recrawl_detail_ratio": ("recrawl_detail_ratio", "ratio"),
        "list_ratio": ("list_ratio", "ratio"),
        "detail_ratio": ("detail_ratio", "ratio"),
        "linkbase": ("linkbase", "bool"),
        "linkbase_max": ("linkbase_max", "count"),
    },
    "fetch": {
        "concurrency": ("concurrency", "positive_int"),
        "per_host_concurrency": ("per_host_concurrency", "positive_int"),
        "per_host_delay": ("per_host_delay", "non_negative"),
        "hosts": ("host_rules", "hosts"),
        "connect_timeout": ("connect_timeout", "positive"),
        "timeout": ("timeout", "positive"),
        "max_body_size": ("max_body_size", "positive_int"),
        "max_redirects": ("max_redirects", "count"),
        "keepalive_timeout": ("keepalive_timeout", "positive"),
        "dns_cache_ttl": ("dns_cache_ttl", "non_negative"),
        "user_agent": ("user_agent", "header"),
        "robots": ("robots", "bool"),
        "source_addresses": ("source_addresses", "addresses"),
    },
    "parse": {"workers": ("parse_workers", "workers"), "max_rss_mb": ("parse_max_rss_mb", "positive_int")},
    "batch": {
        "targets": ("batch_targets", "targets"),
        "project": ("batch_project", "name"),
        "spider": ("batch_spider", "str"),
        "feed_uri": ("batch_feed_uri", "feed_template"),
        "size": ("batch_size", "positive_int"),
        "flush_interval": ("batch_flush_interval", "positive"),
        "timeout": ("batch_timeout", "positive"),
        "max_setting_bytes": ("batch_max_setting_bytes", "setting_bytes"),
    },
    "worker": {
        "bind": ("worker_bind", "str"),
        "port": ("worker_port", "port"),
        "username": ("worker_username", "str"),
        "password": ("worker_password", "str"),
        "project": ("worker_project", "name"),
        "node_name": ("worker_node_name", "str"),
        "max_jobs": ("worker_max_jobs", "positive_int"),
        "concurrency": ("worker_concurrency", "count"),
        "job_concurrency": ("worker_job_concurrency", "count"),
        "redirect_window": ("worker_redirect_window", "non_negative"),
        "max_job_urls": ("worker_max_job_urls", "positive_int"),
        "feed_template": ("worker_feed_template", "feed_template"),
        "feed_dirs": ("worker_feed_dirs", "abs_dirs"),
        "stop_timeout": ("worker_stop_timeout", "non_negative"),
        "finished_to_keep": ("worker_finished_to_keep", "count"),
    },
    "feed": {
        "retry_max": ("feed_retry_max", "positive"),
        "stop_timeout": ("feed_stop_timeout", "non_negative"),
    },
    "api": {
        "bind": ("api_bind", "str"),
        "port": ("api_port", "api_port"),
        "token": ("api_token", "token"),
        "username": ("api_username", "str"),
        "password": ("api_password", "str"),
    },
    "store": {
        "url": ("store_url", "store_url"),
        "compression_preset": ("store_preset", "preset"),
        "batch_size": ("store_batch_size", "positive_int"),
    },
    "items": {
        "dir": ("items_dir", "str"),
        "rotate_count": ("items_rotate_count", "positive_int"),
    },
}
_SITE_KEYS = {
    "name",
    "allowed_hosts",
    "list_urls",
    "detail_urls",
    "fields",
    "follow_detail_links",
    "recrawl_list",
    "recrawl_detail",
}


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
            values["sites"] = _sites(table, source)
            continue
        schema = _SCHEMA.get(section)
        if schema is None:
            raise ConfigError(f"{source}: {section}: unknown section (known: {', '.join([*_SCHEMA, 'sites'])})")
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: {section}: expected a table")
        for key, value in table.items():
            if key not in schema:
                raise ConfigError(f"{source}: {section}.{key}: unknown key (known: {', '.join(schema)})")
            attribute, kind = schema[key]
            values[attribute] = _convert(kind, value, f"{source}: {section}.{key}")
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


def _convert(kind: str, value: Any, where: str) -> Any:
    converter = _CONVERTERS[kind]
    try:
        return converter(value)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {_redacted(str(e))}") from None


def _redacted(message: str) -> str:
    """``message`` with the password of every URI in it replaced by ``***`` (errors go to logs); the
    placeholders of a usage hint (``USER:PASS@``) stay as they are."""
    protected = _HINT.sub(lambda m: f"\0{m.group(1)}\0", message)
    return re.sub("\0(PASS|PASSWORD)\0", r":\1@", redact_text(protected))


_HINT = re.compile(r":(PASS|PASSWORD)@")


def _expect(value: Any, types: type | tuple[type, ...], what: str) -> Any:
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise TypeError(f"expected {what}, got {value!r}")
    if not isinstance(value, types):
        raise TypeError(f"expected {what}, got {value!r}")
    return value


MAX_SECONDS = 1e9  # about 31 years: the largest duration (or number) a setting or a request may give


def finite_number(value: Any) -> float:
    """``value`` as a float; refuses booleans, non-numbers, NaN, infinities and magnitudes over MAX_SECONDS."""
    number = float(_expect(value, (int, float), "a number"))
    if not math.isfinite(number) or abs(number) > MAX_SECONDS:
        raise ValueError(f"must be a finite number of at most {MAX_SECONDS:.0e}, got {value!r}")
    return number


_number = finite_number


def _positive(value: Any) -> float:
    number = _number(value)
    if not number > 0:
        raise ValueError(f"must be greater than 0, got {value!r}")
    return number


def _non_negative(value: Any) -> float:
    number = _number(value)
    if not number >= 0:
        raise ValueError(f"must be 0 or more, got {value!r}")
    return number


def _count(value: Any) -> int:
    number = _expect(value, int, "an integer")
    if number < 0:
        raise ValueError(f"must be 0 or more, got {value!r}")
    return number


def _percent(value: Any) -> int:
    number = _count(value)
    if not 1 <= number <= 100:
        raise ValueError(f"must be 1..100 (a percentage), got {value!r}")
    return number


def _positive_int(value: Any) -> int:
    number = _count(value)
    if number == 0:
        raise ValueError("must be 1 or more, got 0")
    return number


def _choice(options: tuple[str, ...]) -> Any:
    def convert(value: Any) -> str:
        if _expect(value, str, "a string") not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {value!r}")
        return value

    return convert


def _strings(value: Any) -> tuple[str, ...]:
    items = _expect(value, list, "a list of strings")
    for item in items:
        _expect(item, str, "a list of strings")
    return tuple(items)


def _feed_template(value: Any) -> str:
    """"" (the worker's default) or a file:// / ftp:// template that renders with batch, name and time."""
    from spiderd.core.feeduri import render_uri  # its errors show the template with the password redacted

    template = _expect(value, str, "a string")
    if template:
        render_uri(template, {"batch": "1", "name": "spider", "time": "2026-01-01T00-00-00+00-00"})
    return template


def _abs_dirs(value: Any) -> tuple[str, ...]:
    dirs = _strings(value)
    for d in dirs:
        if not d.startswith("/"):
            raise ValueError(f"expected absolute directories, got {d!r}")
    return tuple(os.path.normpath(d) for d in dirs)


def _urls(value: Any) -> tuple[str, ...]:
    from spiderd.core.urls import BadURL, canonicalize

    items = _strings(value)
    for item in items:
        try:
            canonicalize(item)
        except BadURL as e:
            raise ValueError(f"bad URL {item!r} ({e.reason})") from None
    return items


def _header(value: Any) -> str:
    text = _expect(value, str, "a string")
    if not text or any(c in text for c in "\r\n\0"):
        raise ValueError("must be a non-empty single line")
    return text


def _addresses(value: Any) -> tuple[str, ...]:
    import ipaddress

    items = _strings(value)
    for item in items:
        ipaddress.ip_address(item)
    return items


def _workers(value: Any) -> int:
    number = _expect(value, int, "an integer")
    if number < -1 or number > 64:
        raise ValueError(f"must be -1 (one per CPU), 0 (in the main process) or 1..64, got {value!r}")
    return number


def _store_url(value: Any) -> str | tuple[str, ...]:
    if isinstance(value, list):
        return _shards(value)
    text = _expect(value, str, "a string or a list of mysql:// URLs")
    if text != "none" and not re.match(r"^(sqlite:///.+|mysql://.+)$", text):
        raise ValueError(f"expected sqlite:///PATH, mysql://USER:PASS@HOST:PORT/DB or none, got {text!r}")
    if text.startswith("mysql://"):
        _network_port(text)
    return text


def _network_port(url: str) -> None:
    """Refuse a URL whose port is not a number in 1..65535 (urllib would raise later, with a traceback)."""
    from urllib.parse import urlsplit

    try:
        port = urlsplit(url).port
    except ValueError:
        port = 0
    if port == 0:  # None (no port: the default) is fine
        raise ValueError(f"the port of {url!r} must be a number in 1..65535")


def _shards(value: list[Any]) -> tuple[str, ...]:
    """MySQL shards: one or more distinct mysql:// URLs (a page goes to shard urlhash % count)."""
    urls = _strings(value)
    if not urls:
        raise ValueError("a list of shards needs at least one mysql:// URL")
    for url in urls:
        if not url.startswith("mysql://"):
            raise ValueError(f"shards must be mysql:// URLs, got {url.partition('://')[0] + '://...'!r}")
        _network_port(url)
    if len(set(urls)) != len(urls):
        raise ValueError("the same shard is listed twice")
    return urls


def _cron(value: Any) -> str:
    from spiderd.core.cron import parse

    text = _expect(value, str, "a string")
    if text:
        parse(text)  # CronError is a ValueError: one line naming pool.seed_cron
    return text


def _ratio(value: Any) -> float:
    number = _number(value)
    if not 0 <= number <= 1:
        raise ValueError(f"must be between 0 and 1, got {value!r}")
    return number


def _preset(value: Any) -> int:
    number = _expect(value, int, "an integer")
    if not 0 <= number <= 9:
        raise ValueError(f"must be 0..9, got {value!r}")
    return number


def _hosts(value: Any) -> dict[str, HostRule]:
    table = _expect(value, dict, "a table of host tables")
    rules = {}
    for host, rule in table.items():
        rule = _expect(rule, dict, f"a table for host {host!r}")
        unknown = set(rule) - {"delay", "concurrency"}
        if unknown:
            raise ValueError(f"host {host!r}: unknown key {sorted(unknown)[0]!r} (known: delay, concurrency)")
        rules[host.lower()] = HostRule(
            _non_negative(rule.get("delay", 0.0)), _positive_int(rule.get("concurrency", 1))
        )
    return rules


def _redis_url(value: Any) -> str:
    text = _expect(value, str, "a string")
    if not re.match(r"^redis://([^@/]*@)?[^/:@]+(:\d+)?(/\d+)?$", text):
        raise ValueError("expected redis://[:PASSWORD@]HOST[:PORT][/DB]")
    _network_port(text)
    return text


def _targets(value: Any) -> tuple[str, ...]:
    items = _strings(value)
    for item in items:
        if item != "local" and not re.match(r"^(https?://([^@/]*@)?)?[^/:@\s]+:\d+/?$", item):
            raise ValueError(f"expected \"local\", HOST:PORT or http://[USER:PASS@]HOST:PORT, got {item!r}")
        if item != "local":
            _network_port(item if "://" in item else "http://" + item)
    return items


def _name(value: Any) -> str:
    text = _expect(value, str, "a string")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", text):
        raise ValueError(f"expected letters, digits, '_', '.' or '-', got {text!r}")
    return text


def _port(value: Any) -> int:
    number = _expect(value, int, "an integer")
    if not -1 <= number <= 65535:
        raise ValueError(f"must be 0..65535 (or -1: 6800 for the worker role, any free port otherwise), got {value!r}")
    return number


def _bucket_bits(value: Any) -> int:
    number = _expect(value, int, "an integer")
    if not 14 <= number <= 24:
        raise ValueError(f"must be 14..24 (2**bits seen buckets of about 512 URLs each), got {value!r}")
    return number


def _api_port(value: Any) -> int:
    number = _expect(value, int, "an integer")
    if not 0 <= number <= 65535:
        raise ValueError(f"must be 0..65535 (0: any free port, logged at start), got {value!r}")
    return number


def _token(value: Any) -> str:
    text = _expect(value, str, "a string")
    if text and not re.fullmatch(r"[\x21-\x7e]+", text):
        raise ValueError("must be printable ASCII without spaces (it is sent as 'Authorization: Bearer TOKEN')")
    return text


def _setting_bytes(value: Any) -> int:
    number = _expect(value, int, "an integer")
    if not 4096 <= number <= 131000:
        raise ValueError(f"must be 4096..131000 (Linux caps one argument at 128 KiB), got {value!r}")
    return number


_CONVERTERS: dict[str, Any] = {
    "str": lambda v: _expect(v, str, "a string"),
    "bool": lambda v: _expect(v, bool, "true or false"),
    "role": _choice(ROLES),
    "backend": _choice(POOL_BACKENDS),
    "positive": _positive,
    "non_negative": _non_negative,
    "count": _count,
    "percent": _percent,
    "positive_int": _positive_int,
    "urls": _urls,
    "header": _header,
    "addresses": _addresses,
    "workers": _workers,
    "store_url": _store_url,
    "preset": _preset,
    "hosts": _hosts,
    "redis_url": _redis_url,
    "targets": _targets,
    "name": _name,
    "port": _port,
    "setting_bytes": _setting_bytes,
    "cron": _cron,
    "ratio": _ratio,
    "api_port": _api_port,
    "token": _token,
    "abs_dirs": _abs_dirs,
    "bucket_bits": _bucket_bits,
    "feed_template": _feed_template,
}


def _sites(value: Any, source: str) -> tuple[Site, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{source}: sites: expected an array of tables ([[sites]])")
    return tuple(_site(table, f"{source}: sites[{i}]") for i, table in enumerate(value))


def _site(table: Any, where: str) -> Site:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table")
    for key in table:
        if key not in _SITE_KEYS:
            raise ConfigError(f"{where}.{key}: unknown key (known: {', '.join(sorted(_SITE_KEYS))})")
    name = _convert("str", table.get("name", ""), f"{where}.name") or where
    try:
        hosts = tuple(h.lower() for h in _strings(table.get("allowed_hosts", [])))
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
        follow_detail_links=_convert("bool", table.get("follow_detail_links", False), f"{where}.follow_detail_links"),
        recrawl_list=_convert("non_negative", table.get("recrawl_list", 0), f"{where}.recrawl_list"),
        recrawl_detail=_convert("non_negative", table.get("recrawl_detail", 0), f"{where}.recrawl_detail"),
    )


def _regexes(value: Any, where: str) -> tuple[str, ...]:
    try:
        patterns = _strings(value)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as e:
            raise ConfigError(f"{where}: bad regular expression {pattern!r}: {e}") from None
    return patterns


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
            every = _convert("bool", spec.get("all", False), f"{here}.all")
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


def _check_together(settings: Settings) -> None:
    _check_recrawl(settings)
    if settings.pending_threshold <= settings.timeout:
        raise ConfigError(
            f"{settings.source}: pool.pending_threshold: must be longer than fetch.timeout "
            f"({settings.pending_threshold} <= {settings.timeout}), or leases expire while pages are still fetched"
        )
    if settings.connect_timeout > settings.timeout:
        raise ConfigError(f"{settings.source}: fetch.connect_timeout: must not exceed fetch.timeout")
    _check_api(settings)


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


def describe() -> dict[str, list[str]]:
    """The known keys per section (for error messages and docs)."""
    known = {section: list(keys) for section, keys in _SCHEMA.items()}
    known["sites"] = sorted(_SITE_KEYS)
    return known


assert {f.name for f in fields(Settings)} >= {a for s in _SCHEMA.values() for a, _ in s.values()}
