"""The value converters of the configuration: one per kind of key, each a type and range check.

A converter takes the TOML value and returns the setting's value, or raises TypeError or ValueError saying why;
:func:`convert` turns that into the one-line :class:`ConfigError` naming the file and the key, with any password
redacted.  The schema (:mod:`spiderd.config.schema`) names each key's kind.  Nothing here knows a component: the
domain checks use the pure helpers of :mod:`spiderd.core` (feed URI templates, cron expressions, URLs).
"""

from __future__ import annotations

import os
import re
import ssl
from typing import Any, Callable

from spiderd.core.cron import parse as parse_cron
from spiderd.core.feeduri import render_uri, time_params
from spiderd.core.rules import MAX_HOPS, SITEMAP_MAX_SIZE, SITEMAP_MAX_URLS, HostRule
from spiderd.config.endpoints import addresses, redis_url, store_url, targets, url_paths, urls
from spiderd.config.listen import MAX_BACKLOG, endpoint
from spiderd.config.values import MAX_SECONDS, expect, finite_number, strings
from spiderd.core.secrets import redact_text
from spiderd.core.compression import FAST

ROLES = ("all", "frontier", "worker")
POOL_BACKENDS = ("leveldb", "memory", "redis")
DURABILITY = ("none", "replica", "aof")  # [pool] redis_durability: when a write to Redis is acknowledged
POLITENESS = ("host", "ip")  # [fetch] politeness: a slot per host, or per address (the hosts on one IP share it)
FEED_FORMATS = ("jsonl", "warc", "both", "parquet")  # [items] format: items as JSON lines, answers as WARC, both, or
# the worker's feeds as Parquet


__all__ = ["CONVERTERS", "MAX_SECONDS", "ConfigError", "convert", "expect", "finite_number", "strings"]


class ConfigError(ValueError):
    """A bad configuration: the message names the file and the key."""


def convert(kind: str, value: Any, where: str) -> Any:
    """``value`` converted as ``kind`` (a key of CONVERTERS), or ConfigError: ``where``, then why, passwords redacted."""
    converter = CONVERTERS[kind]
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




def _positive(value: Any) -> float:
    number = finite_number(value)
    if not number > 0:
        raise ValueError(f"must be greater than 0, got {value!r}")
    return number


def _non_negative(value: Any) -> float:
    number = finite_number(value)
    if not number >= 0:
        raise ValueError(f"must be 0 or more, got {value!r}")
    return number


MAX_DELAY_FACTOR = 1000.0  # a host's next request waits at most this many times the last fetch's duration


def _delay_factor(value: Any) -> float:
    number = _non_negative(value)
    if number > MAX_DELAY_FACTOR:
        raise ValueError(f"must be 0 (off) to {MAX_DELAY_FACTOR:g}, got {value!r}")
    return number


def _count(value: Any) -> int:
    number = expect(value, int, "an integer")
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


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        text = expect(value, str, "a string")
        if text not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {value!r}")
        return text

    return check


def _feed_template(value: Any) -> str:
    """"" (the worker's default) or a file://, ftp://, ftps:// or sftp:// template that renders with batch, name,
    site, node, time, date and hour (the errors of render_uri show the template with its password redacted)."""
    template = expect(value, str, "a string")
    if template:
        render_uri(template, {"batch": "1", "name": "spider", "site": "spider", "node": "node", **time_params(0)})
    return template


def _readable_file(value: Any) -> str:
    """"" (none) or the path of a readable file."""
    path = expect(value, str, "a string")
    if path and not (os.path.isfile(path) and os.access(path, os.R_OK)):
        raise ValueError(f"no readable file at {path!r}")
    return path


def _ca_file(value: Any) -> str:
    """"" (the system's CAs) or a readable PEM file of CA certificates."""
    path = _readable_file(value)
    if path:
        try:
            ssl.create_default_context(cafile=path)
        except (ssl.SSLError, ValueError) as e:
            raise ValueError(f"{path!r} holds no PEM CA certificate ({e})") from None
    return path


def _abs_dirs(value: Any) -> tuple[str, ...]:
    dirs = strings(value)
    for d in dirs:
        if not d.startswith("/"):
            raise ValueError(f"expected absolute directories, got {d!r}")
    return tuple(os.path.normpath(d) for d in dirs)


def _header(value: Any) -> str:
    text = expect(value, str, "a string")
    if not text or any(c in text for c in "\r\n\0"):
        raise ValueError("must be a non-empty single line")
    return text


def _workers(value: Any) -> int:
    number = expect(value, int, "an integer")
    if number < -1 or number > 64:
        raise ValueError(f"must be -1 (one per CPU), 0 (in the main process) or 1..64, got {value!r}")
    return number


def _cron(value: Any) -> str:
    text = expect(value, str, "a string")
    if text:
        parse_cron(text)  # CronError is a ValueError: one line naming pool.seed_cron
    return text


def _ratio(value: Any) -> float:
    number = finite_number(value)
    if not 0 <= number <= 1:
        raise ValueError(f"must be between 0 and 1, got {value!r}")
    return number


