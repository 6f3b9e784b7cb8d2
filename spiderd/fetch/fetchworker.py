"""A fetch worker: a child process with its own reactor that fetches pages, parses them and compresses them, for the
fetch pool (:mod:`spiderd.fetch.fetchpool`), so that the main process's reactor keeps only the frontier's work.

The wire is the parse workers' (:mod:`spiderd.fetch.parseworker`): length-prefixed ``marshal`` frames, one pipe each
way.  The parent first sends ``("init", config, sites, rules...)`` (:func:`init_message`); the child answers
``("ready", pid)``.  The rules' versions change as a parse worker's do (``rules``, ``use``, ``forget``); ``("sites",
sites)`` gives the fetcher other ``[[sites]]`` (headers, proxies).  A request ``("fetch", id, url, user_agent,
validators, kind, preset)`` is fetched with no robots.txt check (the parent checks it first) and no redirect
followed (the parent follows one, checking its target's robots.txt: :meth:`~spiderd.fetch.fetcher.Fetcher.follow_on`);
``("cancel", id)`` cancels one.  Each is answered, in any order, ``(id, result, extracted)``: ``result`` the
:class:`~spiderd.fetch.fetcher.FetchResult`'s fields (:func:`result_fields`), ``extracted`` the fields of the page's
:class:`~spiderd.fetch.extract.Extracted` (a 200 with a ``kind``, parsed and, with a ``preset``, compressed, as a parse
worker does: its body is then not sent back) or None.  With ``tell`` in its configuration, each host name's lookup is
told ``("address", host, address)`` (per-IP politeness is the parent's).  At the end of its input the child answers
what it holds and exits; it ignores SIGINT and SIGTERM (the parent ends it).
"""

from __future__ import annotations

import dataclasses
import marshal
import os
import signal
import sys
from typing import Any

from spiderd.core import status as st
from spiderd.core.conditional import Validators
from spiderd.fetch.extract import MAX_LINKS, Rules, gave_nothing
from spiderd.fetch.fetcher import FetchConfig, FetchResult
from spiderd.fetch.parseworker import (
    FrameDecoder, Versions, frame, grow_pipe, init_message as parse_init, parsed, plain_sites, rules_from, sites_from,
)

RESULT_FIELDS = ("url", "status", "final_url", "body", "content_type", "redirects", "wire_bytes", "elapsed", "error",
                 "reason", "robots_tag", "retry_after", "validators", "headers", "http_version", "phrase",
                 "request_headers", "fetched_at")


def init_message(config: FetchConfig, rules: Rules, max_links: int = MAX_LINKS, tell: bool = False) -> tuple[Any, ...]:
    """The first message to a fetch worker: the fetcher's configuration (no robots.txt of its own: the parent checks
    it), its sites, whether it tells lookups, and the parse rules (a parse worker's init)."""
    knobs = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "sites"}
    knobs.update(robots=False, robots_store="", tell_addresses=False)
    return ("init", knobs, plain_sites(config.sites), tell, parse_init(rules, max_links))


def config_from(message: tuple[Any, ...]) -> tuple[FetchConfig, bool, Rules, int]:
    """The FetchConfig, ``tell``, Rules and max_links of an init message."""
    tag, knobs, sites, tell, parse = message
    if tag != "init":
        raise ValueError(f"expected an init message, got {tag!r}")
    knobs["source_addresses"] = tuple(knobs["source_addresses"])
    rules, max_links = rules_from(parse)
    return FetchConfig(**knobs, sites=sites_from(sites)), tell, rules, max_links


def validators_fields(validators: Validators | None) -> tuple[Any, ...] | None:
    return None if validators is None else (validators.etag, validators.last_modified)


def validators_from(fields: tuple[Any, ...] | None) -> Validators | None:
    return None if fields is None else Validators(*fields)


def result_fields(result: FetchResult) -> tuple[Any, ...]:
    """A result as plain data (its ``previous``, ``rendered`` and ``parsed`` are not sent: a child has none)."""
    fields = [getattr(result, name) for name in RESULT_FIELDS]
    fields[3] = bytes(fields[3])
    fields[12] = validators_fields(result.validators)
    return tuple(fields)


def result_from(fields: tuple[Any, ...]) -> FetchResult:
    """The FetchResult of :func:`result_fields`'s data."""
    values = dict(zip(RESULT_FIELDS, fields))
    values["validators"] = validators_from(values["validators"])
    values["headers"] = None if values["headers"] is None else [tuple(pair) for pair in values["headers"]]
    values["request_headers"] = [tuple(pair) for pair in values["request_headers"]]
    return FetchResult(**values)


