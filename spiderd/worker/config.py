"""The worker's plain settings: ``[worker]`` with what it takes of ``[fetch]``, ``[pool]`` and ``[items]``, each
key checked at load (:mod:`spiderd.config`)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Mapping

from spiderd.core.net.listener import Listen
from spiderd.core.net.serving import BACKLOG
from spiderd.core.rules import AdaptiveDelay

MiB = 1024 * 1024
DEFAULT_FEED_TEMPLATE = "%(batch)s_%(name)s_%(time)s.jl"
FEED_SCHEMES = ("file", "ftp", "ftps", "sftp")


@dataclass(frozen=True)
class WorkerConfig:
    """What the worker role reads from the configuration (:func:`spiderd.worker.service.worker_config`)."""

    data_dir: str
    listen: Listen = Listen(f"tcp:6800:interface=127.0.0.1:backlog={BACKLOG}")  # where the Scrapyd API listens
    username: str = ""
    password: str = ""
    project: str = "spiderd"
    node_name: str = ""  # "" = the host name, as Scrapyd
    max_jobs: int = 4  # jobs fetching at once (a job shipping, or only waiting while slots are free, does not)
    concurrency: int = 64  # URLs in flight over all jobs
    job_concurrency: int = 0  # URLs in flight per job at most; 0 = only concurrency
    redirect_window: float = 86400.0  # a redirect to a page itemized this recently makes no second item
    max_job_urls: int = 50_000  # DISTRIBUTED_START_URLS of one job, at most
    per_host_concurrency: int = 8
    per_host_delay: float = 0.0  # seconds between request starts to one host, over all jobs
    host_overrides: Mapping[str, tuple[float, int]] = field(default_factory=dict)  # host -> (delay, concurrency)
    adaptive: AdaptiveDelay = field(default_factory=AdaptiveDelay)  # [fetch] delay_factor, min_delay, max_delay
    adaptive_overrides: Mapping[str, AdaptiveDelay] = field(default_factory=dict)  # host -> its own rule
    per_ip: bool = False  # [fetch] politeness = "ip": the hosts of one address share one slot (Politeness.set_group)
    failure_threshold: int = 3
    retry_delay: float = 0.0  # a failed URL's first retry waits this long, doubling (0: at once, behind the URLs
    # waiting for its host, as the frontier's pool retries)
    max_retry_after: float = 3600.0  # a 429/503 blocks its host this long at most ([fetch] max_retry_after)
    max_throttles: int = 10  # a URL's throttles that are not counted as its failures ([fetch] max_throttles)
    feed_template: str = ""  # "" = file://<data_dir>/feeds/%(batch)s_%(name)s_%(time)s.jl
    feed_dirs: tuple[str, ...] = ()  # local directories a client's file:// FEED_URI may write into, besides the template's
    max_body_size: int = 16 * MiB
    stop_timeout: float = 30.0
    finished_to_keep: int = 100
    rotate_seconds: float = 0.0  # [items]: a job's items file becomes a part this long after its first item (0: never)
    rotate_idle: float = 0.0  # or this long after its last one (0: never)
    feed_format: str = "jsonl"  # [items] format: "warc" or "both" ship each job's answers as a WARC file too; "parquet"
    # ships its feed as Parquet

    @property
    def jobs_dir(self) -> str:
        """Where accepted jobs are persisted, one JSON file each."""
        return os.path.join(self.data_dir, "worker", "jobs")

    @property
    def itemized_dir(self) -> str:
        """The fingerprints of the pages this worker made items of (see itemized.py)."""
        return os.path.join(self.data_dir, "worker", "itemized")

    @property
    def logs_dir(self) -> str:
        """Each job's log (see joblog.py)."""
        return os.path.join(self.data_dir, "worker", "logs")

    @property
    def accepted_dir(self) -> str:
        """The ids of every job this worker accepted (see accepted.py)."""
        return os.path.join(self.data_dir, "worker", "accepted")

    @property
    def default_feed_uri(self) -> str:
        """The FEED_URI template of jobs that name none."""
        if self.feed_template:
            return self.feed_template
        feeds = os.path.join(os.path.abspath(self.data_dir), "feeds")
        return "file://" + feeds + "/" + DEFAULT_FEED_TEMPLATE

    @property
    def feed_roots(self) -> tuple[str, ...]:
        """The local directories that a job's file:// feed may be written under: the fixed part of the
        default feed's directory, and ``feed_dirs``."""
        from spiderd.core.feeduri import parse_target

        roots = [os.path.normpath(d) for d in self.feed_dirs]
        target = parse_target(self.default_feed_uri)
        if target.scheme == "file":
            fixed = target.directory.split("%(", 1)[0]  # up to the first parameter
            roots.append(os.path.normpath(fixed if fixed.endswith("/") or fixed == target.directory
                                          else os.path.dirname(fixed)))
        return tuple(roots)

    @property
    def host_name(self) -> str:
        """The ``node_name`` of every answer."""
        return self.node_name or socket.gethostname()

    @property
    def auth(self) -> bool:
        """True when HTTP basic auth is required."""
        return bool(self.username)
