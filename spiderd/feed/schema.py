"""The feed's declared schema: what every item line holds, as a Spark DDL string.

An item line (in-process items files and worker feed files alike) holds the
site's ``[sites.fields]`` (a string, or with ``all = true`` an array of
strings; null or ``[]`` when the page has none), then ``url`` (canonical,
after redirects), ``urlhash``, ``status``, ``fetched_at`` (Unix seconds) and
``digest``, the page body's content digest (``sha1:`` and 32 base32 characters,
spiderd.core.digest: Heritrix's and WARC's form; the stored page's column).
Where a site renders its pages (``[[sites]] render``), its items also hold ``rendered``: true when the page was
rendered in a headless browser, false when it was fetched plain ("auto").  Where a site recrawls its detail pages
(``recrawl_detail``), the item of a page a worker fetched again because it changed holds ``recrawl`` (true) and
``previous_fetched_at`` (Unix seconds); other items leave them out (Spark reads them as null).
``urlhash`` is the farmhash ``fingerprint64`` of ``url`` written as a
*signed* 64-bit integer (the same 64 bits: ``h - 2**64`` when ``h >= 2**63``),
so Spark reads it as ``BIGINT``; the page store keeps the unsigned value
(MySQL ``bigint unsigned``; SQLite, whose integers are signed, the same
signed value as the feed).

``python -m spiderd.feed.schema --config FILE`` prints the DDL of that
configuration's sites, to paste into ``spark.read.schema(...)``.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from typing import Any, Iterable

from spiderd.core.rules import Field, Site

FIXED = (("url", "STRING"), ("urlhash", "BIGINT"), ("status", "INT"), ("fetched_at", "DOUBLE"), ("digest", "STRING"))
RECRAWL = (("recrawl", "BOOLEAN"), ("previous_fetched_at", "DOUBLE"))  # on recrawled detail pages' items only
_BOUNDS = {"BIGINT": 2**63, "INT": 2**31}
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SchemaConflict(ValueError):
    """Two sites declare a field of one name with different types."""


def columns(sites: Iterable[Site]) -> list[tuple[str, str]]:
    """(name, Spark type) of every item column: the sites' fields in order (each once), then the fixed ones (and
    ``rendered`` where a site renders, ``recrawl`` and ``previous_fetched_at`` where one recrawls detail pages)."""
    sites = tuple(sites)
    fixed = dict(FIXED)
    found: dict[str, str] = {}
    for site in sites:
        for field in site.fields:
            if field.name in fixed:
                continue  # url, urlhash, status, fetched_at and digest win over fields of those names
            kind = _type(field)
            if found.setdefault(field.name, kind) != kind:
                raise SchemaConflict(f"field {field.name!r} is {found[field.name]} in one site, {kind} in another")
    rendering = [("rendered", "BOOLEAN")] if any(site.render != "never" for site in sites) else []
    recrawling = list(RECRAWL) if any(site.recrawl_detail > 0 for site in sites) else []
    return [*found.items(), *FIXED, *rendering, *recrawling]


def ddl(sites: Iterable[Site]) -> str:
    """The schema as Spark DDL: ``title STRING, tags ARRAY<STRING>, url STRING, urlhash BIGINT, ...``."""
    return ", ".join(f"{_quote(name)} {kind}" for name, kind in columns(sites))


def problems(line: dict[str, Any], declared: list[tuple[str, str]]) -> list[str]:
    """Where one decoded item line does not fit the declared columns (empty when it fits)."""
    types = dict(declared)
    found = [f"{name}: not declared" for name in line if name not in types]
    for name, kind in declared:
        if name not in line:
            if (name, kind) not in RECRAWL:  # (only a recrawl's item has them)
                found.append(f"{name}: missing")
        elif not fits(line[name], kind):
            found.append(f"{name}: {line[name]!r} is not {kind}")
    return found


def _type(field: Field) -> str:
    return "ARRAY<STRING>" if field.all else "STRING"


def _quote(name: str) -> str:
    return name if _PLAIN_NAME.fullmatch(name) else "`" + name.replace("`", "``") + "`"


def fits(value: Any, kind: str) -> bool:
    """True if a decoded JSON ``value`` fits the Spark type ``kind`` (null fits STRING and ARRAY<STRING>)."""
    if kind == "STRING":
        return value is None or isinstance(value, str)
    if kind == "ARRAY<STRING>":
        return value is None or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    if kind in _BOUNDS:
        bound = _BOUNDS[kind]
        return isinstance(value, int) and not isinstance(value, bool) and -bound <= value < bound
    if kind == "BOOLEAN":
        return isinstance(value, bool)
    if kind == "DOUBLE":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    raise ValueError(f"unknown type {kind}")


def main(argv: list[str] | None = None) -> int:
    """Print the feed's Spark DDL for a configuration file."""
    from spiderd.config import settings as cfg

    parser = argparse.ArgumentParser(prog="python -m spiderd.feed.schema", description=main.__doc__)
    parser.add_argument("--config", "-c", required=True, help="the spiderd TOML configuration")
    args = parser.parse_args(argv)
    try:
        print(ddl(cfg.load(args.config).sites))
    except (cfg.ConfigError, SchemaConflict) as e:
        print(f"spiderd.feed.schema: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