class Serving:
    """The child's side: requests in, fetched (and parsed) answers out, on its own reactor."""

    def __init__(self, reactor: Any, write: Any, stop: Any) -> None:
        self._reactor = reactor
        self._write = write  # one frame's bytes out
        self._stop = stop  # ends the child once its answers are written
        self._frames = FrameDecoder()
        self._fetcher: Any = None
        self._versions: Versions | None = None
        self._max_links = MAX_LINKS
        self._held: dict[int, Any] = {}  # request id -> its fetch's Deferred
        self._ending = False

    def received(self, data: bytes) -> None:
        for payload in self._frames.feed(data):
            self.message(marshal.loads(payload))

    def message(self, message: tuple[Any, ...]) -> None:
        tag = message[0]
        if tag == "fetch":
            self._fetch(*message[1:])
        elif tag == "cancel":
            d = self._held.get(message[1])
            if d is not None:
                d.cancel()
        elif tag == "init":
            self._start(message)
        elif tag == "sites":
            self._fetcher.set_sites(sites_from(message[1]))
        else:
            assert self._versions is not None
            self._versions.control(message)

    def _start(self, message: tuple[Any, ...]) -> None:
        from spiderd.fetch.fetcher import Fetcher

        config, tell, rules, self._max_links = config_from(message)
        on_address = self._tell if tell else None
        self._fetcher = Fetcher(self._reactor, config, on_address=on_address)
        self._versions = Versions(rules)
        self._write(frame(("ready", os.getpid())))

    def _tell(self, host: str, address: str) -> None:
        self._write(frame(("address", host, address)))

    def _fetch(self, request_id: int, url: str, user_agent: str | None, validators: Any, kind: str | None,
               preset: int | None) -> None:
        assert self._versions is not None
        rules = self._versions.current
        d = self._fetcher.fetch(url, user_agent, robots=False, validators=validators_from(validators), follow=False)
        self._held[request_id] = d
        d.addCallback(self._answer, request_id, rules, kind, preset)
        d.addErrback(self._broken, request_id, url)

    def _answer(self, result: FetchResult, request_id: int, rules: Rules, kind: str | None,
                preset: int | None) -> None:
        """Parse (and compress) a 200 where it was fetched: here, on the reactor's thread (a thread of its own for
        lzma measured 15% more CPU a page); the body stays behind, but for a page that gave nothing (the parent's
        hint that its content may be written by JavaScript reads it) or one that could not be parsed here."""
        extracted = None
        if result.status == 200 and kind is not None:
            try:
                extracted = parsed(rules, self._max_links, result.final_url, result.body, result.content_type, kind,
                                   self._reactor.seconds(), 200, preset, result.robots_tag)
            except Exception as e:  # the parent parses it, and says why
                sys.stderr.write(f"parsing {result.final_url[:200]} failed here: {type(e).__name__}: {e}\n")
            else:
                if not gave_nothing(*extracted[:3]):
                    result.body = b""
        elif result.status != 200:
            result.body = b""  # (no WARC with fetch workers: the answer's body of a failure is not wanted)
        self._send(request_id, result, extracted)

    def _send(self, request_id: int, result: FetchResult, extracted: tuple[Any, ...] | None) -> None:
        self._held.pop(request_id, None)
        self._write(frame((request_id, result_fields(result), extracted)))
        self._check_end()

    def _broken(self, failure: Any, request_id: int, url: str) -> None:
        """A bug on this side (the fetcher never fails): the parent is told as a failed fetch."""
        result = FetchResult(url, st.NETWORK_ERROR, url, error="network",
                             reason=st.reason(st.NETWORK_ERROR, f"fetch worker: {failure.getErrorMessage()}"))
        self._send(request_id, result, None)

    def input_ended(self) -> None:
        """The parent closed our input: answer what is held, then end."""
        self._ending = True
        self._check_end()

    def _check_end(self) -> None:
        if self._ending and not self._held:
            self._ending = False
            closing = self._fetcher.close() if self._fetcher is not None else None
            if closing is not None:
                closing.addBoth(lambda _: self._stop())
            else:
                self._stop()


def main() -> int:
    """The child's entry point: its own reactor, frames on stdin and stdout, stray prints to stderr."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    from twisted.internet import epollreactor

    epollreactor.install()
    from twisted.internet import reactor
    from twisted.internet.interfaces import IHalfCloseableProtocol
    from twisted.internet.protocol import Protocol
    from twisted.internet.stdio import StandardIO
    from zope.interface import implementer

    from spiderd.core.memory import keep_heap

    keep_heap()
    grow_pipe(0)
    grow_pipe(1)

    @implementer(IHalfCloseableProtocol)
    class Pipe(Protocol):
        def connectionMade(self) -> None:
            transport: Any = self.transport
            self.serving = Serving(reactor, transport.write, transport.loseConnection)

        def dataReceived(self, data: bytes) -> None:
            self.serving.received(data)

        def readConnectionLost(self) -> None:
            self.serving.input_ended()

        def writeConnectionLost(self) -> None:  # the parent is gone: nothing to answer to
            self.connectionLost()

        def connectionLost(self, reason: Any = None) -> None:  # (after the answers written: loseConnection)
            if reactor.running:
                reactor.stop()

    out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    StandardIO(Pipe(), stdin=0, stdout=out, reactor=reactor)  # type: ignore[call-arg]  # (POSIX's takes them)
    reactor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
