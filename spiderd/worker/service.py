"""The worker role as one Service: the Scrapyd-compatible HTTP port, the persistent job queue and its runner.

Start: read the jobs left on disk (pending and cut-short running ones run
again), then listen.  Stop: close the port (no new connections), let running
jobs finish for ``stop_timeout`` seconds, interrupt the rest (they stay
persisted as *pending* and run at the next start), wait for the job files to
be written, and fire.  Stop the worker before the page store and the feed
shipper it writes to (``OrderedMultiService`` stops in reverse order).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Callable

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IListeningPort, IReactorTime
from twisted.logger import Logger

import spiderd
from spiderd.core import lifecycle
from spiderd.core.blocking import Lane
from spiderd.core.net.auth import Auth
from spiderd.core.net.listener import Listen, Listener
from spiderd.core.net.serving import JsonSite
from spiderd.core.recrawls import Recrawl
from spiderd.core.reactors import INodeReactor
from spiderd.core.rules import PoliteRules
from spiderd.config.listen import listen_endpoint
from spiderd.config.sections import FetchSection, WorkerSection
from spiderd.engine.steps import ClaimContent, PageSteps
from spiderd.store.interfaces import IPageStore
from spiderd.worker.api import WorkerAPI
from spiderd.worker.config import WorkerConfig
from spiderd.worker.jobs import Job, JobStore
from spiderd.worker.pipeline import Pipeline
from spiderd.worker.runner import JobRunner
from spiderd.worker.jobrules import JobRules
from spiderd.worker.validate import Validator
from spiderd.worker.table import job_rows

if TYPE_CHECKING:
    from spiderd.core.stats import CrawlStats
    from spiderd.feed.shipper import FeedShipper
    from spiderd.fetch.extract import Rules
    from spiderd.fetch.fetcher import Fetcher
    from spiderd.fetch.parsepool import ParsePool

log = Logger()


class WorkerService(Service):
    """Owns the API port and the job runner; collaborators are given, not built here (its name: ``worker``)."""

    def __init__(
        self,
        reactor: INodeReactor,
        config: WorkerConfig,
        fetcher: Fetcher,
        parser: ParsePool,
        store: IPageStore | None,
        shipper: FeedShipper,
        *,
        rules: Rules | None = None,
        render_uri: Callable[[str, dict[str, str]], str] | None = None,
        incoming_dir: str | None = None,
        lane: Lane | None = None,
        clock: IReactorTime | None = None,
        stats: CrawlStats | None = None,
        claim_content: ClaimContent | None = None,
        steps: PageSteps | None = None,
        on_fetched: Callable[[Recrawl], None] | None = None,
    ) -> None:
        """``config`` is checked at load (:mod:`spiderd.config`).

        ``rules`` defaults to ``parser.rules`` (the spiders are its sites); ``render_uri`` to
        :mod:`spiderd.core.feeduri`'s; ``incoming_dir`` to the shipper's spool ``incoming/`` directory; ``clock`` (the
        job pipeline's timers: retries, per-host delays) to the reactor; ``stats`` (the node's CrawlStats, if
        given: status API, metrics, progress) counts every fetch of every job; ``claim_content`` (the pool's, in the all
        role with ``[items] skip_duplicate_content``) skips pages whose content another URL gave first; ``steps``:
        the node's page engine, shared with its crawler (default: one of the worker's own, over ``parser``,
        ``store`` and ``claim_content``); ``on_fetched`` is told each job URL's stored 200 and 304 (the all role's
        pool keeps their time and validators, for seed 004's detail recrawls in batches).
        """
        self.setName("worker")
        if render_uri is None:
            from spiderd.core.feeduri import render_uri as default_render_uri

            render_uri = default_render_uri
        self.config = config
        self.shipper = shipper
        self._reactor = reactor
        self._lane = lane or Lane(reactor, "worker-io")
        self.job_store = JobStore(config.jobs_dir, self._io)
        incoming = incoming_dir or default_incoming_dir(shipper)
        if steps is None:
            steps = PageSteps(clock or reactor, parser, store, claim_content, config.max_retry_after)
        pipeline = Pipeline(reactor, config, fetcher, steps, clock=clock, stats=stats, on_fetched=on_fetched)
        pipeline.job_rules = job_rules = JobRules(rules or parser.rules)
        self.validator = Validator(config, rules or parser.rules, render_uri, (spiderd.__version__,), reactor,
                                   robots=fetcher.robots is not None, job_rules=job_rules)
        self.runner = JobRunner(reactor, config, self.job_store, self._io, pipeline, shipper, render_uri, incoming,
                                lambda: self.validator.spiders)
        auth = Auth(username=config.username, password=config.password)
        self._api = api = WorkerAPI(self.runner, self.validator, config.host_name, auth)
        self.ready: Deferred[None] = defer.succeed(None)  # the jobs on disk loaded and running (after startService)
        self.site = JsonSite(api, config.max_body_size, config.host_name, "Worker API", reactor=reactor,
                             header_timeout=config.listen.header_timeout, idle_timeout=config.listen.idle_timeout)
        self._listener = Listener(reactor, config.listen.endpoint, "Worker API",
                                  "worker.listen, or worker.bind and worker.port")

    def _io(self, function: Callable[..., Any], *args: Any) -> Deferred[Any]:
        """Run blocking file work on the worker's one I/O thread (its lane), in order."""
        return self._lane.run(function, *args)

    @property
    def port(self) -> IListeningPort | None:
        """The listening port (None when not listening)."""
        return self._listener.port

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the API listens on over TCP (the port is known after start, even when 0 was asked)."""
        return self._listener.address

    def local_target(self) -> str:
        """This worker as a batcher target on loopback (with its credentials)."""
        from urllib.parse import quote

        auth = f"{quote(self.config.username, safe='')}:{quote(self.config.password, safe='')}@" if self.config.auth else ""
        return f"http://{auth}127.0.0.1:{self.address[1]}"

    def status(self) -> dict[str, Any]:
        """Counters for progress lines and the status API."""
        totals = self.runner.totals
        return {"jobs_running": len(self.runner.runs), "jobs_pending": len(self.runner.pending()),
                "pages": totals["pages"], "items": totals["items"], "failed": totals["failed"]}

    def jobs_table(self, limit: int = 50) -> list[dict[str, Any]]:
        """The jobs as the operator sees them (spiderd.worker.table): running, pending, then ended; an ended job's
        feed is ``spooled`` until the shipper uploaded it."""
        return job_rows(self.runner, limit, self.shipper.whereabouts())

    def set_host_delay(self, host: str, delay: float) -> None:
        """Raise ``host``'s delay between request starts (its robots.txt Crawl-delay) for every job."""
        self.runner.set_host_delay(host, delay)

    def set_host_group(self, host: str, address: str) -> None:
        """Per-IP politeness: ``host`` (looked up at ``address``) shares that address's slot, for every job."""
        self.runner.set_host_group(host, address)

    def set_politeness(self, rules: PoliteRules) -> None:
        """Pace hosts by ``rules`` (``[fetch]``'s politeness keys, changed at run time) from their next request on."""
        self.runner.set_politeness(rules)

    def idle(self) -> bool:
        """True when no job is pending or running and the shipper has nothing waiting."""
        return not self.runner.runs and not self.runner.pending() and not self.shipper.waiting

    def settled(self) -> Deferred[None]:
        """Fires when the jobs running now have ended and the shipper's attempts under way are over."""
        return lifecycle.settled([self.runner.settled(), self.shipper.settled()])

    def startService(self) -> None:
        """Listen, then open the ledgers and load the persisted jobs on the I/O lane (``ready`` fires once they
        run again); the API answers a request that comes meanwhile once they are loaded."""
        self._listener.open(self.site)
        super().startService()
        self._lane.start()
        self.ready = self._io(self._recover).addCallback(self._recovered)
        self._api.ready = self.ready

    def _recover(self) -> list[Job]:
        """Thread: the itemized and accepted ledgers opened, the jobs on disk read."""
        self.runner.open()
        return self.job_store.load()

    def _recovered(self, jobs: list[Job]) -> None:
        if not self.running:  # stopped while the jobs were read: they stay on disk for the next start
            return
        self.runner.start(jobs)
        log.info("Worker API (Scrapyd-compatible) on {url}: project {project!r}, spiders {spiders}, "
                 "basic auth {auth}", url=self._listener.url, project=self.config.project,
                 spiders=", ".join(self.validator.spiders) or "(none)", auth="on" if self.config.auth else "off")

    @defer.inlineCallbacks
    def stopService(self) -> Any:
        """Close the port, let running jobs finish until ``stop_timeout`` (then they stay pending), flush."""
        super().stopService()
        yield lifecycle.settled([self.ready])  # recovery over (if it failed, the stop goes on)
        yield self._listener.close()
        yield self.runner.stop(self.config.stop_timeout)
        self.runner.logs.flush()
        if self._lane.running:
            yield self._io(lambda: None)  # every job file queued before this point is written
        self._lane.stop()
        self.runner.close()