def _preset(value: Any) -> int:
    if value == "fast":
        return FAST
    if isinstance(value, str):
        raise ValueError(f'must be "fast" or an XZ preset 0..9, got {value!r}')
    number = expect(value, int, "an integer")
    if not 0 <= number <= 9:
        raise ValueError(f'must be "fast" or an XZ preset 0..9, got {value!r}')
    return number


def _hosts(value: Any) -> dict[str, HostRule]:
    table = expect(value, dict, "a table of host tables")
    rules = {}
    for host, rule in table.items():
        rule = expect(rule, dict, f"a table for host {host!r}")
        unknown = set(rule) - set(HOST_KEYS)
        if unknown:
            raise ValueError(f"host {host!r}: unknown key {sorted(unknown)[0]!r} (known: {', '.join(HOST_KEYS)})")
        adaptive = {key: _host_value(host, key, rule[key]) for key in HOST_KEYS[2:] if key in rule}
        rules[host.lower()] = HostRule(
            _non_negative(rule.get("delay", 0.0)), _positive_int(rule.get("concurrency", 1)), **adaptive
        )
    return rules


HOST_KEYS = ("delay", "concurrency", "delay_factor", "min_delay", "max_delay")  # of a [fetch.hosts."name"] table


def _host_value(host: str, key: str, value: Any) -> float:
    """One adaptive key of a host table, checked as its ``[fetch]`` namesake; the error names the host and key."""
    try:
        return _delay_factor(value) if key == "delay_factor" else _non_negative(value)
    except (TypeError, ValueError) as e:
        raise type(e)(f"host {host!r}: {key}: {e}") from None


def _name(value: Any) -> str:
    text = expect(value, str, "a string")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", text):
        raise ValueError(f"expected letters, digits, '_', '.' or '-', got {text!r}")
    return text


def _port(value: Any) -> int:
    number = expect(value, int, "an integer")
    if not -1 <= number <= 65535:
        raise ValueError(f"must be 0..65535 (or -1: 6800 for the worker role, any free port otherwise), got {value!r}")
    return number


def _bucket_bits(value: Any) -> int:
    number = expect(value, int, "an integer")
    if not 14 <= number <= 24:
        raise ValueError(f"must be 14..24 (2**bits seen buckets of about 512 URLs each), got {value!r}")
    return number


def _api_port(value: Any) -> int:
    number = expect(value, int, "an integer")
    if not 0 <= number <= 65535:
        raise ValueError(f"must be 0..65535 (0: any free port, logged at start), got {value!r}")
    return number


def _token(value: Any) -> str:
    text = expect(value, str, "a string")
    if text and not re.fullmatch(r"[\x21-\x7e]+", text):
        raise ValueError("must be printable ASCII without spaces (it is sent as 'Authorization: Bearer TOKEN')")
    return text


def _setting_bytes(value: Any) -> int:
    number = expect(value, int, "an integer")
    if not 4096 <= number <= 131000:
        raise ValueError(f"must be 4096..131000 (Linux caps one argument at 128 KiB), got {value!r}")
    return number


def _bounded_int(low: int, high: int, why: str) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        number = expect(value, int, "an integer")
        if not low <= number <= high:
            raise ValueError(f"must be {low}..{high} ({why}), got {value!r}")
        return number

    return check


CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "str": lambda v: expect(v, str, "a string"),
    "bool": lambda v: expect(v, bool, "true or false"),
    "role": _choice(ROLES),
    "backend": _choice(POOL_BACKENDS),
    "feed_format": _choice(FEED_FORMATS),
    "politeness": _choice(POLITENESS),
    "durability": _choice(DURABILITY),
    "positive": _positive,
    "non_negative": _non_negative,
    "delay_factor": _delay_factor,
    "count": _count,
    "percent": _percent,
    "positive_int": _positive_int,
    "urls": urls,
    "header": _header,
    "addresses": addresses,
    "workers": _workers,
    "store_url": store_url,
    "preset": _preset,
    "hosts": _hosts,
    "redis_url": redis_url,
    "targets": targets,
    "name": _name,
    "port": _port,
    "setting_bytes": _setting_bytes,
    "cron": _cron,
    "ratio": _ratio,
    "api_port": _api_port,
    "listen": endpoint,
    "backlog": _bounded_int(1, MAX_BACKLOG, "the listen queue; Linux caps it at net.core.somaxconn"),
    "token": _token,
    "abs_dirs": _abs_dirs,
    "bucket_bits": _bucket_bits,
    "partitions": _bounded_int(1, 1024, "a multiple of the cluster's masters spreads them evenly"),
    "feed_template": _feed_template,
    "readable_file": _readable_file,
    "ca_file": _ca_file,
    "url_paths": url_paths,
    "max_hops": _bounded_int(0, MAX_HOPS, "link hops from a seed; 0 = no limit"),
    "sitemap_urls": _bounded_int(1, SITEMAP_MAX_URLS, "the sitemap protocol's limit per file"),
    "sitemap_size": _bounded_int(1, SITEMAP_MAX_SIZE, "bytes uncompressed: the sitemap protocol's limit per file"),
}
