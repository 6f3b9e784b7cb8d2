"""The render pool: pages rendered in headless Chromium, a fetch mode beside plain HTTP (``[render]``).

``RenderPool`` is a Service over ``browsers`` child processes (:mod:`.renderchild`, one Chromium each, driven by
Playwright), each rendering up to ``pages_per_browser`` pages at once; pages beyond wait in the parent.  A page is
the main document's answer as spiderd fetched it; the browser renders it, and its sub-requests come back here to
be checked (its site's hosts only, :class:`~.subrequests.SiteHosts`), paced in the role's politeness
(:class:`~.subrequests.HostTurns`: the crawler's pool, the worker's host queue, as the page's caller says) and
fetched with spiderd's fetcher (robots.txt, the site's headers, proxy and cookies).  A throttling answer to a
sub-request blocks its host and is told with the page (``Rendered.throttle``).

Bounded and supervised as the parse pool is: a browser that has rendered ``max_pages`` pages, or whose processes
hold more than ``max_rss_mb`` (their private resident memory, summed), is replaced (a new one starts at once; the old one takes no new page, finishes those
it holds and exits).  A browser that crashes, or holds a page past its deadline (hung: it is killed, with its whole
process group), costs no page: each page it held is rendered again, once, by another browser, then fails with
:class:`RenderFailed` naming why.  A page that breaks its own bounds (no load within ``navigation_timeout``, no
settling within ``settle_timeout``) fails at once with the reason.  Nothing here blocks the reactor: the browsers
are other processes, and the pool only reads their pipes (and /proc: every 5 s their memory, from the kernel's
counters, each a read of microseconds; their proportional set size, which walks their page tables, took a second
of the reactor's every 5 s with two browsers).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ClassVar, Protocol

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core import proctree
from spiderd.core import status as st
from spiderd.core.reactors import IProcessClock
from spiderd.core.rules import Site
from spiderd.core.throttle import throttled
from spiderd.core.urls import BadURL, canonicalize, host_of
from spiderd.engine.browser import BrowserChild, spawn
from spiderd.engine.fetchmode import AutoRender, FetchModes
from spiderd.engine.politeness import Politeness
from spiderd.engine.subrequests import HostTurns, Lent, SubRequests
from spiderd.fetch.fetcher import Fetcher, FetchResult
from spiderd.fetch.parsepool import ParsePool

log = Logger()
ATTEMPTS = 2  # a page whose browser dies is rendered again once
HANG_GRACE = 15.0  # seconds past a page's own bounds before its browser counts as hung
MEMORY_EVERY = 5  # the watchdog (every second) reads the browsers' memory one tick in this many
MAX_RESTART_DELAY = 30.0


class RenderLimits(Protocol):
    """The render pool's knobs (``[render]``, :class:`spiderd.config.sections.RenderSection`): a dataclass,
    so that a reload's is copied (``dataclasses.replace``) with the values a running pool keeps until a restart."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def browser(self) -> str: ...
    @property
    def browsers(self) -> int: ...
    @property
    def pages_per_browser(self) -> int: ...
    @property
    def max_pages(self) -> int: ...
    @property
    def pages_per_context(self) -> int: ...
    @property
    def max_rss_mb(self) -> int: ...
    @property
    def navigation_timeout(self) -> float: ...
    @property
    def settle_timeout(self) -> float: ...
    @property
    def idle_time(self) -> float: ...
    @property
    def max_subrequests(self) -> int: ...
    @property
    def max_subrequest_bytes(self) -> int: ...
    @property
    def load_media(self) -> bool: ...
    @property
    def auto_probe(self) -> int: ...
    @property
    def auto_recheck(self) -> int: ...
    @property
    def auto_hosts(self) -> int: ...


class RenderFailed(Exception):
    """A page could not be rendered; the message says why."""


@dataclass(slots=True)
class Rendered:
    """What a browser made of a page."""

    html: bytes
    final_url: str
    notes: list[str]
    subrequests: int
    sub_bytes: int
    throttle: float = 0.0  # > 0: a sub-request was throttled; its host is blocked this long
    elapsed: float = 0.0