def default_incoming_dir(shipper: FeedShipper) -> str:
    """Where jobs write their items: the shipper's ``incoming_dir``."""
    return str(shipper.incoming_dir)


def worker_config(worker: WorkerSection, fetch: FetchSection, *, data_dir: str, role: str = "worker",
                  failure_threshold: int = 3, feed_format: str = "jsonl", rotate_seconds: float = 0.0,
                  rotate_idle: float = 0.0) -> WorkerConfig:
    """The WorkerConfig of the ``[worker]`` section, in the data directory ``data_dir``.

    ``listen``, else ``bind`` and ``port``, with ``backlog``, make the endpoint (:mod:`spiderd.config.listen`):
    ``port = -1`` is 6800 in the worker role (where Scrapyd listens), any free port for the all role's own worker;
    ``concurrency = 0`` is ``[fetch]``'s.  ``per_host_concurrency``, ``per_host_delay``, the adaptive politeness
    rule, the per-host tables, ``politeness``, ``max_retry_after`` and ``max_throttles`` come from ``[fetch]``;
    ``failure_threshold`` is ``[pool]``'s; ``feed_format``, ``rotate_seconds`` and ``rotate_idle`` ``[items]``'s.
    """
    values: dict[str, Any] = asdict(worker)
    port = worker.port if worker.port != -1 else 6800 if role == "worker" else 0
    endpoint = listen_endpoint(worker.listen, worker.bind, port, worker.backlog)
    for key in ("bind", "port", "backlog", "header_timeout", "idle_timeout"):
        del values[key]
    values["listen"] = Listen(endpoint, worker.header_timeout, worker.idle_timeout)
    values["concurrency"] = worker.concurrency or fetch.concurrency
    return WorkerConfig(
        data_dir=data_dir, failure_threshold=failure_threshold, feed_format=feed_format,
        rotate_seconds=rotate_seconds, rotate_idle=rotate_idle,
        per_host_concurrency=fetch.per_host_concurrency, per_host_delay=fetch.per_host_delay,
        max_retry_after=fetch.max_retry_after, max_throttles=fetch.max_throttles,
        host_overrides=fetch.host_overrides, adaptive=fetch.adaptive, adaptive_overrides=fetch.host_adaptive,
        per_ip=fetch.politeness == "ip", **values)


def build_worker(config: WorkerConfig, reactor: INodeReactor, fetcher: Fetcher, parser: ParsePool,
                 store: IPageStore | None, shipper: FeedShipper, lane: Lane | None = None,
                 stats: CrawlStats | None = None, steps: PageSteps | None = None,
                 on_fetched: Callable[[Recrawl], None] | None = None) -> WorkerService:
    """The worker role's service for ``tap.build``.

    The robots.txt Crawl-delays that the fetcher's ``robots`` (if any) finds raise the jobs' per-host delays; with
    ``config.per_ip`` the addresses the fetcher looks up group the hosts (the fetcher's ``tell_addresses``)."""
    worker = WorkerService(reactor, config, fetcher, parser, store, shipper, lane=lane, stats=stats, steps=steps,
                           on_fetched=on_fetched)
    if fetcher.robots is not None:
        fetcher.robots.add_delay_listener(worker.set_host_delay)
    if config.per_ip:
        fetcher.add_address_listener(worker.set_host_group)
    return worker
