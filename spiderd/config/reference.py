"""The configuration reference, from its one source: the annotated file (``etc/spiderd.toml``) and the code.

Each fact has one home.  The keys and their kinds are the schema's (:mod:`spiderd.config.schema`), the defaults
the sections' dataclasses' (:mod:`spiderd.config.sections`), and each key's description is its comment in the
annotated file: ``key = value  # what it does``, continued on indented comment lines below.  A table's comment is
the block just above its header, its header line's comment, and the block just below it.  A value shown is the
default unless its comment starts with ``example`` or says ``(example)``.

:func:`problems` says what is out of step (a key without its description, a value shown that is not the
default, a key the code does not know); the tests hold it empty.  :func:`markdown` is the reference page the
documentation site builds (``docs/conf.py``); ``python -m spiderd.config.reference [FILE]`` prints it.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Sequence

from spiderd.config.convert import (DURABILITY, FEED_FORMATS, HOST_KEYS, POLITENESS, POOL_BACKENDS, ROLES, ConfigError,
                                    convert)
from spiderd.config.schema import SCHEMA, SITE_KEYS
from spiderd.config.settings import SECTIONS
from spiderd.config.sites import load_sites
from spiderd.core.rules import MAX_HOPS, SITEMAP_MAX_SIZE, SITEMAP_MAX_URLS, Site

__all__ = ["Annotated", "Entry", "KINDS", "markdown", "problems", "read"]

KINDS: dict[str, str] = {  # a schema kind, as the reader is told it
    "str": "string",
    "bool": "boolean",
    "role": " or ".join(f'"{r}"' for r in ROLES),
    "backend": " or ".join(f'"{b}"' for b in POOL_BACKENDS),
    "feed_format": " or ".join(f'"{f}"' for f in FEED_FORMATS),
    "politeness": " or ".join(f'"{p}"' for p in POLITENESS),
    "durability": " or ".join(f'"{d}"' for d in DURABILITY),
    "positive": "number > 0",
    "non_negative": "number >= 0",
    "delay_factor": "number 0..1000",
    "count": "integer >= 0",
    "percent": "integer 1..100",
    "positive_int": "integer >= 1",
    "urls": "list of http(s) URLs",
    "header": "string (one line)",
    "addresses": "list of IP addresses",
    "workers": "integer -1..64",
    "store_url": 'sqlite:// or mysql:// URL, a list of mysql:// URLs (shards), or "none"',
    "preset": '"fast" or an integer 0..9',
    "hosts": 'tables [fetch.hosts."NAME"]',
    "redis_url": "redis:// or redis+cluster:// URL",
    "targets": 'list of "local", "HOST:PORT" or "http://[USER:PASS@]HOST:PORT"',
    "name": "name (letters, digits, _ . -)",
    "port": "integer -1..65535",
    "setting_bytes": "integer 4096..131000",
    "cron": "cron or Quartz expression",
    "ratio": "number 0..1",
    "api_port": "integer 0..65535",
    "listen": "Twisted server endpoint string",
    "backlog": "integer 1..65535",
    "token": "string (printable ASCII, no spaces)",
    "abs_dirs": "list of absolute directories",
    "bucket_bits": "integer 14..24",
    "partitions": "integer 1..1024",
    "feed_template": "file://, ftp://, ftps:// or sftp:// URI template (%(batch)s, %(name)s, %(site)s, %(node)s, "
                     "%(time)s, %(date)s, %(hour)s)",
    "readable_file": 'path of a readable file, or ""',
    "ca_file": 'path of a PEM file of CA certificates, or "" (the system\'s)',
    "url_paths": "list of paths",
    "max_hops": f"integer 0..{MAX_HOPS}",
    "sitemap_urls": f"integer 1..{SITEMAP_MAX_URLS}",
    "sitemap_size": f"integer 1..{SITEMAP_MAX_SIZE}",
}
SITE_KINDS = {  # the keys of a [[sites]] table (spiderd.config.sites), as the reader is told them
    "name": "string", "allowed_hosts": "list of host names", "list_urls": "list of regexes",
    "detail_urls": "list of regexes", "fields": "table: field name -> selector",
    "follow_detail_links": "boolean", "recrawl_list": "number >= 0", "recrawl_detail": "number >= 0",
    "headers": "table: header name -> value", "proxy": "http://[USER:PASS@]HOST:PORT", "cookies": "boolean",
    "max_hops": f"integer 0..{MAX_HOPS}", "render": '"never", "always" or "auto"', "render_wait": "CSS selector",
    "render_hosts": "list of host names", "start_urls": "list of http(s) URLs",
}
HOST_KINDS = {"delay": "number >= 0", "concurrency": "integer >= 1", "delay_factor": "number 0..1000",
              "min_delay": "number >= 0", "max_delay": "number >= 0"}
HOST_DEFAULTS = {"delay": "0", "concurrency": "1"}  # the others: [fetch]'s
SUBTABLES = {"fetch.hosts": ("fetch", "hosts"), "sites.fields": ("sites", "fields")}  # a table that is a key

_HEADER = re.compile(r"^(\[\[?)\s*([^\]]+?)\s*(\]\]?)\s*(?:#\s?(.*))?$")
_KEY = re.compile(r"^([A-Za-z0-9_-]+)\s*=")
_EXAMPLE = re.compile(r"^example\b:?\s*|\s*\(example\)")


@dataclass(frozen=True)
class Entry:
    """One key of the annotated file: the value as written, and what its comment says."""

    table: str  # "pool", "fetch.hosts", "sites", "sites.fields"
    key: str
    value: str  # the TOML text
    description: str
    example: bool  # the value is an example, not the default

    @property
    def parsed(self) -> Any:
        """The value, as TOML reads it."""
        return tomllib.loads(f"v = {self.value}")["v"]


@dataclass(frozen=True)
class Annotated:
    """The annotated file, read: each key (by table and key) and each table's own comment."""

    entries: dict[tuple[str, str], Entry]
    notes: dict[str, str]

    def describe(self, table: str, key: str) -> str:
        """What the file says of ``table.key`` ("" when nothing): its comment, or the comment of its table."""
        entry = self.entries.get((table, key))
        if entry is not None:
            return entry.description
        for sub, (parent, name) in SUBTABLES.items():
            if (parent, name) == (table, key):
                return self.notes.get(sub, "")
        return ""


