"""A worker's jobs over time, read from a spiderd data directory after a run: how long each job was queued,
fetched, and held its ``max_jobs`` slot after its last item while other jobs waited in the queue.

    python bench/jobtimes.py DATA_DIR     # one line per job, the worker's items a second, then the summary

Reads ``worker/jobs/*.json`` (``created``, ``start_time``, ``end_time``, ``stats``), each job's feed file
(its items' ``fetched_at``) and each job's log (``worker/logs/<id>.log``: the times, to the second, of its
``failed: ..., N attempts`` lines).  A job's *tail* runs from its last item's ``fetched_at`` to its
``end_time``: the time it still counted toward ``max_jobs`` with no page left that made an item (retries
waiting on their back-off, their last attempts, slow pages; ``end_time`` also holds the feed's shipping,
milliseconds for a ``file://`` feed).  ``held_while_queued`` integrates, over the run, the jobs in their
tail at moments when another job was queued: slot-seconds that a job only waiting kept from a queued one.
``bench/crawl.py`` prints the summary after each run with a worker.
"""

from __future__ import annotations

import json
import sys
import urllib.parse
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path


@dataclass
class JobTimes:
    """One job's times (seconds since the epoch) and counts."""

    id: str
    batch: str
    created: float
    start: float
    last_item: float
    end: float
    items: int
    failed: int
    requests: int
    failure_lines: list[float]  # the times of its "failed: ..., N attempts" log lines (whole seconds)

    @property
    def tail(self) -> float:
        return self.end - self.last_item


def read_jobs(data: Path) -> list[JobTimes]:
    """The finished jobs under ``data`` (a spiderd data directory), by start time."""
    jobs = []
    for path in (data / "worker" / "jobs").glob("*.json"):
        job = json.loads(path.read_text())
        if job.get("start_time") is None or job.get("end_time") is None:
            continue
        stamps = _fetched_at(job.get("feed_uri") or "")
        stats = job.get("stats") or {}
        jobs.append(JobTimes(job["id"], str((job.get("args") or {}).get("batch", "")), job["created"],
                             job["start_time"], max(stamps, default=job["start_time"]), job["end_time"],
                             len(stamps), stats.get("failed", 0), stats.get("requests", 0),
                             _failure_lines(data / "worker" / "logs" / f"{job['id']}.log")))
    return sorted(jobs, key=lambda j: j.start)


def _fetched_at(feed_uri: str) -> list[float]:
    path = Path(urllib.parse.unquote(urllib.parse.urlsplit(feed_uri).path))
    if not feed_uri.startswith("file:") or not path.exists():
        return []
    with path.open() as f:
        return [json.loads(line)["fetched_at"] for line in f if line.strip()]


def _failure_lines(log: Path) -> list[float]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        if " failed: " in line and " attempts" in line:
            out.append(datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S").timestamp())
    return out


@dataclass
class Summary:
    jobs: int
    wall: float  # first created -> last end
    fetching_median: float  # start -> last item
    tail_median: float
    tail_max: float
    queued_total: float  # job-seconds jobs spent queued
    held_while_queued: float  # slot-seconds held by jobs in their tail while a job was queued
    failed: int

    def line(self) -> str:
        return (f"jobs: {self.jobs} in {self.wall:.1f} s, fetching (start to last item) median "
                f"{self.fetching_median:.1f} s, tail (last item to end) median {self.tail_median:.1f} s, max "
                f"{self.tail_max:.1f} s; queued {self.queued_total:.1f} job-s, of which slots held by jobs in their "
                f"tail while a job was queued {self.held_while_queued:.1f} slot-s; {self.failed} URLs failed")


def summarize(jobs: list[JobTimes]) -> Summary | None:
    """The run's figures (None without jobs)."""
    if not jobs:
        return None
    events: list[tuple[float, int, int]] = []  # (time, queued +/-, tailing +/-)
    for j in jobs:
        events += [(j.created, 1, 0), (j.start, -1, 0), (j.last_item, 0, 1), (j.end, 0, -1)]
    events.sort()
    queued = tailing = 0
    queued_total = held = 0.0
    at = events[0][0]
    for when, dq, dt in events:
        span = when - at
        queued_total += queued * span
        held += tailing * span if queued > 0 else 0.0
        queued, tailing, at = queued + dq, tailing + dt, when
    return Summary(len(jobs), max(j.end for j in jobs) - min(j.created for j in jobs),
                   _median([j.last_item - j.start for j in jobs]), _median([j.tail for j in jobs]),
                   max(j.tail for j in jobs), queued_total, held, sum(j.failed for j in jobs))


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def summary_line(data: Path) -> str:
    """The summary of the jobs under ``data``, or a line saying there were none."""
    summary = summarize(read_jobs(data))
    return summary.line() if summary is not None else "jobs: none finished"


def main() -> None:
    data = Path(sys.argv[1])
    jobs = read_jobs(data)
    if not jobs:
        raise SystemExit(f"no finished jobs under {data / 'worker' / 'jobs'}")
    t0 = min(j.created for j in jobs)
    print("batch  created  start  last_item  end   tail  items failed requests  failure lines (s)")
    for j in jobs:
        fails = ",".join(f"{t - t0:.0f}" for t in j.failure_lines)
        print(f"{j.batch:>5} {j.created - t0:8.2f} {j.start - t0:6.2f} {j.last_item - t0:9.2f} {j.end - t0:5.2f} "
              f"{j.tail:6.2f} {j.items:5d} {j.failed:6d} {j.requests:8d}  {fails}")
    stamps = sorted(t for t in _all_fetched_at(data))
    if stamps:
        bins = [0] * (int(stamps[-1] - t0) + 1)
        for t in stamps:
            bins[int(t - t0)] += 1
        print("items a second (from the first job's creation):", " ".join(str(n) for n in bins))
    print(summary_line(data))


def _all_fetched_at(data: Path) -> list[float]:
    return [t for path in (data / "worker" / "jobs").glob("*.json")
            for t in _fetched_at(json.loads(path.read_text()).get("feed_uri") or "")]


if __name__ == "__main__":
    main()
