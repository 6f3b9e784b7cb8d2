"""The sites overlay: ``[[sites]]`` tables changed at run time (the sites API), kept in the data directory.

The overlay maps a site's name to its whole table (as ``[[sites]]`` takes it), or to None for a site removed.  The
file's sites are merged under it: a site the overlay names is replaced by its table (or dropped), in its place; the
overlay's new sites follow the file's, in the order they were added.  The merged list is then validated as the file
is (:func:`spiderd.config.settings.from_dict`), so a table the API takes is one the file could hold.  The overlay is
the JSON file ``sites-overlay.json`` of the data directory: ``{"sites": {"NAME": {...} | null}}``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from spiderd.config.convert import ConfigError

OVERLAY_FILE = "sites-overlay.json"
HISTORY_PER_SITE = 1000  # changes of one site its history keeps (and lists), the newest: in the data directory or Redis
Overlay = Mapping[str, "dict[str, Any] | None"]  # a site's name -> its table, or None: removed


def merge_sites(tables: list[Any], overlay: Overlay, source: str) -> tuple[list[Any], list[str]]:
    """The file's ``[[sites]]`` tables with the overlay's over them, and where each comes from (for errors:
    ``FILE: sites[i]`` or ``OVERLAY: sites.NAME``)."""
    merged: list[Any] = []
    labels: list[str] = []
    for i, table in enumerate(tables):
        name = table.get("name") if isinstance(table, dict) else None
        if isinstance(name, str) and name in overlay:
            continue
        merged.append(table)
        labels.append(f"{source}: sites[{i}]")
    for name, table in overlay.items():
        if table is not None:
            merged.append({**table, "name": name})
            labels.append(f"{OVERLAY_FILE}: sites.{name}")
    return merged, labels


def read_overlay(path: str) -> dict[str, dict[str, Any] | None]:
    """The overlay kept at ``path`` ({} when there is none); ConfigError naming the file when it is unreadable."""
    try:
        with open(path, "rb") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read the sites overlay: {e} (move it away to start from the file's "
                          "sites alone)") from None
    sites = data.get("sites") if isinstance(data, dict) else None
    if not isinstance(sites, dict) or not all(t is None or isinstance(t, dict) for t in sites.values()):
        raise ConfigError(f"{path}: expected {{\"sites\": {{NAME: table or null}}}}")
    return sites


def write_overlay(path: str, overlay: Overlay) -> None:
    """Write the overlay atomically (a temporary file, flushed and synced, renamed over the old one)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"sites": dict(overlay)}, f, indent=1, sort_keys=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
