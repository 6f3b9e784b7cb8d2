"""The fetch pool: pages fetched, parsed and compressed in child processes (``[fetch] processes``), each with its own
reactor (:mod:`spiderd.fetch.fetchworker`), so that every core works and the main process keeps the frontier.

What stays in the main process: the pool, politeness and the order of fetches (a URL goes to a child only when its
host's turn came); robots.txt, checked before a URL goes to a child and for each redirect's target; a redirect,
which the child hands back unfollowed and the main process's fetcher follows
(:meth:`~spiderd.fetch.fetcher.Fetcher.follow_on`); Crawl-delay; per-IP politeness, each child telling the lookups it
made.  A page archived as WARC or rendered in a browser, and one of a site that keeps cookies (its jar is one), is
fetched in the main process as before (:meth:`takes`).  A URL goes to the child with the fewest fetches in hand.

A child that exits fails the fetches it held (``network``, with its words: the pool retries them as any network
error; those of a child that never started are fetched in the main process) and is started again after a growing
delay; while none runs, :meth:`fetch` fetches in the main process.  A
child holding a fetch ``timeout + GRACE`` seconds (its own fetcher gives up at ``timeout``) is killed.
``stopService`` closes the children's input; each answers what it holds and exits, and is killed at the deadline.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core import status as st
from spiderd.core.cpus import processes
from spiderd.core.conditional import Validators
from spiderd.core.reactors import IProcessClock
from spiderd.fetch.extract import MAX_LINKS, Rules
from spiderd.fetch.fetcher import FetchConfig, Fetcher, FetchResult, REDIRECT_CODES, failed_result, robots_denied
from spiderd.fetch.fetchworker import init_message, result_from, validators_fields, validators_from
from spiderd.fetch.parsechild import ChildPool, RulesVersions, WorkerProcess, spawn_module, write_now
from spiderd.fetch.parseworker import extracted_from, frame, plain_sites

log = Logger()
GRACE = 10.0  # seconds past the fetch timeout before a child holding a fetch is taken for stuck


class FetchChild(WorkerProcess):
    """One fetch child: requests out on its stdin, answers in on its stdout, the fetches it holds by id."""

    what = "Fetch worker"

    def __init__(self, owner: FetchPool, slot: int, clock: Any) -> None:
        super().__init__(slot, clock)
        self.owner = owner
        self.held: dict[int, tuple[Deferred[FetchResult], float, tuple[Any, ...]]] = {}  # id -> (its Deferred,
        # sent at, the request)

    def connectionMade(self) -> None:
        super().connectionMade()
        log.info("Fetch worker {slot} started (pid {pid})", slot=self.slot, pid=self.pid)

    def started_with(self, rules: Rules) -> None:
        self._versions = RulesVersions(rules)

    def send(self, request_id: int, request: tuple[Any, ...], d: Deferred[FetchResult], rules: Rules) -> None:
        self.held[request_id] = (d, self.clock.seconds(), request)
        for message in self._versions.use(rules):
            write_now(self.transport, frame(message))
        write_now(self.transport, frame(request))

    def cancel(self, request_id: int) -> None:
        if self.held.pop(request_id, None) is not None:
            write_now(self.transport, frame(("cancel", request_id)))

    def message(self, message: tuple[Any, ...]) -> None:
        if message[0] == "ready":
            self.ready = True
            self.owner.child_ready(self)
            return
        if message[0] == "address":
            self.owner.told(message[1], message[2])
            return
        request_id, fields, extracted = message
        held = self.held.pop(request_id, None)
        if held is None:  # cancelled meanwhile
            return
        result = result_from(fields)
        if extracted is not None:
            result.parsed = extracted_from((request_id, *extracted))
        self.owner.answered(self)
        held[0].callback(result)

    def processEnded(self, reason: Failure) -> None:
        self.owner.child_ended(self, reason)


class FetchPool(ChildPool):
    """Fetches in ``workers`` child processes for ``fetcher`` (the node's: its robots.txt, its redirects, its
    address listeners)."""

    def __init__(self, reactor: IProcessClock, fetcher: Fetcher, config: FetchConfig, rules: Rules, workers: int = -1,
                 *, max_links: int = MAX_LINKS, stop_timeout: float = 10.0, restart_delay: float = 0.1,
                 max_restart_delay: float = 30.0,
                 spawn: Callable[[IProcessClock, FetchChild], None] | None = None) -> None:
        super().__init__(reactor, processes(workers), restart_delay, max_restart_delay, "fetch worker",
                         self._check_progress)
        self.fetcher = fetcher
        self.config = config
        self.rules = rules
        self.max_links = max_links
        self.stop_timeout = stop_timeout
        self._spawn_child = spawn or (lambda reactor, child: spawn_module(reactor, child, "spiderd.fetch.fetchworker"))
        self._cookies = any(site.cookies for site in config.sites)  # a site keeps cookies: its URLs stay here
        self._children: list[FetchChild | None]
        self._ending: set[FetchChild] = set()  # input closed at stop: answering what they hold
        self._next_id = 0
        self.answered_count = 0  # fetches the children answered
        self.exits = 0  # children that exited while the pool ran (each failed what it held, and was restarted)

    # -- the service --------------------------------------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        self._start_slots(1.0)

    def stopService(self) -> Deferred[None]:
        """Close the children's input: each answers what it holds, then exits (killed at the deadline)."""
        super().stopService()
        if self._begin_stop():
            waiters, self._ready_waiters = self._ready_waiters, []
            for waiter in waiters:
                waiter.callback(None)
            for child in self._live():
                self._ending.add(child)
                child.transport.closeStdin()
            self._children = [None] * self.workers
            if self._ending:
                self._deadline = self._reactor.callLater(self.stop_timeout, self._kill_all)
            else:
                self._now_stopped()
        return self._when_stopped()

    # -- fetching -----------------------------------------------------------------------------------------------

    def usable(self, fetcher: Fetcher) -> bool:
        """Whether a fetch of ``fetcher``'s may go to a child: it is this pool's fetcher, it does not keep its
        answers (WARC), and a child runs (one starting takes its requests once it is ready: its pipe holds them)."""
        return bool(self.running and fetcher is self.fetcher and not fetcher.keeps_answers
                    and any(c is not None for c in self._children))

    def takes(self, fetcher: Fetcher, url: str) -> bool:
        """Whether ``url`` may be fetched by a child (:meth:`usable`), its site keeping no cookies (a site's jar is
        the main process's fetcher's: one jar, whichever child would fetch)."""
        if not self.usable(fetcher):
            return False
        if not self._cookies:
            return True
        site = self.rules.site_for(url)
        return site is None or not site.cookies

    def fetch(self, url: str, validators: Validators | None = None, user_agent: str | None = None,
              robots: bool = True, kind: str | None = None, rules: Rules | None = None,
              preset: int | None = None) -> Deferred[FetchResult]:
        """``url`` fetched as :meth:`Fetcher.fetch` would (never fails); a 200 parsed as ``kind`` with ``rules``
        (the pool's when None) and compressed with ``preset`` in the child (``FetchResult.parsed``, its body then
        empty); without a ``kind``, the body comes back."""
        robots_check = self.fetcher.robots if robots else None
        if robots_check is None:
            return self._send(url, validators, user_agent, robots, kind, rules, preset)
        d = robots_check.allowed(url, user_agent)
        return d.addCallback(self._if_allowed, url, validators, user_agent, kind, rules, preset)

    def _if_allowed(self, allowed: bool, url: str, validators: Validators | None, user_agent: str | None,
                    kind: str | None, rules: Rules | None, preset: int | None) -> Any:
        if not allowed:
            return robots_denied(url, url)
        return self._send(url, validators, user_agent, True, kind, rules, preset)

    def _send(self, url: str, validators: Validators | None, user_agent: str | None, robots: bool, kind: str | None,
              rules: Rules | None, preset: int | None) -> Deferred[FetchResult]:
        child = self._pick()
        if child is None:  # none running (all restarting): the main process fetches
            return self.fetcher.fetch(url, user_agent, robots=robots, validators=validators)
        self._next_id += 1
        request_id = self._next_id
        d: Deferred[FetchResult] = Deferred(lambda _: child.cancel(request_id))
        child.send(request_id, ("fetch", request_id, url, user_agent, validators_fields(validators), kind, preset),
                   d, rules or self.rules)
        d.addErrback(self._cancelled, url, child.clock.seconds())
        return d.addCallback(self._answered, user_agent, robots, validators)

    def _cancelled(self, failure: Failure, url: str, sent: float) -> FetchResult:
        failure.trap(CancelledError)
        return failed_result(failure, url, self._reactor.seconds() - sent, self.config.timeout)

    def _answered(self, result: FetchResult, user_agent: str | None, robots: bool,
                  validators: Validators | None) -> Any:
        if result.status in REDIRECT_CODES:
            return self.fetcher.follow_on(result, user_agent, robots, validators)
        return result

    def set_sites(self, sites: tuple[Any, ...]) -> None:
        """The children fetch with ``sites``' headers and proxies from now on (as ``Fetcher.set_sites``)."""
        self.config = dataclasses.replace(self.config, sites=sites)  # (a child started later has them too)
        self._cookies = any(site.cookies for site in sites)
        for child in self._live():
            write_now(child.transport, frame(("sites", plain_sites(sites))))

    def told(self, host: str, address: str) -> None:
        """A child looked ``host`` up at ``address``: the fetcher's address listeners are told (per-IP)."""
        self.fetcher.tell(host, address)

    def status(self) -> dict[str, int]:
        """The counters of ``/api/status`` and ``/metrics``: children configured and up, fetches in their hands and
        answered, children that exited."""
        return {"processes": self.workers, "up": sum(1 for c in self._live() if c.ready), "in_flight": self.in_flight,
                "answered": self.answered_count, "exited": self.exits}

    @property
    def in_flight(self) -> int:
        return sum(len(child.held) for child in self._live())

    def pids(self) -> list[int]:
        return [c.pid for c in self._live() if c.pid is not None]

    def _pick(self) -> FetchChild | None:
        """The running child with the fewest fetches in hand."""
        best = None
        for child in self._children:
            if child is not None and (best is None or len(child.held) < len(best.held)):
                best = child
        return best

    # -- children -----------------------------------------------------------------------------------------------

    def _spawn(self, slot: int) -> None:
        self._restarts.started(slot)
        child = FetchChild(self, slot, self._reactor)
        self._children[slot] = child
        try:
            self._spawn_child(self._reactor, child)
        except Exception:
            log.failure("Cannot start fetch worker {slot}", slot=slot)
            self._children[slot] = None
            self._schedule_restart(slot)
            return
        tell = bool(self.fetcher.tells_addresses)
        child.transport.write(frame(init_message(self.config, self.rules, self.max_links, tell)))
        child.started_with(self.rules)

    def child_ready(self, child: FetchChild) -> None:
        log.debug("Fetch worker {slot} (pid {pid}) is ready", slot=child.slot, pid=child.pid)
        self._fire_ready()

    def answered(self, child: FetchChild) -> None:
        """``child`` answered a fetch: it works (its next restart is after the shortest delay again)."""
        self.answered_count += 1
        self._restarts.worked(child.slot)

    def child_ended(self, child: FetchChild, reason: Failure) -> None:
        """Fail what it held (a network error, retried as one), and start another in its slot unless stopping."""
        self._ending.discard(child)
        if child.slot < len(self._children) and self._children[child.slot] is child:
            self._children[child.slot] = None
            self.exits += 1
            why = f"{child.killed_because}: " if child.killed_because else ""
            log.warn("Fetch worker {slot} (pid {pid}) exited: {why}{reason} with {count} fetches in hand",
                     slot=child.slot, pid=child.pid, why=why, reason=reason.getErrorMessage(), count=len(child.held))
            self._schedule_restart(child.slot)
        held, child.held = child.held, {}
        words = st.reason(st.NETWORK_ERROR, f"fetch worker {child.slot} exited before answering")
        for d, sent, (_, _, url, user_agent, validators, _, _) in held.values():
            if not child.ready:  # it never took a request: the main process fetches them (robots.txt was checked)
                fetched = self.fetcher.fetch(url, user_agent, robots=False, validators=validators_from(validators))
                fetched.addCallback(_unless_cancelled, d)  # (cancelled meanwhile: its result goes nowhere)
                continue
            d.callback(FetchResult(url, st.NETWORK_ERROR, url, error="network", elapsed=self._reactor.seconds() - sent,
                                   reason=words))
        self._check_stopped()

    def _check_progress(self) -> None:
        """Kill a child holding a fetch past its timeout and the grace; a child that answered is not failing."""
        try:
            now = self._reactor.seconds()
            limit = self.config.timeout + GRACE
            for child in self._live() + list(self._ending):
                if child.held and now - min(sent for _, sent, _ in child.held.values()) > limit:
                    child.kill(f"a fetch held over {limit:g} s")
        except Exception:
            log.failure("Fetch watchdog failed")

    def _kill_all(self) -> None:
        self._deadline = None
        for child in list(self._ending):
            child.kill(f"still fetching {self.stop_timeout:g} s after stop")

    def _check_stopped(self) -> None:
        if not self._ending:
            self._now_stopped()


def _unless_cancelled(result: FetchResult, d: Deferred[FetchResult]) -> None:
    if not d.called:
        d.callback(result)


__all__ = ["FetchChild", "FetchPool"]