def read(text: str) -> Annotated:
    """The entries and table notes of an annotated configuration file."""
    keys: list[tuple[str, str, str, list[str]]] = []  # table, key, value, comment lines
    notes: dict[str, list[str]] = {}
    table, above, current, heading = "", [], None, False  # type: str, list[str], list[str] | None, bool
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = _HEADER.match(stripped)
        if header:
            table = _table_name(header.group(2))
            notes[table] = current = [*above, *([header.group(4)] if header.group(4) else [])]
            above, heading = [], True
        elif not stripped:
            above, current, heading = [], None, False
        elif stripped.startswith("#"):
            comment = stripped[1:].strip()
            if heading:  # the table's own comment, between its header and its first key
                notes[table].append(comment)
            elif line.startswith("#"):  # at the margin: ends a key's comment; may be the next table's
                above, current = [*above, comment], None
            elif current is not None:  # indented: continues the key's comment
                current.append(comment)
        else:
            key, value, comment = _split(line, number)
            current = [comment] if comment else []
            keys.append((table, key, value, current))
            above, heading = [], False
    entries = {(t, key): _entry(t, key, value, lines) for t, key, value, lines in keys}
    return Annotated(entries, {name: _join(lines) for name, lines in notes.items()})


def _split(line: str, number: int) -> tuple[str, str, str]:
    """A ``key = value  # comment`` line: its key, its value as written, and its comment."""
    body = line.strip()
    match = _KEY.match(body)
    if match is None:
        raise ConfigError(f"line {number}: expected 'key = value  # description'")
    for cut in [m.start() for m in re.finditer("#", body)] + [len(body)]:
        try:
            tomllib.loads(body[:cut])
        except tomllib.TOMLDecodeError:
            continue
        return match.group(1), body[:cut].split("=", 1)[1].strip(), body[cut + 1:].strip()
    raise ConfigError(f"line {number}: one key = value a line (no value spanning lines)")


def _entry(table: str, key: str, value: str, lines: Sequence[str]) -> Entry:
    """The entry, its description joined from its comment lines, its value an example or the default."""
    text = _join(lines)
    example = bool(_EXAMPLE.search(text))
    return Entry(table, key, value, _EXAMPLE.sub(" ", text).strip() if example else text, example)


def _join(lines: Sequence[str]) -> str:
    return " ".join(line for line in lines if line).strip()


def _table_name(header: str) -> str:
    """``fetch.hosts."www.example.com"`` -> ``fetch.hosts``; ``sites`` and ``sites.fields`` as they are."""
    return ".".join(part for part in re.findall(r'"[^"]*"|[^.]+', header) if not part.startswith('"'))


def problems(annotated: Annotated) -> list[str]:
    """What is out of step between the annotated file and the code: keys without a description, values shown
    that are not the defaults, keys the code does not know.  Empty when the two agree."""
    found: list[str] = []
    for section, keys in SCHEMA.items():
        defaults = SECTIONS[section]()
        for key, kind in keys.items():
            found += _check(annotated, section, key, lambda value, k=kind, s=section, n=key: (
                convert(k, value, f"{s}.{n}") == getattr(defaults, n)))
    site = Site("x", ("x",))
    for key in sorted(SITE_KEYS):
        found += _check(annotated, "sites", key, lambda value, n=key: (
            getattr(load_sites([{"name": "x", "allowed_hosts": ["x"], n: value}], "")[0], n) == getattr(site, n)))
    for key in HOST_KEYS:
        found += _check(annotated, "fetch.hosts", key, lambda value: True)
    for table, key in annotated.entries:
        known = set(SCHEMA.get(table, {})) | (SITE_KEYS if table == "sites" else set()) | (
            set(HOST_KEYS) if table == "fetch.hosts" else set())
        if table != "sites.fields" and key not in known:
            found.append(f"{table}.{key}: not a key spiderd knows")
    return found


