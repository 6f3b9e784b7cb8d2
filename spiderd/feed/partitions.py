"""Partitions of the feed and their completion marker.

A feed URI template whose directory names ``%(hour)s`` (or ``%(date)s``) puts each file into the partition of its
hour (or day): ``.../dt=2026-12-05/hour=10/``.  The shipper remembers, in ``partitions.json`` in its spool, every
file it shipped into a partition (name, records, bytes, SHA-256).  A partition is *closed* once its window has
passed (plus ``grace`` seconds), no job that renders into it is still running (its *holds*, see :meth:`hold`) and
none of its files waits in the spool.  Then the shipper writes ``_MANIFEST.json`` (the files, their records, bytes
and SHA-256) and after it ``_SUCCESS`` (empty), each under a temporary name and renamed.  A file that lands after
the marker (a worker that restarted) reopens the partition: ``_SUCCESS`` is removed first, the manifest rewritten,
``_SUCCESS`` written again.

Until :meth:`Partitions.arm` is called (the worker calls it once its jobs are loaded and hold their partitions),
no partition closes: a restart never writes a marker before the files a running job will still ship.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from spiderd.core.feeduri import Target, parse_target
from spiderd.core.fsutil import fsync_dir, write_atomically
from spiderd.core.secrets import redact
from spiderd.feed.transport import Abort, Session, TransportOptions, open_session

MANIFEST = "_MANIFEST.json"
SUCCESS = "_SUCCESS"
VERSION = 1
KEEP = 7 * 86400  # seconds a closed partition is remembered after its window (a late file after it gets no marker)


def partition_of(uri: str) -> str:
    """The partition's key: the target URI up to its directory (with the password: it stays in the spool)."""
    return uri.rsplit("/", 1)[0] + "/"


@dataclass(slots=True)
class Partition:
    """One partition: its time window, the files shipped into it, and how many the last marker counted."""

    start: float
    end: float
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    marked: int = -1  # files listed by the marker written last; -1: none written

    def record(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "files": list(self.files.values()), "marked": self.marked}


class Ledger:
    """``partitions.json``: the partitions and their files; every method blocks (the shipper's lane)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.partitions: dict[str, Partition] = {}
        self.lock = threading.Lock()  # uploads add files on the lane's threads; the reactor reads

    def load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                raw = json.load(f)
        except FileNotFoundError:
            return
        for key, value in raw.get("partitions", {}).items():
            files = {entry["name"]: entry for entry in value["files"]}
            self.partitions[key] = Partition(float(value["start"]), float(value["end"]), files, int(value["marked"]))

    def save(self) -> None:
        data = {"version": VERSION, "partitions": {k: p.record() for k, p in self.partitions.items()}}
        write_atomically(self.path, json.dumps(data, sort_keys=True).encode())

    def add(self, uri: str, window: tuple[float, float], path: str, records: int) -> None:
        """The file ``path`` shipped as ``uri`` into its partition of ``window`` (again: the same entry)."""
        name = uri.rsplit("/", 1)[1]
        entry = {"name": name, "records": records, "bytes": os.path.getsize(path), "sha256": _sha256(path)}
        with self.lock:
            self.partitions.setdefault(partition_of(uri), Partition(*window)).files[name] = entry
            self.save()

    def snapshot(self, key: str) -> Partition:
        """A copy of partition ``key`` as it is now."""
        with self.lock:
            part = self.partitions[key]
            return Partition(part.start, part.end, dict(part.files), part.marked)

    def marked(self, key: str, count: int) -> None:
        with self.lock:
            self.partitions[key].marked = count
            self.save()

    def forget_before(self, now: float) -> None:
        """Drop partitions marked and past their window by more than KEEP."""
        with self.lock:
            old = [k for k, p in self.partitions.items() if p.marked == len(p.files) and p.end + KEEP < now]
            for key in old:
                del self.partitions[key]
            if old:
                self.save()


class Partitions:
    """What the shipper knows of its partitions: the ledger, the holds of running jobs, and which may close."""

    def __init__(self, spool_dir: str, grace: float) -> None:
        self.ledger = Ledger(os.path.join(spool_dir, "partitions.json"))
        self.grace = grace
        self.armed = False
        self._holds: dict[str, str] = {}  # holder (a job id) -> partition

    def arm(self) -> None:
        """Partitions may close from now on (every running job holds its own)."""
        self.armed = True

    def hold(self, holder: str, uri: str) -> None:
        """``holder`` (a job) will ship into ``uri``'s partition: it stays open until :meth:`release`."""
        self._holds[holder] = partition_of(uri)

    def release(self, holder: str) -> None:
        self._holds.pop(holder, None)

    def due(self, now: float, spooled: Callable[[str], bool]) -> list[str]:
        """The partitions to mark now: window passed, not held, nothing spooled for them, not marked as they are."""
        if not self.armed:
            return []
        held = set(self._holds.values())
        with self.ledger.lock:
            return [key for key, part in self.ledger.partitions.items()
                    if part.end + self.grace <= now and part.marked != len(part.files) and key not in held
                    and not spooled(key)]


def write_marker(key: str, part: Partition, options: TransportOptions, abort: Abort, now: float,
                 reactor: Any = None) -> None:
    """Blocking: ``_SUCCESS`` removed, ``_MANIFEST.json`` written (temp name, then renamed), then ``_SUCCESS``."""
    manifest = json.dumps(_manifest(key, part, now), indent=1, sort_keys=True).encode() + b"\n"
    target = parse_target(key + MANIFEST)
    if target.scheme == "file":
        _mark_local(target.directory, manifest)
        return
    session = open_session(target, options, abort, reactor)
    try:
        session.makedirs_cwd(target.directory)
        session.delete(SUCCESS)
        _replace(session, MANIFEST, manifest)
        _replace(session, SUCCESS, b"")
        session.quit()
    finally:
        session.close()


def _replace(session: Session, name: str, data: bytes) -> None:
    temp = f".{name}.part"
    session.store(temp, _Bytes(data))
    session.delete(name)
    session.rename(temp, name)


def _mark_local(directory: str, manifest: bytes) -> None:
    os.makedirs(directory, exist_ok=True)
    success = os.path.join(directory, SUCCESS)
    if os.path.exists(success):
        os.unlink(success)
        fsync_dir(directory)
    write_atomically(os.path.join(directory, MANIFEST), manifest, 0o644)
    write_atomically(success, b"", 0o644)
    fsync_dir(directory)


def _manifest(key: str, part: Partition, now: float) -> dict[str, Any]:
    files = sorted(part.files.values(), key=lambda f: f["name"])
    target: Target = parse_target(key + MANIFEST)
    return {"format": "spiderd-manifest", "version": VERSION, "partition": posixpath.join(target.directory, ""),
            "window": {"start": _iso(part.start), "end": _iso(part.end)},
            "files": files, "records": sum(f["records"] for f in files), "written_at": _iso(now),
            "where": redact(key)}


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat().replace("+00:00", "Z")


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class _Bytes:
    def __init__(self, data: bytes) -> None:
        self._data, self._at = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size < 0 else self._at + size
        chunk, self._at = self._data[self._at:end], min(end, len(self._data))
        return chunk
