"""Jobs and their persistence: one JSON file per job, written atomically (temp file, fsync, rename, fsync dir).

A job is on disk before the API answers "ok" (its start URLs in a file of
their own beside it, read only when the job runs), and every change of state is
written before it counts: pending -> running -> finished or cancelled.  At
start, jobs found running (the worker was stopped at its deadline or killed)
are pending again; one found ``shipping`` is only handed to the shipper again
if its complete items file is still in ``incoming/`` (else the shipper has it).
Files are private (0600): a FEED_URI may hold a password.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, fields
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from spiderd.core.feeduri import time_params
from spiderd.core.fsutil import fsync_dir, unlink_quietly, write_atomically, write_many_atomically

log = Logger()

PENDING, RUNNING, FINISHED, CANCELLED = "pending", "running", "finished", "cancelled"
STATES = (PENDING, RUNNING, FINISHED, CANCELLED)
ENDED = (FINISHED, CANCELLED)
FORMAT = 1
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

Runner = Callable[..., "Deferred[Any]"]  # runs a blocking callable on the worker's I/O thread


def safe_name(value: str) -> bool:
    """True if ``value`` can be a file name as it is: letters, digits, ``._-``, no leading dot, 1-128 long."""
    return _SAFE_NAME.fullmatch(value) is not None and ".." not in value


@dataclass
class Job:
    """One accepted ``schedule.json`` call and what became of it."""

    id: str
    project: str
    spider: str
    settings: dict[str, str] = field(default_factory=dict)  # honoured settings only (see jobsettings.py)
    args: dict[str, str] = field(default_factory=dict)  # spider arguments (never settings)
    priority: float = 0.0
    version: str | None = None
    seq: int = 0
    state: str = PENDING
    created: float = 0.0
    start_time: float | None = None
    end_time: float | None = None
    feed_uri: str | None = None  # rendered at the first start; a re-run ships to the same name
    feed_window: list[float] | None = None  # the time window of the feed's partition (rendered with it), if any
    shipping: bool = False  # the items file is complete and being handed to the shipper
    error: str | None = None
    stats: dict[str, int] = field(default_factory=dict)
    url_count: int = 0  # the start URLs (kept on disk: see JobStore.load_urls)
    digest: str = ""  # what the request asked for (see accepted.py): the same job id and digest is the same job
    ignored_settings: list[str] = field(default_factory=list)  # the settings sent that the job does not honour
    itemized: list[list[Any]] = field(default_factory=list)  # [page fingerprint, through a redirect] of the items
    # its shipping file holds: saved with ``shipping``, recorded as itemized (worker/itemized.py) once shipped, then
    # emptied; a worker killed in between records them at its next start (else a redirect made a second item)

    @property
    def batch(self) -> str:
        """The ``%(batch)s`` of the feed name: the ``batch`` spider argument, else the job id."""
        return self.args.get("batch") or self.id

    def feed_params(self, now: float, node: str = "node") -> dict[str, str]:
        """The FEED_URI template's values: spider arguments, then batch, name and site (the spider), node (this
        worker's name), and time, date and hour (UTC)."""
        return {**self.args, "batch": self.batch, "name": self.spider, "site": self.spider, "node": node,
                **time_params(now)}

    def to_dict(self) -> dict[str, Any]:
        """The persisted form, shallow: its lists and dicts are the job's own, to be dumped at once (asdict's deep
        copy of ``itemized``, a pair for each page, cost more than the JSON)."""
        return {"format": FORMAT, **{f.name: getattr(self, f.name) for f in fields(self)}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Job:
        """A job read back from disk; raises ValueError if it is not one."""
        if data.get("format") != FORMAT or data.get("state") not in STATES or not safe_name(str(data.get("id"))):
            raise ValueError("not a spiderd worker job")
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


class JobStore:
    """Job files under ``directory``; writes run in order on the I/O thread, reads happen at start."""

    def __init__(self, directory: str, run: Runner) -> None:
        self.directory = directory
        self._run = run

    def load(self) -> list[Job]:
        """Every job on disk (blocking: called once at start); torn temp files are removed, bad files set aside."""
        os.makedirs(self.directory, exist_ok=True)
        jobs = []
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            if name.endswith(".tmp") or (name.endswith(".urls") and not os.path.exists(path[:-5] + ".json")):
                os.unlink(path)  # torn writes, and URLs whose job file never landed (never accepted)
            elif name.endswith(".json"):
                job = _read(path)
                if job is not None:
                    jobs.append(job)
        return jobs

    def save(self, job: Job, urls: list[str] | None = None) -> Deferred[None]:
        """Write the job's current state (with ``urls``, its start URLs too); fires once it is durable."""
        data = json.dumps(job.to_dict(), ensure_ascii=False, sort_keys=True).encode("utf-8")
        files = [(self.path(job.id), data)]
        if urls is not None:
            files.insert(0, (self.urls_path(job.id), json.dumps(urls).encode("utf-8")))
        return self._run(write_many_atomically, files)

    def load_urls(self, job: Job) -> list[str]:
        """The job's start URLs (blocking: run it on the I/O thread); a job file of the format before the
        URLs had a file of their own holds them in its settings."""
        try:
            with open(self.urls_path(job.id), "rb") as f:
                return list(json.loads(f.read()))
        except FileNotFoundError:
            raw = job.settings.get("DISTRIBUTED_START_URLS")
            return list(json.loads(raw)) if raw else []

    def forget_urls(self, job_id: str) -> Deferred[None]:
        """Drop a job's start URLs (it ended: it never runs again)."""
        return self._run(unlink_quietly, self.urls_path(job_id))

    def delete(self, job_id: str) -> Deferred[None]:
        """Forget a job."""
        return self._run(_unlink, self.path(job_id), self.urls_path(job_id))

    def path(self, job_id: str) -> str:
        """The file of a job (ids are checked with :func:`safe_name` before they get here)."""
        if not safe_name(job_id):
            raise ValueError(f"unsafe job id {job_id!r}")
        return os.path.join(self.directory, job_id + ".json")

    def urls_path(self, job_id: str) -> str:
        """The file of a job's start URLs."""
        return self.path(job_id)[: -len(".json")] + ".urls"


def _read(path: str) -> Job | None:
    try:
        with open(path, "rb") as f:
            job = Job.from_dict(json.loads(f.read()))
    except (OSError, ValueError, TypeError) as e:
        log.error("Worker: unreadable job file {path} set aside as .bad: {error}", path=path, error=str(e))
        os.replace(path, path + ".bad")
        return None
    if os.path.basename(path) != job.id + ".json":
        log.error("Worker: job file {path} holds job {id!r}; skipped", path=path, id=job.id)
        return None
    return job


def _unlink(*paths: str) -> None:
    if [unlink_quietly(path) for path in paths].count(True):
        fsync_dir(os.path.dirname(paths[0]))
