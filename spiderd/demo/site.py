"""The demo site served over HTTP (``DemoSite``, ``listen``), and ``python -m spiderd.demo.site``.

The pages are ``spiderd.demo.pages.render``'s; slow pages wait on an injected clock.
"""

from __future__ import annotations

import argparse
import sys
from typing import IO, Any, Sequence, cast

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.interfaces import IDelayedCall, IListeningPort, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.resource import EncodingResourceWrapper, Resource
from twisted.web.server import NOT_DONE_YET, GzipEncoderFactory, Request, Site

from spiderd.core.reactors import ITCPClock
from spiderd.demo.pages import SiteSpec, render
from spiderd.demo.static import write_static

log = Logger()


class _Pages(Resource):
    """Serves ``render(spec, path)``; slow pages answer ``spec.slow_delay`` later on ``clock``."""

    isLeaf = True

    def __init__(self, spec: SiteSpec, clock: IReactorTime) -> None:
        super().__init__()
        self.spec = spec
        self.clock = clock
        self._slow = spec.expected().slow

    def render_GET(self, request: Request) -> bytes | int:
        path = request.path.decode("latin-1")
        status, headers, body = render(self.spec, path)
        request.setResponseCode(status)
        for name, value in headers.items():
            request.setHeader(name, value)
        if path in self._slow:
            return self._later(request, body)
        return body

    def _later(self, request: Request, body: bytes) -> int:
        call = self.clock.callLater(self.spec.slow_delay, _finish, request, body)
        request.notifyFinish().addErrback(_gone, call)
        return NOT_DONE_YET


def _finish(request: Request, body: bytes) -> None:
    request.write(body)
    request.finish()


def _gone(reason: Failure, call: IDelayedCall) -> None:
    """The client left before its slow page was due: drop the timer."""
    if call.active():
        call.cancel()


class DemoSite(EncodingResourceWrapper):
    """The whole site as one resource: ``render()``'s pages, gzip-encoded when the client accepts it.

    ``clock`` is the timer source of the slow pages (the reactor, or a ``task.Clock`` in tests).
    """

    def __init__(self, spec: SiteSpec, clock: IReactorTime) -> None:
        super().__init__(_Pages(spec, clock), [GzipEncoderFactory()])
        self.spec = spec
        self.clock = clock


class _QuietSite(Site):
    """A Site without twisted.web's access log (10,000 lines per benchmark run); ``requests``, if given,
    gets ``TIME METHOD PATH USER-AGENT`` per request as it arrives (the cluster test counts fetches per page
    and node)."""

    noisy = False

    def __init__(self, resource: Resource, requests: IO[str] | None = None) -> None:
        super().__init__(resource)
        self.requests = requests

    def getResourceFor(self, request: Request) -> Any:
        if self.requests is not None:
            agent = (request.getHeader(b"user-agent") or b"-").decode("latin-1")
            method, path = request.method.decode("latin-1"), request.path.decode("latin-1")
            self.requests.write(f"{self.reactor.seconds():.3f} {method} {path} {agent}\n")
            self.requests.flush()
        return super().getResourceFor(request)

    def log(self, request: http.Request) -> None:
        pass

    def logPrefix(self) -> str:
        return "DemoSite"


def make_site(spec: SiteSpec, clock: IReactorTime, requests: IO[str] | None = None) -> Site:
    """An HTTP factory serving the spec, gzip-encoded for clients that accept it; ``requests``: see _QuietSite."""
    return _QuietSite(DemoSite(spec, clock), requests)


def listen(spec: SiteSpec, reactor: ITCPClock, port: int = 0, interface: str = "127.0.0.1",
           clock: IReactorTime | None = None, requests: IO[str] | None = None) -> IListeningPort:
    """Serve the spec over TCP with ``reactor`` (its timers too, unless ``clock`` is given)."""
    listening = reactor.listenTCP(
        port,
        make_site(spec, clock or reactor, requests),  # type: ignore[arg-type]  # Twisted's hint takes no Site
        interface=interface,
    )
    log.info("demo site serving {pages} pages on http://{interface}:{port}/",
             pages=spec.lists + spec.details, interface=interface, port=port_of(listening))
    return listening


def port_of(listening: IListeningPort) -> int:
    """The TCP port ``listening`` is bound to (useful after asking for port 0)."""
    address = listening.getHost()
    assert isinstance(address, (IPv4Address, IPv6Address))
    return address.port


def _size(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m spiderd.demo.site", description="Serve the demo site.")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port (default 8080)")
    parser.add_argument("--interface", default="127.0.0.1")
    parser.add_argument("--lists", type=int, default=SiteSpec.lists)
    parser.add_argument("--details", type=int, default=SiteSpec.details)
    parser.add_argument("--per-list", type=int, default=None)
    parser.add_argument("--size", type=_size, default=SiteSpec.detail_size, help="MIN-MAX detail page bytes")
    parser.add_argument("--seed", type=int, default=SiteSpec.seed)
    parser.add_argument("--no-faults", dest="faults", action="store_false")
    parser.add_argument("--slow-delay", type=float, default=SiteSpec.slow_delay)
    parser.add_argument("--crawl-delay", type=float, default=None)
    parser.add_argument("--write-static", metavar="DIR", help="write the static copy to DIR and exit")
    parser.add_argument("--requests-log", metavar="FILE", help="append 'TIME METHOD PATH USER-AGENT' per request to FILE")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the site until SIGTERM/SIGINT, announcing ``LISTENING <port>`` on stdout."""
    from twisted.logger import globalLogBeginner, textFileLogObserver

    args = _arguments(argv)
    try:
        spec = SiteSpec(args.lists, args.details, args.per_list, args.size, args.seed, args.faults,
                        args.slow_delay, args.crawl_delay)
    except ValueError as e:
        raise SystemExit(f"python -m spiderd.demo.site: {e}") from None
    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)], redirectStandardIO=False)
    if args.write_static:
        write_static(spec, args.write_static)
        return
    from twisted.internet import reactor

    requests = open(args.requests_log, "a") if args.requests_log else None
    port = listen(spec, cast(ITCPClock, reactor), args.port, args.interface, requests=requests)  # it provides both
    sys.stdout.write(f"LISTENING {port_of(port)}\n")
    sys.stdout.flush()
    reactor.run()


if __name__ == "__main__":
    main()
