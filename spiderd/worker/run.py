"""A job's run as the pipeline works it: its URLs to do (with the attempt each is at), what they wait on, its
counters (teed to the worker's totals), and when it is settled.

A run is an owner of entries in the worker's :class:`~spiderd.engine.hostqueue.HostQueue`: its URLs wait there
per host, and its :meth:`Run.gate` holds them back while the job is at its own caps (CONCURRENT_REQUESTS, its
per-host limit and delay)."""

from __future__ import annotations

from collections import Counter, deque
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.logger import LogLevel

from spiderd.core.recrawls import Recrawl
from spiderd.core.urls import fingerprint
from spiderd.engine.hostqueue import FREED, NOW, HostQueue
from spiderd.worker.files import ItemsFile, JobHosts
from spiderd.worker.jobs import Job


class TeeCounter(Counter[str]):
    """A Counter whose changes also go to ``parent`` (the worker's totals over every job)."""

    def __init__(self, parent: Counter[str] | None = None) -> None:
        super().__init__()
        self._parent = parent

    def __setitem__(self, key: str, value: int) -> None:
        if self._parent is not None:
            self._parent[key] += value - self.get(key, 0)
        super().__setitem__(key, value)


class Run:
    """One execution of a job: its URLs to do (with the attempt each is at), what they wait on, its counters."""

    def __init__(self, job: Job, items: ItemsFile, totals: Counter[str] | None = None, cap: int = 0) -> None:
        self.job = job
        self.items = items
        self.cap = cap  # URLs in flight at most (0: only the worker's concurrency)
        self.todo: deque[tuple[str, int]] = deque()  # given, not yet in the worker's queue (see Pipeline.start)
        self.direct: set[int] = set()  # fingerprints of the URLs the job was given
        self.queue: HostQueue | None = None  # the worker's queue, once the run is started
        self.queued = 0  # URLs waiting in the worker's queue for their host's turn
        self.active = 0  # URLs being fetched or parsed
        self.delayed = 0  # URLs waiting for their retry
        self.storing = 0
        self.halted: str | None = None  # "cancelled" or "interrupted"
        self.shipping = False
        self.seen: set[str] = set()
        self.throttles: Counter[str] = Counter()  # URL -> its throttled fetches (429, 503)
        self.stats: Counter[str] = TeeCounter(totals)
        self.blocking: set[Deferred[Any]] = set()
        self.settled: Deferred[None] = Deferred()
        self.note: Callable[..., None] = _no_note  # (text, level): a line about one URL for the job's log
        self.hosts: JobHosts | None = None  # the job's own per-host limits, if its settings set any
        self.fetch_options: dict[str, Any] = {}  # the fetcher's per-request arguments (user agent, robots)
        self.warc: Any = None  # a JobWarc: every HTTP answer's records (the [items] format asks for WARC)
        self.rules: Any = None  # the site rules the job was sent with (spiderd.fetch.extract.Rules), or None
        self.parts: Any = None  # its JobParts (see parts.py)
        self.part_clock: Any = None  # its PartClock, if its files close on time
        self.next_part = 1
        self.sealed: set[int] = set()  # the pages whose items earlier parts hold: no item again
        self.sealing: Deferred[Any] | None = None  # a part being cut and shipped
        self.recrawl: dict[str, Recrawl] = {}  # canonical URL -> its previous fetch (DISTRIBUTED_RECRAWL)

    def add(self, urls: list[str]) -> None:
        """Queue the job's URLs (first attempts)."""
        self.todo.extend((url, 0) for url in urls)
        self.direct.update(fingerprint(url) for url in urls)

    def gate(self, host: str, now: float) -> float:
        """When a URL of this run to ``host`` may start (see :class:`~spiderd.engine.hostqueue.Owner`): not
        while the run is at its cap, nor before its own per-host limit and delay allow."""
        if self.cap and self.active >= self.cap:
            return FREED
        return NOW if self.hosts is None else self.hosts.gate(host, now)

    def wait(self, d: Deferred[Any]) -> Deferred[Any]:
        """Track ``d`` so that halting cancels it."""
        self.blocking.add(d)
        return d.addBoth(self._untrack, d)

    def _untrack(self, result: Any, d: Deferred[Any]) -> Any:
        self.blocking.discard(d)
        return result

    def halt(self, why: str) -> None:
        """Stop fetching: drop the URLs not started, cancel what the others wait on."""
        self.halted = self.halted or why
        self.todo.clear()
        if self.queue is not None:
            self.queued -= self.queue.drop(self)
        for d in list(self.blocking):
            d.cancel()
        self.check_settled()

    @property
    def fetching_done(self) -> bool:
        """True when no URL is left to fetch or in flight (pages may still be committing)."""
        return self.active == 0 and self.delayed == 0 and (bool(self.halted) or not (self.todo or self.queued))

    @property
    def waiting(self) -> bool:
        """True when the run has URLs left but none in flight: they all wait on time (a retry delay, a throttle,
        a host's delay) or for a fetch slot."""
        return self.active == 0 and not self.fetching_done

    @property
    def handed_out(self) -> bool:
        """True when the run has URLs left and each is in flight or waits on its retry: none is left to start
        (its tail: a slow page, the backed-off retries of its last 5xx)."""
        return not (self.todo or self.queued or self.fetching_done)

    def check_settled(self) -> None:
        """Fire ``settled`` once no URL is in flight and none is left (or the run is halted)."""
        if self.fetching_done and self.storing == 0 and not self.settled.called:
            self.settled.callback(None)


def _no_note(text: str, level: LogLevel = LogLevel.info) -> None:
    """A run's lines go nowhere unless the runner gives it a log."""
