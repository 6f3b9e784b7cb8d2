"""Where robots.txt answers wait out their cache time once Robots' in-memory table has let them go.

Robots keeps the parsed rules of the origins it used last (a bounded LRU); a crawl of more origins than that
used to fetch an evicted origin's robots.txt again before its next page, so past 20,000 hosts every page cost
a robots.txt request.  An answer is therefore also kept here until it expires, as the file's body (parsed again
when the origin comes back: far cheaper than a request) or as "everything allowed" (4xx, 5xx, failures):

- :class:`DiskStore` (a node: ``<data_dir>/robots``): a LevelDB, so the memory a host costs does not grow with
  its file.  It outlives a restart (a restarted node does not fetch robots.txt again within the TTL); an answer
  kept by an earlier run says so (``earlier_run``), so that Robots still tells the sitemap readers of each origin
  once per run, as when it fetched every file again at each start.
- :class:`MemoryStore` (a Fetcher built without a path: tests, library use): the bodies zlib-compressed.

Both expire their answers by deadline, earliest first (O(log n) or one LevelDB step an answer, never a scan).
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Protocol

from twisted.logger import Logger

from spiderd.core.deadlines import Deadlines

log = Logger()

_HEAD = struct.Struct(">dQ?")  # expires, the run that kept it, has a body
_MS = struct.Struct(">Q")
ANSWER, BY_TIME, RUN = b"o", b"t", b"r"  # o<origin> -> head + body; t<expires ms><origin> -> "" (expiry order)
BY_TIME_END = b"u"
SWEEP = 2  # expired answers dropped per answer written: more than one, so the expired never pile up


@dataclass(frozen=True, slots=True)
class Kept:
    """An origin's robots.txt answer: until when it holds, and the file to parse (None: everything allowed)."""

    expires: float
    body: bytes | None
    earlier_run: bool = False  # kept by an earlier run of the node (the sitemap readers have not heard of it)


class RobotsStore(Protocol):
    """The answers Robots has fetched, each until it expires."""

    def get(self, origin: str, now: float) -> Kept | None:
        """``origin``'s answer if it still holds at ``now``."""

    def put(self, origin: str, kept: Kept, now: float) -> None:
        """Keep ``origin``'s answer (replacing its last); answers expired at ``now`` may go."""

    def close(self) -> None:
        """Let go of the storage."""


class MemoryStore:
    """The answers in memory, bodies compressed; the expired go first, by a heap of deadlines."""

    def __init__(self) -> None:
        self._answers: dict[str, tuple[float, bytes | None]] = {}
        self._deadlines: Deadlines[str] = Deadlines()

    def __len__(self) -> int:
        return len(self._answers)

    def get(self, origin: str, now: float) -> Kept | None:
        answer = self._answers.get(origin)
        if answer is None or answer[0] <= now:
            return None
        return Kept(answer[0], None if answer[1] is None else zlib.decompress(answer[1]))

    def put(self, origin: str, kept: Kept, now: float) -> None:
        for gone in self._deadlines.expire(now):
            del self._answers[gone]
        self._answers[origin] = (kept.expires, None if kept.body is None else zlib.compress(kept.body))
        self._deadlines.set(origin, kept.expires)

    def close(self) -> None:
        self._answers.clear()


class DiskStore:
    """The answers in a LevelDB at ``path``; each run of the node that opens it is numbered."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self._run = _MS.unpack(db.get(RUN, _MS.pack(0)))[0] + 1
        db.put(RUN, _MS.pack(self._run))
        self._swept = BY_TIME  # the expiry order is read on from here: deleted keys are not stepped over again
        self._due = 0.0  # no answer expires before this (0: not known yet): till then no put reads the order

    def get(self, origin: str, now: float) -> Kept | None:
        value = self._db.get(ANSWER + origin.encode())
        if value is None:
            return None
        expires, run, has_body = _HEAD.unpack_from(value)
        if expires <= now:
            return None
        return Kept(expires, value[_HEAD.size:] if has_body else None, run != self._run)

    def put(self, origin: str, kept: Kept, now: float) -> None:
        key = origin.encode()
        batch = self._db.write_batch()
        old = self._db.get(ANSWER + key)
        if old is not None:
            batch.delete(_by_time(_HEAD.unpack_from(old)[0], key))
        batch.put(ANSWER + key, _HEAD.pack(kept.expires, self._run, kept.body is not None) + (kept.body or b""))
        batch.put(_by_time(kept.expires, key), b"")
        if now >= self._due:
            self._sweep(batch, now)
        self._due = min(self._due, kept.expires)
        batch.write()

    def _sweep(self, batch: Any, now: float) -> None:
        """Drop up to SWEEP answers expired at ``now``, earliest first; note when the next one expires."""
        now_ms, swept = int(now * 1000), 0
        self._due = float("inf")
        for time_key in self._db.iterator(start=self._swept, stop=BY_TIME_END, include_value=False):
            expires_ms = _MS.unpack_from(time_key, len(BY_TIME))[0]
            if expires_ms >= now_ms or swept == SWEEP:
                self._due = expires_ms / 1000
                break
            swept += 1
            self._swept = time_key + b"\x00"
            batch.delete(time_key)
            origin = time_key[len(BY_TIME) + _MS.size:]
            value = self._db.get(ANSWER + origin)
            if value is not None and _by_time(_HEAD.unpack_from(value)[0], origin) == time_key:
                batch.delete(ANSWER + origin)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def _by_time(expires: float, origin: bytes) -> bytes:
    return BY_TIME + _MS.pack(max(0, int(expires * 1000))) + origin


def robots_store(path: str) -> RobotsStore:
    """The store of a node (a LevelDB at ``path``), or, with no path, one in memory (also when another process
    holds the LevelDB: the answers are a cache, the crawl goes on, said in the log)."""
    if not path:
        return MemoryStore()
    from spiderd.core import leveldb

    try:
        os.makedirs(path, exist_ok=True)
        db = leveldb.DB(path, create_if_missing=True, bloom_filter_bits=10, write_buffer_size=4 << 20,
                        lru_cache_size=8 << 20, max_open_files=100)
    except (OSError, leveldb.Error) as e:
        log.warn("robots.txt answers kept in memory, not in {path}: {error}", path=path, error=e)
        return MemoryStore()
    return DiskStore(db)
