"""The worker's jobs as the operator sees them (``GET /api/jobs``, ``spiderctl jobs``, the status page).

One row a job: spider, batch, state, URLs done of total, items, failed URLs, and the
feed (where it goes, with any password redacted, and how far it got: an ended job's
file is ``spooled`` while the shipper holds it, ``shipped`` once uploaded).  Rows are
sorted by what needs attention: running jobs first (the oldest first), then pending
ones in the order they will run, then ended ones, newest first.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from spiderd.core.secrets import redact
from spiderd.worker.jobs import CANCELLED, ENDED, PENDING, RUNNING, Job

if TYPE_CHECKING:
    from spiderd.worker.run import Run
    from spiderd.worker.runner import JobRunner


def job_rows(runner: JobRunner, limit: int = 50, feeds: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """At most ``limit`` rows, running, then pending, then ended jobs (newest first); ``feeds`` is the shipper's
    ``whereabouts()`` (file name -> ``spooled`` or ``refused``)."""
    jobs = runner.jobs.values()
    running = sorted((j for j in jobs if j.state == RUNNING), key=lambda j: j.start_time or 0.0)
    pending = list(runner.pending())
    ended = sorted((j for j in jobs if j.state in ENDED), key=lambda j: j.end_time or 0.0, reverse=True)
    return [row(job, runner.runs.get(job.id), (feeds or {}).get(os.path.basename(runner.items_path(job))))
            for job in (running + pending + ended)[:max(0, limit)]]


def row(job: Job, run: Run | None = None, held: str | None = None) -> dict[str, Any]:
    """One job's row; ``run`` (its execution, while it runs) has the live counters; ``held``: what the shipper
    says of its file (``spooled``, ``refused``, or None: not held, so uploaded once the job finished)."""
    stats = run.stats if run is not None else job.stats
    done = int(stats.get("pages", 0)) + int(stats.get("failed", 0)) + int(stats.get("duplicates", 0))
    return {
        "id": job.id, "spider": job.spider, "batch": job.batch, "state": job.state,
        "urls": job.url_count, "done": min(done, job.url_count) if job.url_count else done,
        "items": int(stats.get("items", 0)), "failed": int(stats.get("failed", 0)),
        "feed": {"uri": redact(job.feed_uri) if job.feed_uri else None, "state": _feed_state(job, run, held)},
        "start_time": job.start_time, "end_time": job.end_time, "error": job.error,
    }


def _feed_state(job: Job, run: Run | None, held: str | None) -> str:
    """How far the job's feed got: none yet, being written, being handed to the shipper, in its spool (or refused
    by it), shipped (uploaded)."""
    if job.state == PENDING:
        return "not started"
    if job.state == CANCELLED:
        return "none (cancelled)"
    if job.state == RUNNING:
        return "shipping" if (job.shipping or (run is not None and run.shipping)) else "writing"
    return held or "shipped"