@dataclass(eq=False)
class RenderJob:
    """One page in the pool."""

    rid: int
    result: FetchResult
    site: Site
    user_agent: str | None
    robots: bool
    d: Deferred[Rendered]
    turns: HostTurns | None = None  # the role's (None: the pool's own)
    lent: Lent | None = None  # the page's unit of its host's concurrency, lent to its sub-requests
    attempts: int = 0
    queued_at: float = 0.0
    started: float = 0.0
    child: BrowserChild | None = None
    throttle: float = 0.0
    subs: dict[int, Deferred[Any]] = field(default_factory=dict)


class RenderPool(Service):
    """Renders pages in ``[render] browsers`` headless Chromium children."""

    name = "render"  # type: ignore[assignment]  # Service declares it None

    def __init__(self, reactor: IProcessClock, config: RenderLimits, subrequests: SubRequests, *,
                 starter: Callable[[Any, BrowserChild], None] = spawn, stop_timeout: float = 10.0,
                 rss: Callable[[int, dict[int, list[int]]], int | None] = proctree.tree_private) -> None:
        self._reactor = reactor
        self.config = config
        self.subrequests = subrequests
        self._start = starter
        self._rss = rss
        self.stop_timeout = stop_timeout
        self._init = _init(config)
        self.children: list[BrowserChild | None] = [None] * config.browsers
        self._retiring: set[BrowserChild] = set()
        self._failures = [0] * config.browsers
        self._restarts: dict[int, IDelayedCall] = {}
        self.waiting: deque[RenderJob] = deque()
        self._next_id = 0
        self.counts = {"rendered": 0, "failed": 0, "again": 0, "replaced": 0, "crashed": 0, "contexts_replaced": 0}
        self._started = [0] * config.browsers  # browsers started in each slot
        self.failures: Counter[str] = Counter()  # pages failed, by reason (FAILURE_KINDS)
        self.restarts: Counter[str] = Counter()  # browsers started in another's place, by why it went (RESTART_KINDS)
        self._stopped: Deferred[None] | None = None
        self._deadline: IDelayedCall | None = None
        self._ticks = 0
        self._watchdog = LoopingCall(self._check)
        self._watchdog.clock = reactor

    # -- the service --------------------------------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        self._stopped = None
        for slot in range(len(self.children)):
            self._spawn(slot)
        self._watchdog.start(1.0, now=False).addErrback(lambda f: log.failure("Render watchdog", f))

    def stopService(self) -> Deferred[None]:
        """Fail the pages still waiting, let the browsers finish those they hold, kill them at the deadline."""
        super().stopService()
        self._stopped = stopped = Deferred[None]()
        if self._watchdog.running:
            self._watchdog.stop()
        for call in self._restarts.values():
            call.cancel()
        self._restarts.clear()
        waiting, self.waiting = self.waiting, deque()
        for job in waiting:
            self._fail(job, "the render pool stopped", "stopped")
        for child in self._all():
            child.close()
        if self._all():
            self._deadline = self._reactor.callLater(self.stop_timeout, self._kill_all)
        else:
            stopped.callback(None)
        d: Deferred[None] = Deferred()
        stopped.addBoth(lambda _: d.callback(None))
        return d

    # -- rendering ----------------------------------------------------------------------------------------

    def render(self, result: FetchResult, site: Site, user_agent: str | None = None, robots: bool = True,
               turns: HostTurns | None = None) -> Deferred[Rendered]:
        """The rendered DOM of a fetched 200 (``result``); fails with :class:`RenderFailed` naming why.  Its
        sub-requests take their turns in ``turns`` (the role's politeness), the page's own unit of its host
        (``result.url``'s, held by the caller until the page's outcome) lent to them."""
        if not self.running:
            return defer.fail(RenderFailed("the render pool is not running"))
        self._next_id += 1
        job = RenderJob(self._next_id, result, site, user_agent, robots, Deferred(lambda _: self._cancel(job)),
                        turns, Lent(host_of(result.url)), queued_at=self._reactor.seconds())
        self.waiting.append(job)
        self._drain()
        return job.d

    def status(self) -> dict[str, Any]:
        """Counters for the status API."""
        live = self._live()
        return {"browsers": len(live), "retiring": len(self._retiring),
                "rendering": sum(len(c.pages) for c in self._all()),
                "waiting": len(self.waiting), **self.counts, **self.subrequests.counts,
                "failures": dict(self.failures), "restarts": dict(self.restarts)}

    def pids(self) -> list[int]:
        """The child processes of the running browsers (each the leader of its browser's process group)."""
        return [c.pid for c in self._live() if c.pid is not None]

    def reconfigure(self, config: RenderLimits) -> None:
        """A reload's ``[render]``: the pool's own bounds (pages a browser, its budget, memory) from now on; the
        browsers' own (timeouts, sub-request limits, media, pages a context) reach them as they are replaced by
        browsers started with them, one at a time as :meth:`_replace_due` goes.  ``browser`` and ``browsers``
        are the start's (a restart)."""
        self.config = replace(config, browser=self.config.browser, browsers=self.config.browsers)
        self._init = _init(self.config)
        self._replace_due()
        self._drain()

    def _drain(self) -> None:
        while self.waiting:
            child = self._pick()
            if child is None:
                return
            self._send(child, self.waiting.popleft())

    def _pick(self) -> BrowserChild | None:
        best = None
        for child in self._live():
            if child.ready and len(child.pages) < self.config.pages_per_browser:
                if best is None or len(child.pages) < len(best.pages):
                    best = child
        return best

    def _send(self, child: BrowserChild, job: RenderJob) -> None:
        job.child, job.started = child, self._reactor.seconds()
        child.pages[job.rid] = job
        child.rendered += 1
        r = job.result
        child.send(("render", job.rid, r.final_url, r.status, list(r.headers or ()), bytes(r.body),
                    job.site.render_wait))
        self._replace_due()

    def _cancel(self, job: RenderJob) -> None:
        """The caller gave up (a stop's deadline): the page leaves the queue or its browser's count."""
        if job in self.waiting:
            self.waiting.remove(job)
        if job.child is not None:
            job.child.pages.pop(job.rid, None)
        self._end_subs(job)

    # -- what the browsers say ----------------------------------------------------------------------------

    def browser_ready(self, child: BrowserChild) -> None:
        self._failures[child.slot] = 0
        self._drain()

    def browser_message(self, child: BrowserChild, message: tuple[Any, ...]) -> None:
        kind, rid = message[0], message[1]
        if kind == "contexts":  # the browser closed a context it replaced
            self.counts["contexts_replaced"] += 1
            return
        job = child.pages.get(rid)
        if kind == "sub":
            self._sub(child, job, message[2], message[3])
            return
        if job is None:
            return  # a page given up (cancelled)
        del child.pages[rid]
        self._end_subs(job)
        if kind == "done":
            _, _, html, final_url, notes, count, size = message
            self.counts["rendered"] += 1
            rendered = Rendered(html, final_url, list(notes), count, size, job.throttle,
                                self._reactor.seconds() - job.started)
            job.d.callback(rendered)
        elif kind == "crashed":  # its page or its whole browser died: a new browser takes this one's place
            self._again(job, str(message[2]))
            self._retire(child, f"a page crashed ({message[2]})", "page_crashed")
        else:
            self._fail(job, str(message[2]), str(message[3]) if len(message) > 3 else "page_error")
        self._after(child)

    def _after(self, child: BrowserChild) -> None:
        if child.retiring and not child.pages:
            child.close()
        self._drain()

    def browser_ended(self, child: BrowserChild, reason: Failure) -> None:
        """Render again, once, each page the browser held; start another in its slot."""
        self._retiring.discard(child)
        if self.children[child.slot] is child:
            self.children[child.slot] = None
            if self.running:
                self.restarts[child.killed_kind or "exited"] += 1
                self._schedule_restart(child.slot, ready=child.ready)
        held = list(child.pages.values())
        child.pages.clear()
        if held:
            self.counts["crashed"] += 1
            log.warn("Render browser {slot} (pid {pid}) ended with {count} pages in hand: {why}", slot=child.slot,
                     pid=child.pid, count=len(held), why=child.why_ended)
        for job in reversed(held):
            self._again(job, child.why_ended)
        self._replace_due()
        self._drain()
        self._check_stopped()

    def _again(self, job: RenderJob, why: str) -> None:
        """``job``'s browser (or its page) died under it: render it again, first in line, once; then fail it."""
        self._end_subs(job)
        job.attempts += 1
        job.child = None
        if job.attempts < ATTEMPTS and self.running:
            self.counts["again"] += 1
            self.waiting.appendleft(job)
        elif self.running:
            self._fail(job, f"its browser died {job.attempts} times (the last: {why})", "browser_died")
        else:
            self._fail(job, f"the render pool stopped (its browser: {why})", "stopped")

    def _fail(self, job: RenderJob, why: str, kind: str) -> None:
        self.counts["failed"] += 1
        self.failures[kind] += 1
        if not job.d.called:
            job.d.errback(RenderFailed(why))

    # -- sub-requests -------------------------------------------------------------------------------------

    def _sub(self, child: BrowserChild, job: RenderJob | None, sid: int, url: str) -> None:
        """One sub-request of a page: checked, paced and fetched (:class:`~.subrequests.SubRequests`), then the
        answer to the browser."""
        if job is None:
            child.send(("sub", 0, sid, 0, [], b"its page is gone"))
            return

        def throttled(wait: float) -> None:
            job.throttle = max(job.throttle, wait)

        d = self.subrequests.fetch(job.site, url, job.user_agent, job.robots, throttled, job.turns, job.lent)
        d.addCallbacks(lambda answer: child.send(("sub", job.rid, sid) + answer), _cancelled)
        d.addErrback(lambda f: log.failure("Sub-request {url}", f, url=url))
        job.subs[sid] = d
        d.addBoth(_forget, job.subs, sid)

    def _end_subs(self, job: RenderJob) -> None:
        for d in list(job.subs.values()):
            d.cancel()
        job.subs.clear()

    # -- the browsers -------------------------------------------------------------------------------------

    def _live(self) -> list[BrowserChild]:
        return [c for c in self.children if c is not None]

    def _all(self) -> list[BrowserChild]:
        return self._live() + list(self._retiring)

    def _spawn(self, slot: int) -> None:
        self._restarts.pop(slot, None)
        child = BrowserChild(self, slot, self._reactor)
        child.budget = self._budget(slot)
        self.children[slot] = child
        try:
            self._start(self._reactor, child)
        except Exception:
            log.failure("Cannot start render browser {slot}", slot=slot)
            self.children[slot] = None
            self._schedule_restart(slot, ready=False)
            return
        child.init = self._init
        child.send(self._init)

    def _replace_due(self) -> None:
        """Replace a browser given its budget of pages, when none is being replaced: one replaced browser at a
        time finishes its pages beside its successor (a browser past its budget renders on meanwhile)."""
        if self._retiring or not self.running:
            return
        for child in self._live():
            if child.rendered >= child.budget:
                self._retire(child, f"{child.rendered} pages rendered", "max_pages")
                return
            if child.init != self._init:
                self._retire(child, "[render] changed", "reconfigured")
                return

    def _budget(self, slot: int) -> int:
        """The pages a new browser in ``slot`` renders before it is replaced: ``max_pages``; the first browser of
        slot i of n, (i + 1) / n of it, so that the slots' browsers come due apart."""
        self._started[slot] += 1
        if self._started[slot] > 1:
            return self.config.max_pages
        return max(1, self.config.max_pages * (slot + 1) // len(self.children))

    def _schedule_restart(self, slot: int, ready: bool) -> None:
        """Start another browser in ``slot``: at once after one that ran, later and later after one that never
        came up (a browser that cannot start must not spin)."""
        if not self.running or slot in self._restarts:
            return
        self._failures[slot] = 0 if ready else self._failures[slot] + 1
        delay = min(MAX_RESTART_DELAY, 0.5 * 2 ** min(self._failures[slot], 10)) if self._failures[slot] else 0.0
        self._restarts[slot] = self._reactor.callLater(delay, self._spawn, slot)
        if self._failures[slot] and not self._live() and self.waiting:
            log.warn("No render browser is up: {count} pages wait", count=len(self.waiting))

    def _retire(self, child: BrowserChild, why: str, kind: str) -> None:
        """Replace ``child`` by a new browser; it finishes the pages it holds, then exits."""
        if child.retiring or self.children[child.slot] is not child:
            return
        log.info("Render browser {slot} (pid {pid}) replaced: {why}", slot=child.slot, pid=child.pid, why=why)
        self.counts["replaced"] += 1
        self.restarts[kind] += 1
        child.retiring = True
        self._retiring.add(child)
        self.children[child.slot] = None
        if not child.pages:
            child.close()
        self._spawn(child.slot)

    def _check(self) -> None:
        """The watchdog: a browser holding a page past its deadline is killed (hung); one whose processes hold
        more than ``max_rss_mb`` is replaced."""
        config, now = self.config, self._reactor.seconds()
        for child in self._all():
            deadline = _deadline(child.init or self._init)  # (the bounds the browser was started with)
            if any(now - job.started > deadline for job in child.pages.values()):
                child.kill(f"a page held more than {deadline:g} s: the browser hung", "hung")
        self._ticks += 1
        if self._ticks % MEMORY_EVERY:
            return
        tree = proctree.children_of()  # one pass over /proc (a few ms with hundreds of processes): every 5 s, and
        # each process's private memory from its statm (the kernel's counters: no page-table walk on the reactor)
        for child in self._live():
            rss = self._rss(child.pid, tree) if child.ready and child.pid is not None else None
            if rss is not None and rss > config.max_rss_mb * 2**20:
                self._retire(child, f"its processes hold {rss / 2**20:.0f} MB (limit {config.max_rss_mb} MB)",
                             "max_rss")

    def _kill_all(self) -> None:
        self._deadline = None
        for child in self._all():
            child.kill(f"still busy {self.stop_timeout:g} s after stop")

    def _check_stopped(self) -> None:
        if self._stopped is None or self._stopped.called or self._all():
            return
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._stopped.callback(None)


def _forget(_: Any, subs: dict[int, Deferred[Any]], sid: int) -> None:
    subs.pop(sid, None)


def _cancelled(failure: Failure) -> None:
    failure.trap(CancelledError)  # the page ended before its sub-request's turn or answer: nothing to say




def _init(config: RenderLimits) -> tuple[Any, ...]:
    """The message that starts a browser with ``config``'s bounds (see :mod:`.renderchild`)."""
    return ("init", config.browser, config.load_media, config.navigation_timeout, config.settle_timeout,
            config.idle_time, config.max_subrequests, config.max_subrequest_bytes, config.pages_per_context)


def _deadline(init: tuple[Any, ...]) -> float:
    """Seconds a browser started with ``init`` may hold a page before it is taken for hung."""
    return float(init[3]) + float(init[4]) + HANG_GRACE


def build_modes(render: RenderLimits, politeness: Politeness, reactor: IProcessClock, fetcher: Fetcher,
                parser: ParsePool) -> tuple[FetchModes, RenderPool | None]:
    """How the node fetches each site's pages, and its render pool when a site asks to render (else None).

    Each role's fetch passes the turns of its own politeness; a fetch that passes none is paced by
    ``politeness`` (``[fetch]``'s per-host delay and concurrency and its ``[fetch.hosts]``, and the robots.txt
    Crawl-delays the fetcher finds)."""
    pool = None
    if any(site.render != "never" for site in parser.rules.sites):
        if fetcher.robots is not None:
            fetcher.robots.add_delay_listener(politeness.set_robots_delay)
        pool = RenderPool(reactor, render, SubRequests(reactor, fetcher, HostTurns(reactor, politeness)))
    auto = AutoRender(render.auto_probe, render.auto_recheck, render.auto_hosts)
    return FetchModes(reactor, parser.rules, pool, parser, auto), pool


__all__ = ["RenderFailed", "RenderPool", "Rendered", "build_modes"]
