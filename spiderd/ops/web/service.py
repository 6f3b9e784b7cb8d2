"""The API as a Service: listens (in ``privilegedStartService`` under twistd, so a taken port stops the start before
anything else runs), samples the history, and stops listening first when the node stops."""

from __future__ import annotations

import socket
from importlib import resources
from typing import Any

from twisted.application.service import Service
from twisted.internet import task
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IListeningPort, IReactorTime
from twisted.logger import Logger

from spiderd.config.sections import ApiSection
from spiderd.core.net.auth import Auth
from spiderd.core.net.serving import JsonSite
from spiderd.core.reactors import ITCPClock
from spiderd.ops.lag import ReactorLag
from spiderd.ops.web.api import ApiResource
from spiderd.ops.web.history import History
from spiderd.ops.web.metrics import Metrics
from spiderd.ops.web.node import Node

log = Logger()

MAX_BODY = 32 * 1024 * 1024  # bytes: an import's chunk (spiderctl sends 5,000 lines per request)


def page_html() -> bytes:
    """The status page (one self-contained file)."""
    return resources.files(__package__).joinpath("status.html").read_bytes()


def api_service(config: ApiSection, reactor: ITCPClock, node: Node) -> ApiService:
    """The HTTP API of ``[api]``: its address and credentials (a bearer token, basic auth, or none on loopback)."""
    return ApiService(reactor, node, bind=config.bind, port=config.port,
                      auth=Auth(config.token, config.username, config.password))


class ApiService(Service):
    """The HTTP API of one node (its name: ``api``); ``clock`` (default: the reactor) drives the history sampler."""

    name = "api"  # type: ignore[assignment]  # Service declares it None

    def __init__(self, reactor: ITCPClock, node: Node, *, bind: str = "127.0.0.1", port: int = 6810,
                 auth: Auth | None = None, clock: IReactorTime | None = None, interval: float = 10.0) -> None:
        self._reactor = reactor
        self._bind = bind
        self._port_number = port
        self.auth = auth or Auth()
        self.node = node
        self.history = History(clock or reactor, node.pages, node.queue, interval)
        self.metrics = Metrics(node, self.history)
        self.lag = ReactorLag(clock or reactor, observe=self.metrics.reactor_lag.observe)
        self._cooperator = task.Cooperator(scheduler=lambda work: reactor.callLater(0, work), started=False)
        self.resource = ApiResource(node, self.history, self.metrics, self.auth, self._cooperator, page_html(),
                                    self.lag)
        self.site = JsonSite(self.resource, MAX_BODY, socket.gethostname(), "API", reactor=reactor)
        self.port: IListeningPort | None = None

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) listened on (known after the start, even when port 0 was asked)."""
        assert self.port is not None, "the API is not listening"
        host = self.port.getHost()
        assert isinstance(host, (IPv4Address, IPv6Address))
        return host.host, host.port

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    def privilegedStartService(self) -> None:
        super().privilegedStartService()
        self._listen()

    def _listen(self) -> None:
        if self.port is not None:
            return
        try:
            self.port = self._reactor.listenTCP(
                self._port_number,
                self.site,  # type: ignore[arg-type]  # Twisted's hint takes no Site (a factory of another protocol)
                interface=self._bind,
            )
        except CannotListenError as e:
            log.error("API: cannot listen on {bind}:{port} (api.bind, api.port): {error}", bind=self._bind,
                      port=self._port_number, error=e.socketError)
            raise

    def startService(self) -> None:
        self._listen()
        super().startService()
        self._cooperator.start()
        self.history.start()
        self.lag.start()
        log.info("API on {url} (status page {url}, metrics {url}metrics; auth: {auth})", url=self.url,
                 auth=_describe(self.auth))

    def stopService(self) -> Any:
        super().stopService()
        self.history.stop()
        self.lag.stop()
        self._cooperator.stop()
        port, self.port = self.port, None
        return port.stopListening() if port is not None else None


def _describe(auth: Auth) -> str:
    kinds = [name for name, on in (("bearer token", auth.token), ("basic", auth.username)) if on]
    return " or ".join(kinds) or "none (loopback only)"
