"""The job ids this worker ever accepted, with a digest of what each asked for.

The batcher names each batch's job (``jobid``, a random id kept with the
batch in its spool).  A frontier that dies after its POST was accepted but
before it knew sends the batch again at its next start: the worker answers
"ok" with the same job and runs nothing twice, even long after the job's
file was pruned.  The same id with a different request is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any


from spiderd.core import leveldb
from spiderd.worker.jobs import Job


def digest(job: Job, urls: list[str]) -> str:
    """What a request asked for (project, spider, version, settings, arguments, start URLs), as 32 hex digits."""
    what = [job.project, job.spider, job.version, sorted(job.settings.items()), sorted(job.args.items()), urls]
    return hashlib.blake2b(json.dumps(what).encode("utf-8"), digest_size=16).hexdigest()


class Accepted:
    """A LevelDB of job id -> digest (opened at the worker's start, written once a job file is durable)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._db: Any = None

    def open(self) -> None:
        os.makedirs(self._path, exist_ok=True)
        self._db = leveldb.Reopening(self._path, create_if_missing=True, bloom_filter_bits=10)

    def ready(self) -> None:
        """Before a ``put``, on the reactor's thread: the store opened again if its disk refused the last write
        (raises while it cannot be)."""
        self._db.ready()

    def get(self, job_id: str) -> str | None:
        """The digest of the job accepted under ``job_id``, or None."""
        value = self._db.get(job_id.encode("utf-8"))
        return value.decode("ascii") if value is not None else None

    def put(self, job: Job) -> None:
        """Remember ``job`` as accepted (blocking: run it on the I/O thread, after ``ready``)."""
        try:
            self._db.put(job.id.encode("utf-8"), job.digest.encode("ascii"), sync=True)
        except Exception as e:
            self._db.refused(e)
            raise

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
