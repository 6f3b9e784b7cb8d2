"""The sites API's book: each site's table, changed one site at a time, kept in the data directory, with a history.

A ``PUT`` gives a site's whole table, as one ``[[sites]]`` table of the file takes it; it replaces the site of that
name (the file's, or one added earlier) or adds it.  A ``DELETE`` removes the site.  Either is a new sites overlay
(:mod:`spiderd.config.overlay`) over the file's sites, validated with the whole configuration exactly as the file is
(:func:`spiderd.config.settings.from_dict`), written to ``sites-overlay.json`` (atomically) before it takes effect,
and then applied by :class:`~spiderd.ops.liveconfig.LiveConfig`: a change the validator refuses changes nothing.  The
overlay is read at each start (:func:`spiderd.config.settings.with_overlay`) and at each reload, so the API's changes
survive both; a site's table in the file is shadowed while the overlay names it.

Every applied change of a site (by the API, or by a reload) is a line of ``sites-history.jsonl``: its time, who made
it (the credential's user name, ``token`` for the bearer token, ``loopback`` without credentials, ``SIGHUP``), what,
the keys it changed, and the version of the rules it made.  The newest HISTORY_PER_SITE changes of each site are
kept (the file is rewritten without the older ones once a site has SLACK more).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any, Callable, Protocol

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from spiderd.config import settings as cfg
from spiderd.config.changes import changed_sites
from spiderd.config.overlay import HISTORY_PER_SITE, OVERLAY_FILE, write_overlay
from spiderd.core.fsutil import write_atomically
from spiderd.ops.liveconfig import LiveConfig

log = Logger()

HISTORY_FILE = "sites-history.jsonl"
SLACK = HISTORY_PER_SITE // 10  # a site's entries past the cap the file holds before it is rewritten
NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


class SiteError(ValueError):
    """A change the book refuses before validation (no such site, a bad name or body)."""


class Shared(Protocol):
    """Where a fleet keeps its sites (:class:`spiderd.frontier.sharedsites.SharedSites`, on a Redis pool); it calls
    ``take`` with the fleet's overlay when another node changed it, and reads this node's with ``current``."""

    take: Callable[[dict[str, dict[str, Any] | None]], Deferred[Any]] | None
    current: Callable[[], Mapping[str, Any]]

    def publish(self, name: str, table: dict[str, Any] | None) -> Deferred[None]: ...

    def record(self, entries: list[dict[str, Any]]) -> Deferred[None]: ...

    def history(self, name: str) -> Deferred[list[dict[str, Any]]]: ...


class SiteBook:
    """The sites of a running node by name: read, put, delete, and their history (see the module's docstring)."""

    def __init__(self, live: LiveConfig, shared: Shared | None = None) -> None:
        """``shared``: the fleet's store of the sites (a change made here is published there, and its history is
        kept there); None: this node's data directory only."""
        self._live = live
        self._shared = shared
        if shared is not None:
            shared.take = self.take
            shared.current = lambda: live.settings.overlay
        data = live.settings.spiderd
        self.overlay_path = data.path(OVERLAY_FILE)
        self.history_path = data.path(HISTORY_FILE)
        live.listeners.append(self._record)

    @property
    def rules_digest(self) -> str:
        """The version of the rules in force."""
        return self._live.rules.digest

    def restart_needed(self) -> list[str]:
        """The keys changed since the start that wait for the next one."""
        return self._live.restart_needed()

    def tables(self) -> dict[str, dict[str, Any]]:
        """Every site's table as it is in force (the file's, or the overlay's), by name, in order."""
        return self._live.site_tables()

    def origin(self, name: str) -> str:
        """Where a site's table comes from: ``api`` (the overlay) or ``file``."""
        return "api" if self._live.settings.overlay.get(name) is not None else "file"

    def put(self, name: str, table: Any, user: str) -> Deferred[list[str]]:
        """Replace (or add) the site ``name``; fires with the changed keys, or fails with a ConfigError."""
        _check_name(name)
        if not isinstance(table, dict):
            raise SiteError("the body must be a JSON object: the site's table, as one [[sites]] table of the file")
        if table.get("name", name) != name:
            raise SiteError(f"the table's name {table['name']!r} is not the site's name {name!r} in the path")
        return self._change(name, {k: v for k, v in table.items() if k != "name"}, user, "put")

    def delete(self, name: str, user: str) -> Deferred[list[str]]:
        """Remove the site ``name``; fires with the changed keys."""
        if name not in self.tables():
            raise SiteError(f"no site named {name!r}")
        return self._change(name, None, user, "delete")

    def history(self, name: str) -> Deferred[list[dict[str, Any]]]:
        """The changes of ``name``, oldest first (at most the HISTORY_PER_SITE newest); read on the lane."""
        if self._shared is not None:
            return self._shared.history(name).addCallback(lambda entries: entries[-HISTORY_PER_SITE:])
        return self._live.lane.run(_read_history, self.history_path, name)

    def take(self, overlay: dict[str, dict[str, Any] | None]) -> Deferred[list[str]]:
        """Take the fleet's overlay (another node changed a site), validated with this node's file."""
        live, path = self._live, self.overlay_path

        def build() -> cfg.Settings:
            running = live.settings
            fresh = cfg.from_dict(running.raw, running.source, None, overlay)
            write_overlay(path, overlay)
            return fresh

        d = live.change(build, "Sites: a change of the fleet", who=("fleet", "sync"))
        return d.addErrback(_refused)

    def _change(self, name: str, table: dict[str, Any] | None, user: str, action: str) -> Deferred[list[str]]:
        live, path = self._live, self.overlay_path

        def build() -> cfg.Settings:  # on the lane, the change's turn come: live.settings are the running ones
            running = live.settings
            overlay = dict(running.overlay)
            if table is None and not _in_file(running, name):
                overlay.pop(name, None)
            else:
                overlay[name] = table
            fresh = cfg.from_dict(running.raw, running.source, None, overlay)
            write_overlay(path, overlay)
            return fresh

        d = live.change(build, f"Sites API: {action} {name!r} by {user}", who=(user, action))
        shared = self._shared
        if shared is not None:
            d.addCallback(lambda keys: shared.publish(name, table).addCallback(lambda _: keys))
        return d

    def _record(self, fresh: cfg.Settings, keys: list[str], who: tuple[str, str]) -> None:
        """A change was applied: one history line per site it changed (written on the lane)."""
        user, action = who
        if action == "sync":
            return  # the node that made the change keeps its history
        entries = [{"time": round(self._live.changed_at or 0.0, 3), "user": user, "action": action, "site": name,
                    "keys": [k for k in keys if k.startswith(f"sites.{name}.")], "rules": self._live.rules.digest}
                   for name in changed_sites(keys)]
        if not entries:
            return
        if self._shared is not None:
            d = self._shared.record(entries)
        else:
            d = self._live.lane.run(_append, self.history_path, entries)
        d.addErrback(lambda f: log.failure("Sites: cannot write the history", f))


def _refused(failure: Any) -> list[str]:
    """The fleet's sites do not validate with this node's file: nothing changed (logged, and in the status)."""
    failure.trap(cfg.ConfigError)
    return []


def _check_name(name: str) -> None:
    if not NAME.fullmatch(name):
        raise SiteError(f"a site's name is 1 to 100 letters, digits, '_', '.' or '-', got {name[:100]!r}")


def _in_file(settings: cfg.Settings, name: str) -> bool:
    return any(isinstance(t, dict) and t.get("name") == name for t in settings.raw.get("sites", []))


def _append(path: str, entries: list[dict[str, Any]]) -> None:
    """Thread: append ``entries``; a site past HISTORY_PER_SITE (and SLACK) entries has its oldest dropped (the file
    rewritten, atomically, with the newest HISTORY_PER_SITE of each site)."""
    with open(path, "a", encoding="utf-8") as f:
        for entry in entries:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    entries = _entries(path)
    if max(Counter(entry.get("site") for entry in entries).values(), default=0) > HISTORY_PER_SITE + SLACK:
        kept = _newest(entries, HISTORY_PER_SITE)
        write_atomically(path, "".join(json.dumps(e, sort_keys=True) + "\n" for e in kept).encode(), mode=0o644)


def _newest(entries: list[dict[str, Any]], cap: int) -> list[dict[str, Any]]:
    """The newest ``cap`` entries of each site, oldest first."""
    seen: Counter[Any] = Counter()
    kept = []
    for entry in reversed(entries):
        seen[entry.get("site")] += 1
        if seen[entry.get("site")] <= cap:
            kept.append(entry)
    return kept[::-1]


def _entries(path: str) -> list[dict[str, Any]]:
    """Thread: every entry of the history file, oldest first (a line cut by a crash left out)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except FileNotFoundError:
        return []
    found = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:  # a line cut by a crash
            continue
        if isinstance(entry, dict):
            found.append(entry)
    return found


def _read_history(path: str, name: str) -> list[dict[str, Any]]:
    return [entry for entry in _entries(path) if entry.get("site") == name][-HISTORY_PER_SITE:]
