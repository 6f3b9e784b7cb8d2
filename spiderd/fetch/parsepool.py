"""The parse pool: :func:`spiderd.fetch.extract.extract` in child processes, so parsing never stalls the reactor.

``ParsePool(reactor, rules, workers)`` is a Service (``rules``: :func:`parse_rules` of the configuration's
sections).  ``workers=0`` parses inline (tests, tiny crawls), ``-1`` starts one child per CPU this process may run on
(its affinity: :func:`spiderd.core.cpus.usable_cpus`).  Each child holds
at most ``queue_size`` requests; the rest wait in the parent (at most
``max_waiting``).  A child that dies fails the requests it held with
:class:`ParseWorkerDied` and is restarted after a capped, growing delay; while
no child is up, requests fail at once with :class:`ParsePoolUnavailable`.
A child that holds requests but answers none for ``request_timeout`` seconds
(a pathological page or rule) is killed the same way.  A child whose resident
memory passes ``max_rss`` bytes (pages with a million links leave CPython's
heap large for good) is retired: a new child takes its place at once, and the
old one gets no new page, answers those it holds and exits.  ``stopService`` hands
waiting requests to the children, closes their input so they finish what they
hold and exit, and kills them at the deadline.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core.cpus import processes
from spiderd.core.memory import rss_of
from spiderd.core.reactors import IProcessClock
from spiderd.fetch.extract import MAX_LINKS, Extracted, Rules, extract
from spiderd.fetch.pagerobots import PageRobots
from spiderd.fetch.parsechild import ChildPool, ParseChild, spawn
from spiderd.fetch.parseworker import MAX_MESSAGE, frame, init_message, request_frame
from spiderd.fetch.robots import agent_token
from spiderd.config.sections import FetchSection, PoolSection
from spiderd.core.rules import Site

log = Logger()
_Request = tuple[int, list[bytes], "Deferred[Extracted]", Rules]  # (id, its frame's buffers, its Deferred, rules)


def page_robots(fetch: FetchSection) -> PageRobots:
    """The page directives honoured, from ``[fetch]`` (obey_nofollow, obey_meta_robots, canonical); the meta
    name of our own user agent (``<meta name="spiderd">``) counts as ``robots``."""
    token = agent_token(fetch.user_agent).strip().lower()
    return PageRobots(fetch.obey_nofollow, fetch.obey_meta_robots, fetch.canonical, (token,) if token else ())


def parse_rules(sites: tuple[Site, ...], pool: PoolSection, fetch: FetchSection) -> Rules:
    """The rules pages are parsed by: the ``[[sites]]``, the URL limits and linkbase of ``[pool]``, and the page
    directives of ``[fetch]`` (all the parse children need of the configuration)."""
    return Rules(sites, pool.max_url_length, pool.max_path_depth, pool.linkbase, page_robots(fetch))


class ParseError(Exception):
    """A page could not be parsed by the pool (not a problem of the page itself)."""


class ParseWorkerDied(ParseError):
    """The child holding the request exited before answering it."""


class ParsePoolUnavailable(ParseError):
    """No child is running (all are restarting), or the pool is stopped, or its queue is full."""


class ParsePool(ChildPool):
    """Parses pages in ``workers`` child processes (or inline when 0)."""

    def __init__(
        self,
        reactor: IProcessClock,
        rules: Rules,
        workers: int = -1,
        *,
        queue_size: int = 16,
        max_waiting: int = 4096,
        max_links: int = MAX_LINKS,
        stop_timeout: float = 5.0,
        request_timeout: float = 30.0,
        restart_delay: float = 0.1,
        max_restart_delay: float = 30.0,
        max_rss: int = 512 * 1024 * 1024,
        rss: Callable[[int], int | None] = rss_of,
    ) -> None:
        super().__init__(reactor, processes(workers), restart_delay, max_restart_delay, "parse worker",
                         self._check_progress)
        self.rules = rules
        self.queue_size = queue_size
        self.max_waiting = max_waiting
        self.max_links = max_links
        self.stop_timeout = stop_timeout
        self.request_timeout = request_timeout
        self.max_rss = max_rss
        self._rss = rss
        self.retired = 0
        self._retiring: set[ParseChild] = set()
        self._children: list[ParseChild | None]
        self._waiting: deque[_Request] = deque()
        self._next_id = 0

    # -- the service ----------------------------------------------------------------------------------------

    def startService(self) -> None:
        """Start the children (nothing to start inline)."""
        super().startService()
        self._start_slots(min(1.0, self.request_timeout / 4))

    def stopService(self) -> Deferred[None]:
        """Refuse new pages, let the children finish what they hold, and fire when they have all exited."""
        super().stopService()
        if not self._begin_stop():
            return self._when_stopped()
        waiters, self._ready_waiters = self._ready_waiters, []
        for d in waiters:
            d.errback(ParsePoolUnavailable("the parse pool stopped before its workers were ready"))
        self._flush_waiting()
        for child in self._live():
            child.transport.closeStdin()
        if self._all():
            self._deadline = self._reactor.callLater(self.stop_timeout, self._kill_all)
        else:
            self._now_stopped()
        return self._when_stopped()

    # -- parsing --------------------------------------------------------------------------------------------

    def parse(
        self,
        url: str,
        body: bytes,
        content_type: str | None,
        kind: str,
        fetched_at: float,
        status: int,
        compress: int | None = None,
        robots_tag: str | None = None,
        rules: Rules | None = None,
    ) -> Deferred[Extracted]:
        """The links and item of one page; fails with a :class:`ParseError` when the pool cannot parse it.

        With ``compress`` (an lzma preset), a worker also compresses the page for the store; inline
        parsing leaves that to the store's thread (``Extracted.compressed`` stays None).  ``robots_tag`` is
        the response's X-Robots-Tag (:attr:`~spiderd.fetch.fetcher.FetchResult.robots_tag`).  ``rules``: the
        version of the rules to parse with (a worker job's own), else the pool's ``rules`` as they are now.
        """
        rules = rules or self.rules
        if not self.running:
            return defer.fail(ParsePoolUnavailable("the parse pool is not running"))
        if self.workers == 0:
            return defer.succeed(extract(url, body, content_type, kind, fetched_at, status, rules, self.max_links,
                                         robots_tag))
        self._next_id += 1
        try:
            payload = request_frame(self._next_id, url, body, content_type, kind, fetched_at, status, compress,
                                    robots_tag)
        except ValueError as e:
            return defer.fail(ParseError(f"cannot send {url!r} to a parse worker: {e}"))
        if len(payload[1]) + len(body) > MAX_MESSAGE:
            return defer.fail(ParseError(f"page {url!r} is too large for a parse worker ({len(body)} bytes)"))
        return self._dispatch(self._next_id, payload, rules)

    @property
    def in_flight(self) -> int:
        """Requests held by children or waiting for one."""
        return len(self._waiting) + sum(len(c.pending) for c in self._live())

    def needs_backout(self) -> bool:
        """True when every child's queue is full (callers should stop feeding pages)."""
        return bool(self._waiting) or (self.workers > 0 and self._pick() is None)

    def pids(self) -> list[int]:
        """The process ids of the running children (not of those retiring)."""
        return [c.transport.pid for c in self._live() if c.transport is not None]

    # -- dispatching ----------------------------------------------------------------------------------------

    def _dispatch(self, request_id: int, payload: list[bytes], rules: Rules) -> Deferred[Extracted]:
        d: Deferred[Extracted] = Deferred()
        child = self._pick()
        if child is not None:
            child.send(request_id, payload, d, rules)
        elif not self._live():
            restarting = len(self._restarts.pending)
            d.errback(ParsePoolUnavailable(f"no parse worker is running ({restarting} restarting)"))
        elif len(self._waiting) >= self.max_waiting:
            d.errback(ParsePoolUnavailable(f"the parse queue is full ({len(self._waiting)} pages waiting)"))
        else:
            self._waiting.append((request_id, payload, d, rules))
        return d

    def _pick(self) -> ParseChild | None:
        """The least-loaded running child with room in its queue."""
        best = None
        for child in self._children:
            if child is not None and len(child.pending) < self.queue_size:
                if best is None or len(child.pending) < len(best.pending):
                    best = child
        return best

    def _drain(self, child: ParseChild) -> None:
        while self._waiting and len(child.pending) < self.queue_size:
            child.send(*self._waiting.popleft())

    def _flush_waiting(self) -> None:
        """At stop: hand every waiting request to a child, ignoring the queue bound."""
        while self._waiting:
            live = self._live()
            request_id, payload, d, rules = self._waiting.popleft()
            if not live:
                d.errback(ParsePoolUnavailable("the parse pool stopped with no worker running"))
                continue
            min(live, key=lambda c: len(c.pending)).send(request_id, payload, d, rules)

    def _all(self) -> list[ParseChild]:
        """Running children, those retiring included (they still answer what they hold)."""
        return self._live() + list(self._retiring)

    # -- children -------------------------------------------------------------------------------------------

    def _spawn(self, slot: int) -> None:
        self._restarts.started(slot)
        child = ParseChild(self, slot, self._reactor)
        self._children[slot] = child
        try:
            spawn(self._reactor, child)
        except Exception:
            log.failure("Cannot start parse worker {slot}", slot=slot)
            self._children[slot] = None
            self._schedule_restart(slot)
            return
        child.transport.write(frame(init_message(self.rules, self.max_links)))
        child.started_with(self.rules)
        self._drain(child)

    def child_ready(self, child: ParseChild) -> None:
        """See ChildOwner: a child is ready; the pool is once all are."""
        log.debug("Parse worker {slot} (pid {pid}) is ready", slot=child.slot, pid=child.transport.pid)
        self._fire_ready()

    def child_answered(self, child: ParseChild) -> None:
        """See ChildOwner: hand the child a waiting request (unless it is retiring)."""
        if child in self._retiring:
            return
        self._restarts.worked(child.slot)
        self._drain(child)

    def _retire(self, child: ParseChild, rss: int) -> None:
        """Replace ``child`` by a new one; it answers what it holds, then exits at the end of its input."""
        log.info("Parse worker {slot} (pid {pid}) holds {mb:.0f} MB (limit {limit:.0f} MB): replacing it",
                 slot=child.slot, pid=child.pid, mb=rss / 2**20, limit=self.max_rss / 2**20)
        self.retired += 1
        self._retiring.add(child)
        self._children[child.slot] = None
        child.transport.closeStdin()
        self._spawn(child.slot)

    def child_ended(self, child: ParseChild, reason: Failure) -> None:
        """See ChildOwner: fail what it held, and start another in its slot (unless stopping or retired)."""
        if child in self._retiring:
            self._retiring.discard(child)
            if not child.pending and not child.killed_because:
                log.debug("Parse worker {slot} (pid {pid}) retired", slot=child.slot, pid=child.pid)
                self._check_stopped()
                return
        if self._children[child.slot] is child:
            self._children[child.slot] = None
        why = f"{child.killed_because}: " if child.killed_because else ""
        error = ParseWorkerDied(f"parse worker {child.slot} (pid {child.pid}) exited: {why}{reason.getErrorMessage()}")
        pending, child.pending = child.pending, deque()
        if self._stopped is None and self._children[child.slot] is None:
            log.warn("{error} with {count} pages in hand", error=str(error), count=len(pending))
            self._schedule_restart(child.slot)
            if not self._live():
                self._fail_waiting(ParsePoolUnavailable(f"no parse worker is running: {error}"))
        for _, d in pending:
            d.errback(error)
        self._check_stopped()

    def _fail_waiting(self, error: Exception) -> None:
        waiting, self._waiting = self._waiting, deque()
        for _, _, d, _ in waiting:
            d.errback(error)

    def _kill_all(self) -> None:
        self._deadline = None
        for child in self._all():
            child.kill(f"still busy {self.stop_timeout}s after stop")

    def _check_progress(self) -> None:
        """The watchdog: kill children that hold requests but answered nothing for request_timeout, and
        retire those whose memory passed max_rss."""
        try:
            now = self._reactor.seconds()
            for child in self._all():
                if child.pending and now - child.progress >= self.request_timeout:
                    child.kill(f"no answer in {self.request_timeout}s")
            for child in self._live():
                rss = self._rss(child.pid) if child.ready and child.pid is not None else None
                if rss is not None and rss > self.max_rss:
                    self._retire(child, rss)
        except Exception:  # a periodic call must not die of its own error
            log.failure("Parse watchdog failed")

    def _check_stopped(self) -> None:
        if not self._all():
            self._now_stopped()


__all__ = ["ParseError", "ParsePool", "ParsePoolUnavailable", "ParseWorkerDied"]
