"""The feed shipper's spool on disk, and what is done to its files (blocking: the shipper runs it on its lane).

The layout, under ``spool_dir``::

    incoming/          callers may write here, so that ship()'s move is a rename
    queue/<id>.json    sidecar: target URI, original name, attempts, first seen, rename_sent, partition window
    queue/<id>.jl      the file (JSON lines, or WARC for a ``.warc.gz`` target)
    bad/<id>.*         refused files (bad JSON lines, or final name taken), with a ``.reason``

:meth:`FeedSpool.put` writes the sidecar first (temp file, fsync, rename), then moves the file in;
:meth:`FeedSpool.remove` removes the file before the sidecar.  So at start (:meth:`FeedSpool.recover`):
sidecar and file -> resume; a sidecar alone -> the move never happened or the upload had finished ->
removed; a file alone cannot come from this code -> quarantined, never deleted; ``*.tmp`` -> half-written,
removed.  The sidecar holds the FTP password, so the spool is 0700.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from dataclasses import dataclass
from typing import Any

from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from spiderd.core.feeduri import parse_target
from spiderd.core.fsutil import fsync_dir, fsync_file, unlink_quietly, write_atomically
from spiderd.core.secrets import redact
from spiderd.feed.transport import Abort

log = Logger()


@dataclass(slots=True, eq=False)
class SpoolEntry:
    """One spooled file: what its sidecar holds, and its upload state (in memory only)."""

    id: str
    target: str
    name: str
    first_seen: float
    attempts: int = 0
    rename_sent: bool = False
    delay: float = 0.0
    warned: bool = False
    busy: bool = False
    timer: IDelayedCall | None = None
    abort: Abort | None = None
    error: str | None = None  # the last failed attempt's, without a password
    window: tuple[float, float] | None = None  # the time window of the partition it lands in (None: none)
    records: int | None = None  # the records its check counted when this process spooled it (None: not yet)

    def record(self) -> dict[str, Any]:
        """The sidecar's content."""
        return {"target": self.target, "name": self.name, "attempts": self.attempts,
                "first_seen": self.first_seen, "rename_sent": self.rename_sent,
                "window": list(self.window) if self.window else None}


class FeedSpool:
    """The spool's three directories; every method blocks."""

    def __init__(self, spool_dir: str) -> None:
        self.spool_dir = spool_dir
        self.incoming_dir = os.path.join(spool_dir, "incoming")
        self.queue_dir = os.path.join(spool_dir, "queue")
        self.bad_dir = os.path.join(spool_dir, "bad")

    def path(self, stem: str, ext: str) -> str:
        """A file of the queue."""
        return os.path.join(self.queue_dir, stem + ext)

    def recover(self) -> tuple[list[SpoolEntry], list[tuple[str, str]]]:
        """The directories made, half-written files dropped, bad entries quarantined: the entries to resume
        (oldest first), and the (stem, reason) of each quarantined one."""
        for path in (self.incoming_dir, self.queue_dir, self.bad_dir):
            os.makedirs(path, mode=0o700, exist_ok=True)
        names = set(os.listdir(self.queue_dir))
        entries: list[SpoolEntry] = []
        refused: list[tuple[str, str]] = []
        for name in sorted(names):
            stem, ext = os.path.splitext(name)
            if ext == ".tmp":
                os.unlink(os.path.join(self.queue_dir, name))
            elif ext == ".json" and stem + ".jl" not in names:
                os.unlink(os.path.join(self.queue_dir, name))
            elif ext == ".json":
                entries.extend(self._load(stem, refused))
            elif ext == ".jl" and stem + ".json" not in names:
                self._refuse(stem, "a spooled file without its sidecar (the target is unknown)", refused)
        return sorted(entries, key=lambda e: (e.first_seen, e.id)), refused

    def _load(self, stem: str, refused: list[tuple[str, str]]) -> list[SpoolEntry]:
        try:
            with open(self.path(stem, ".json"), encoding="utf-8") as f:
                raw = json.load(f)
            entry = SpoolEntry(stem, raw["target"], raw["name"], float(raw["first_seen"]),
                               int(raw["attempts"]), bool(raw.get("rename_sent")))
            if raw.get("window"):
                start, end = raw["window"]
                entry.window = (float(start), float(end))
            parse_target(entry.target)
        except (ValueError, KeyError, TypeError) as e:
            self._refuse(stem, f"unreadable sidecar: {redact(str(e))}", refused)
            return []
        return [entry]

    def _refuse(self, stem: str, reason: str, refused: list[tuple[str, str]]) -> None:
        self.quarantine(stem, reason)
        refused.append((stem, reason))
        log.error("Spooled feed file {id} moved to {bad}: {reason}", id=stem, bad=self.bad_dir, reason=reason)

    def put(self, entry: SpoolEntry, local_path: str) -> None:
        """Spool ``local_path`` as ``entry``: its sidecar first, then the file."""
        sidecar = self.path(entry.id, ".json")
        write_atomically(sidecar, json.dumps(entry.record()).encode())
        try:
            _move(local_path, self.path(entry.id, ".jl"))
        except OSError:
            unlink_quietly(sidecar)
            raise
        fsync_dir(self.queue_dir)

    def save(self, entry: SpoolEntry, **changes: Any) -> None:
        """Rewrite ``entry``'s sidecar (with ``changes`` over its record)."""
        write_atomically(self.path(entry.id, ".json"), json.dumps(dict(entry.record(), **changes)).encode())

    def remove(self, entry: SpoolEntry) -> None:
        """Forget a shipped entry: the file first, the sidecar last."""
        os.unlink(self.path(entry.id, ".jl"))
        os.unlink(self.path(entry.id, ".json"))

    def quarantine(self, stem: str, reason: str) -> None:
        """Move a spool entry into ``bad/`` with a ``.reason`` file."""
        with open(os.path.join(self.bad_dir, stem + ".reason"), "w", encoding="utf-8") as f:
            f.write(reason + "\n")
        for ext in (".jl", ".json"):
            if os.path.exists(self.path(stem, ext)):
                os.replace(self.path(stem, ext), os.path.join(self.bad_dir, stem + ext))


def _move(src: str, dst: str) -> None:
    """Rename, or copy then remove across filesystems."""
    try:
        os.replace(src, dst)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        shutil.copyfile(src, dst + ".tmp")
        fsync_file(dst + ".tmp")
        os.replace(dst + ".tmp", dst)
        os.unlink(src)
