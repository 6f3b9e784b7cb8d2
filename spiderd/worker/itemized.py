"""Which pages this worker has made items of, across jobs, so no page is in two feed files.

A batch never repeats a URL the frontier sent before, but redirects do: batch
1's ``/item/47`` may redirect to ``/item/49``, which batch 2 holds.  Each job
claims the pages it itemizes (in memory, so two running jobs cannot both take
one); the claims become durable (a LevelDB of fingerprints) only once the
job's feed file is handed to the shipper, and an interrupted or cancelled job
gives its claims back, so a re-run makes its items again.
"""

from __future__ import annotations

import os
from typing import Any

import plyvel


class Itemized:
    """A persistent set of page fingerprints with per-job claims on top."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._db: Any = None
        self._claims: dict[int, str] = {}
        self._by_job: dict[str, set[int]] = {}

    def open(self) -> None:
        """Open the store (at the worker's start: another process may hold it until then)."""
        os.makedirs(self._path, exist_ok=True)
        self._db = plyvel.DB(self._path, create_if_missing=True, bloom_filter_bits=10)

    def claim(self, fp: int, job_id: str) -> bool:
        """True if ``job_id`` may make an item of page ``fp`` (nobody has, and no other running job claims it)."""
        holder = self._claims.get(fp)
        if holder is not None:
            return holder == job_id
        if self._db.get(fp.to_bytes(8, "big")) is not None:
            return False
        self._claims[fp] = job_id
        self._by_job.setdefault(job_id, set()).add(fp)
        return True

    def commit(self, job_id: str) -> None:
        """The job's feed is shipped: its pages are itemized for good."""
        fps = self._by_job.pop(job_id, set())
        with self._db.write_batch() as batch:
            for fp in fps:
                batch.put(fp.to_bytes(8, "big"), b"")
                del self._claims[fp]

    def release(self, job_id: str) -> None:
        """The job stopped without shipping: its pages are free again."""
        for fp in self._by_job.pop(job_id, set()):
            del self._claims[fp]

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
