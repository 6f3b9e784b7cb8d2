"""RedisPool's status recorder: the outcomes of leased URLs (``status.lua``, in line through the channel), redirect
claims (``claim.lua``), the validators kept for conditional GET, and items checkpoints, written in the status call
of the statuses they commit."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from spiderd.contracts.pool import ICheckpoints
from spiderd.core import conditional as cg
from spiderd.core import status as st
from spiderd.core.urls import URL, registered_domain
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool.options import PoolOptions
from spiderd.frontier.pool.redis.channel import RedisChannel
from spiderd.frontier.pool.redis.handed import LEAVE, Handed
from spiderd.frontier.pool.redis.keys import fingerprint_hex, status_keys
from spiderd.frontier.pool.redis.queues import lease_deadline
from spiderd.frontier.pool.shared import HostErrors, URLParser, parsed, status_parts


def located(u: URL) -> tuple[str, str, str]:
    """A URL's canonical form, host and registered domain: where the scripts file it."""
    return u.url, u.host, registered_domain(u.host)


@implementer(ICheckpoints)
class RedisStatuses:
    """claim, fetched, set_status(es), throttle, validators and checkpoints over the ``channel``; ``kept``: the
    recrawled kinds by registered domain (status.lua keeps those pages in crawled sets); ``handed``: the
    validators this node popped; ``host_errors``: this node's failed fetches per host."""

    def __init__(self, channel: RedisChannel, clock: IReactorTime, urls: URLParser, politeness: Politeness,
                 options: PoolOptions, kept: dict[str, str], handed: Handed, host_errors: HostErrors) -> None:
        self._channel = channel
        self._clock = clock
        self._urls = urls
        self._politeness = politeness
        self._pending_threshold = options.config.pending_threshold
        self._done_codes = options.done_codes
        self._final_codes = options.final_codes
        self._kept = kept
        self._handed = handed
        self._host_errors = host_errors

    # -- leases ---------------------------------------------------------------------

    def claim(self, url: str, by: str | None = None) -> defer.Deferred[bool]:
        """Lease ``url`` (a redirect target) unless it is done, failed or leased already; fires True if leased.

        A claim that ``by`` (the redirecting URL) holds already is renewed: its
        next fetch, after a crash or a failed processing, takes the target again.
        """
        u = self._urls.parse(url)
        if u is None:
            return defer.succeed(False)
        owner = parsed(by, self._urls.max_url_length)
        now = self._clock.seconds()
        args = [lease_deadline(now, self._pending_threshold), *located(u), owner.url if owner is not None else ""]
        return self._channel.run("claim", args, now).addCallback(bool)

    def validators(self, url: str) -> defer.Deferred[cg.Validators | None]:
        """The validators kept for ``url``: for a URL this node popped, from the pop's answer; else asked of Redis."""
        return self._handed.get(url)

    def fetched(self, url: str, elapsed: float | None = None) -> defer.Deferred[None]:
        """The request for a handed-out URL is over (it took ``elapsed`` seconds, if given: adaptive politeness
        paces its host by it, for every node): free its host slot (the lease stays until set_status).  Goes out
        with the statuses, in status.lua's call (a 'fetched' entry)."""
        took = "" if elapsed is None else repr(float(elapsed))
        entry = ["fetched", url, took, *self._politeness.adaptive.args(), "", fingerprint_hex(url), "", ""]
        if self._channel.status_wait > 0:
            self._channel.fetched_waiting[url] = entry
        return self._channel.queue_statuses(entry)

    def _drop_fetched(self, url: str, host: str) -> None:
        """A status given while the URL's 'fetched' entry still waits frees the host slot itself: the entry is
        left out (emptied), unless it paces the host (adaptive politeness: its duration counts)."""
        entry = self._channel.fetched_waiting.pop(url, None)
        if entry is not None and not self._politeness.adaptive_of(host).on:
            entry.clear()

    # -- outcomes -------------------------------------------------------------------

    def set_status(self, url: str, status_code: int, reason: str | None = None) -> defer.Deferred[None]:
        """Record a fetch outcome; statuses given while one is on its way go out together, in one script call."""
        return self.set_statuses(((url, status_code, reason),))

    def throttle(self, url: str, until: float, status_code: int, reason: str | None = None) -> defer.Deferred[None]:
        """A throttling answer: the host's ``P next`` becomes ``until`` for every node, the URL queued again
        without a failure up to ``max_throttles`` times (``P throttles``); in line with the other statuses."""
        u = self._urls.parse(url)
        if u is None:
            return defer.succeed(None)
        url, host, domain = located(u)
        self._handed.forget(url)
        self._host_errors.add(host)
        outcome = f"throttle {self._outcome(status_code)} {float(until)!r}"
        channel = self._channel
        return channel.queue_statuses([outcome, url, host, domain, self._kept.get(domain, "-"),
                                       st.recorded(status_code, reason), LEAVE,
                                       *status_keys(url, channel.prefix, channel.bits)])

    def set_statuses(
        self, statuses: Iterable[tuple[Any, ...]], checkpoint: tuple[str, int] | None = None
    ) -> defer.Deferred[None]:
        """Record several outcomes (``(url, code)``, ``(url, code, reason)`` or ``(url, code, reason,
        validators)``) and ``checkpoint`` (a name and a count) in one script call (atomic)."""
        channel = self._channel
        args: list[str] = []
        for url, code, reason, validators in map(status_parts, statuses):
            u = self._urls.parse(url)
            if u is not None:
                url, host, domain = located(u)
                if channel.fetched_waiting:
                    self._drop_fetched(url, host)
                outcome = self._outcome(code)
                why = "" if outcome == "done" else st.recorded(code, reason)
                if outcome != "done":
                    self._host_errors.add(host)
                args += (outcome, url, host, domain, self._kept.get(domain, "-"), why, self._handed.arg(validators),
                         *status_keys(url, channel.prefix, channel.bits))
                self._handed.forget(url)
        if checkpoint is not None:
            args += ("checkpoint", checkpoint[0], str(int(checkpoint[1])), "", "", "", "", "", "", "")
        return channel.queue_statuses(args)

    def _outcome(self, status_code: int) -> str:
        if status_code in self._done_codes:
            return "done"
        if status_code in self._final_codes:
            return "final"
        return "retry"

    # -- checkpoints ----------------------------------------------------------------

    def checkpoint(self, name: str) -> defer.Deferred[int | None]:
        """The count last recorded under ``name`` by ``set_statuses``, or None."""
        d = self._channel.execute("HGET", self._channel.prefix + "checkpoints", name)
        return d.addCallback(lambda value: None if value is None else int(value))

    def drop_checkpoint(self, name: str) -> defer.Deferred[None]:
        return self._channel.execute("HDEL", self._channel.prefix + "checkpoints", name).addCallback(lambda _: None)
