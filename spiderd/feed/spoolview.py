"""The shipper's files as the operator sees them (``/api/status``'s ``feeds.files``, the status page's "Feed
files", the worker's jobs table): refused files first (newest first, at most half the rows), then the waiting
ones, the most failed attempts first, then the oldest.  Targets and errors never show a password."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable
from typing import Any

from spiderd.core.secrets import redact

FILES_SHOWN = 20  # rows in feeds.files
REFUSED_KEPT = 50  # refused files a shipper remembers (in memory: bad/ holds them all)


class RefusedFiles:
    """The last files the shipper refused (bad JSON lines, final name taken, unreadable at start)."""

    def __init__(self, size: int = REFUSED_KEPT) -> None:
        self._rows: deque[dict[str, Any]] = deque(maxlen=size)

    def add(self, name: str, target: str | None, attempts: int, since: float | None, error: str, at: float) -> None:
        self._rows.append({"name": name, "target": redact(target) if target else None, "state": "refused",
                           "attempts": attempts, "since": since, "next_attempt_in": None, "error": error, "at": at})

    def newest(self, limit: int) -> list[dict[str, Any]]:
        return [dict(r) for r in list(self._rows)[::-1][:max(0, limit)]]

    def names(self) -> set[str]:
        return {r["name"] for r in self._rows}


def waiting_row(entry: Any, now: float) -> dict[str, Any]:
    """A spooled file: being uploaded, waiting out a back-off after a failed attempt, or queued for a slot."""
    timer = entry.timer
    retry = timer.getTime() - now if timer is not None and timer.active() else None
    state = "uploading" if entry.busy else ("retrying" if retry is not None else "queued")
    return {"name": entry.name, "target": redact(entry.target), "state": state, "attempts": entry.attempts,
            "since": entry.first_seen, "next_attempt_in": None if retry is None else round(max(0.0, retry), 3),
            "error": entry.error}


def file_rows(entries: Iterable[Any], refused: RefusedFiles, now: float, limit: int = FILES_SHOWN) -> list[dict[str, Any]]:
    """At most ``limit`` rows: refused files (newest first, up to half of them), then the waiting ones."""
    rows = refused.newest(limit // 2)
    waiting = heapq.nsmallest(limit - len(rows), entries, key=lambda e: (-e.attempts, e.first_seen, e.id))
    return rows + [waiting_row(e, now) for e in waiting]