def _check(annotated: Annotated, table: str, key: str, is_default: Any) -> list[str]:
    """``table.key`` is described, and its value shown is the default unless marked as an example."""
    if not annotated.describe(table, key):
        return [f"{table}.{key}: no description (a comment after its value in the annotated file)"]
    entry = annotated.entries.get((table, key))
    if entry is None or entry.example:
        return []
    try:
        same = is_default(entry.parsed)
    except ConfigError as e:
        return [f"{table}.{key}: the value shown is refused: {e}"]
    return [] if same else [f"{table}.{key}: the value shown, {entry.value}, is not the default (or mark it example)"]


def markdown(annotated: Annotated, source: str = "etc/spiderd.toml") -> str:
    """The configuration reference as a MyST page: a section per table, a ``confval`` per key."""
    out = ["# Configuration reference", "",
           f"Every key of spiderd's configuration file, generated from `{source}` (each key's comment) and "
           "`spiderd/config/` (its kind and default), so this page, the annotated file and the code say the same. "
           "Every key is optional. An unknown key, or a value of the wrong kind, stops spiderd before it starts "
           "with one line naming the file and the key (exit status 2).", ""]
    for section, keys in SCHEMA.items():
        out += _section(annotated, f"[{section}]", section, _doc(SECTIONS[section]))
        for key, kind in keys.items():
            if key == "hosts":
                continue
            entry = annotated.entries[(section, key)]
            out += _confval(f"{section}.{key}", KINDS[kind], _default(entry, getattr(SECTIONS[section](), key)),
                            entry.description)
        if section == "fetch":
            out += _section(annotated, '[fetch.hosts."NAME"]', "fetch.hosts", "", level=3)
            for key in HOST_KEYS:
                entry = annotated.entries[("fetch.hosts", key)]
                out += _confval(f"fetch.hosts.{key}", HOST_KINDS[key], HOST_DEFAULTS.get(key, ""), entry.description)
    out += _section(annotated, "[[sites]]", "sites", "One table per site crawled.")
    site = Site("x", ("x",))
    for key in sorted(SITE_KEYS, key=_site_order):
        if key == "fields":
            out += _confval("sites.fields", SITE_KINDS[key], "", annotated.describe("sites", "fields"))
            continue
        entry = annotated.entries[("sites", key)]
        out += _confval(f"sites.{key}", SITE_KINDS[key], _default(entry, getattr(site, key, None)),
                        entry.description)
    return "\n".join(out).rstrip() + "\n"


def _site_order(key: str) -> int:
    order = ["name", "allowed_hosts", "list_urls", "detail_urls", "fields"]
    return order.index(key) if key in order else len(order)


def _doc(section: type[Any]) -> str:
    """The first line of a section dataclass's docstring, its ``[name]`` prefix dropped."""
    first = (section.__doc__ or "").strip().splitlines()[0]
    text = re.sub(r"^``\[[^\]]+\]``(?: and [^:]+)?:\s*", "", first).rstrip(".")
    return _escape(text[:1].upper() + text[1:] + ".")


def _section(annotated: Annotated, title: str, table: str, doc: str, level: int = 2) -> list[str]:
    note = annotated.notes.get(table, "")
    text = " ".join(part for part in (doc, _escape(note)) if part)
    return ["#" * level + f" `{title}`", "", *([text, ""] if text else [])]


def _default(entry: Entry, code_default: Any) -> str:
    """The default as written in TOML: the file's value when it is the default, else the code's."""
    if not entry.example:
        return entry.value
    if code_default in ((), "", None) or code_default == {}:
        return '""' if code_default == "" else "[]" if code_default == () else ""
    return repr(code_default)


def _confval(name: str, kind: str, default: str, description: str) -> list[str]:
    lines = ["```{confval} " + name, "---", f"type: {json.dumps(_escape(kind))}"]  # JSON is YAML: quotes kept
    if default:
        lines.append(f"default: {json.dumps(_code(default))}")
    text = _escape(description[:1].upper() + description[1:])
    return [*lines, "---", text or "(no description)", "```", ""]


def _code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}" if not text.startswith("`") else f"{fence} {text} {fence}"


def _escape(text: str) -> str:
    """Plain text made safe for Markdown: every punctuation mark Markdown acts on is escaped."""
    return re.sub(r"([\\`*_{}\[\]<>#|$~])", r"\\\1", text)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spiderd.config.reference [FILE]``: the reference page, or the problems (exit status 1)."""
    args = list(sys.argv[1:] if argv is None else argv)
    path = Path(args[0] if args else "etc/spiderd.toml")
    annotated = read(path.read_text(encoding="utf-8"))
    found = problems(annotated)
    if found:
        print("\n".join(found), file=sys.stderr)
        return 1
    sys.stdout.write(markdown(annotated, str(path)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
