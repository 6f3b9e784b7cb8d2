"""Which pages this worker made items of, how, and when, so that a redirect does not make a second item.

A URL a job was given makes its item: a job scheduled again, or a recrawled
page sent in a later batch, yields fresh items.  Redirects are different:
batch 1's ``/item/47`` may redirect to ``/item/49``, which batch 2 holds.  So
a redirect target makes an item only if no running job makes one of it
(claims in memory: two running jobs cannot both take it) and no job did
within ``window`` seconds; and a URL a job was given makes none if, within
the window, a redirect already made its item.  The record (a LevelDB of
fingerprint -> time and how) is written when a job's feed file is handed to
the shipper; the claims are saved with the job when it is marked shipping,
so that a worker killed between the hand-over and the record claims them
again at its next start and records them (a kill there made a redirect's
second item in the fault suite).  An interrupted or cancelled job gives its
claims back, so a re-run makes its items again.  A record its disk refused (a full disk) fails the commit, which changes
nothing then and may be made again (the store is opened again first: see :class:`spiderd.core.leveldb.Reopening`).
"""

from __future__ import annotations

import os
import struct
from typing import Any

from twisted.internet.interfaces import IReactorTime

from spiderd.core import leveldb

_RECORD = struct.Struct(">d?")  # when the item was made, and whether through a redirect


class Itemized:
    """Per-job claims on top of a persistent map of page fingerprint -> (time, through a redirect)."""

    def __init__(self, path: str, clock: IReactorTime, window: float = 86400.0) -> None:
        self._path = path
        self._clock = clock
        self.window = window
        self._db: Any = None
        self._claims: dict[int, tuple[str, bool]] = {}  # fp -> (job id, through a redirect)
        self._by_job: dict[str, set[int]] = {}

    def open(self) -> None:
        """Open the store (at the worker's start: another process may hold it until then)."""
        os.makedirs(self._path, exist_ok=True)
        self._db = leveldb.Reopening(self._path, create_if_missing=True, bloom_filter_bits=10)

    def direct(self, fp: int, job_id: str) -> bool:
        """True if ``job_id`` makes an item of page ``fp``, a URL it was given: unless a redirect (in another
        running job, or within the window) made it already."""
        holder = self._claims.get(fp)
        if holder is not None and holder[0] != job_id and holder[1]:
            return False
        recent = self._recent(fp)
        if recent is not None and recent[1]:
            return False
        self._claims.setdefault(fp, (job_id, False))
        self._by_job.setdefault(job_id, set()).add(fp)
        return True

    def claim(self, fp: int, job_id: str) -> bool:
        """True if ``job_id`` may make an item of redirect target ``fp``: no other running job makes one and
        no job made one within the window."""
        holder = self._claims.get(fp)
        if holder is not None:
            return holder[0] == job_id
        if self._recent(fp) is not None:
            return False
        self._claims[fp] = (job_id, True)
        self._by_job.setdefault(job_id, set()).add(fp)
        return True

    def _recent(self, fp: int) -> tuple[float, bool] | None:
        """The record of ``fp`` if made within the window (an expired one is dropped)."""
        key = fp.to_bytes(8, "big")
        value = self._db.get(key)
        if value is None:
            return None
        if len(value) == _RECORD.size:
            when, redirected = _RECORD.unpack(value)
            if self._clock.seconds() - when < self.window:
                return when, redirected
        if not self._db.stale:  # expired (or of the format without times); kept while writes are refused
            try:
                self._db.delete(key)
            except Exception as e:
                if not self._db.refused(e):
                    raise
        return None

    def records(self, job_id: str) -> list[list[Any]]:
        """The job's claims as [fingerprint, through a redirect]: saved with the job when it ships, so that a
        worker killed before :meth:`commit` can :meth:`hold` them again at its next start."""
        return [[fp, self._claims.get(fp) == (job_id, True)] for fp in sorted(self._by_job.get(job_id, ()))]

    def hold(self, job_id: str, records: list[list[Any]]) -> None:
        """Claim again for ``job_id`` the pages of its saved ``records`` (a shipping job found at start)."""
        for fp, redirected in records:
            self._claims.setdefault(int(fp), (job_id, bool(redirected)))
            self._by_job.setdefault(job_id, set()).add(int(fp))

    def commit(self, job_id: str, only: set[int] | None = None) -> None:
        """The job's feed is shipped (``only``: a part of it, these pages): its pages are itemized, as of now (a
        write the disk refuses fails, with nothing changed)."""
        now = self._clock.seconds()
        db = self._db.ready()
        taken = self._by_job.get(job_id, set())
        chosen = taken if only is None else taken & only
        try:
            with db.write_batch() as batch:
                for fp in chosen:
                    holder = self._claims.get(fp)
                    batch.put(fp.to_bytes(8, "big"), _RECORD.pack(now, holder == (job_id, True)))
        except Exception as e:
            db.refused(e)
            raise
        rest = taken - chosen
        if rest:
            self._by_job[job_id] = rest
        else:
            self._by_job.pop(job_id, None)
        for fp in chosen:
            holder = self._claims.get(fp)
            if holder is not None and holder[0] == job_id:
                del self._claims[fp]

    def release(self, job_id: str) -> None:
        """The job stopped without shipping: its pages are free again."""
        for fp in self._by_job.pop(job_id, set()):
            holder = self._claims.get(fp)
            if holder is not None and holder[0] == job_id:
                del self._claims[fp]

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
