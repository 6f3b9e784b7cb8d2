"""The API as a Service: listens (in ``privilegedStartService`` under twistd, so a taken port stops the start before
anything else runs; on a TCP port, a UNIX socket or a socket systemd passes), samples the history, and stops
listening first when the node stops."""

from __future__ import annotations

import socket
from importlib import resources
from typing import Any

from twisted.application.service import Service
from twisted.internet import task
from twisted.internet.interfaces import IListeningPort, IReactorTime
from twisted.logger import Logger

from spiderd.config.listen import listen_endpoint
from spiderd.config.sections import ApiSection
from spiderd.core.net.auth import Auth
from spiderd.core.net.listener import Listen, Listener
from spiderd.core.net.serving import JsonSite
from spiderd.core.reactors import IServingClock
from spiderd.ops.lag import ReactorLag
from spiderd.ops.web.api import ApiResource, json_body
from spiderd.ops.web.history import History
from spiderd.ops.web.metrics import Metrics
from spiderd.ops.web.node import Node
from spiderd.ops.web.sitesapi import SitesApi

log = Logger()

MAX_BODY = 32 * 1024 * 1024  # bytes: an import's chunk (spiderctl sends 5,000 lines per request)


def page_html(name: str = "status.html") -> bytes:
    """A page of the API (one self-contained file): the status page, or the sites page (``sites.html``)."""
    return resources.files(__package__).joinpath(name).read_bytes()


def api_service(config: ApiSection, reactor: IServingClock, node: Node) -> ApiService:
    """The HTTP API of ``[api]``: where it listens, its connections' deadlines, and its credentials (a bearer
    token, basic auth, or none on loopback)."""
    endpoint = listen_endpoint(config.listen, config.bind, config.port, config.backlog)
    return ApiService(reactor, node, listen=Listen(endpoint, config.header_timeout, config.idle_timeout),
                      auth=Auth(config.token, config.username, config.password))


class ApiService(Service):
    """The HTTP API of one node (its name: ``api``); ``clock`` (default: the reactor) drives the history sampler."""

    name = "api"  # type: ignore[assignment]  # Service declares it None

    def __init__(self, reactor: IServingClock, node: Node, *, listen: Listen = Listen(), auth: Auth | None = None,
                 clock: IReactorTime | None = None, interval: float = 10.0) -> None:
        self._listener = Listener(reactor, listen.endpoint, "API", "api.listen, or api.bind and api.port")
        self.auth = auth or Auth()
        self.node = node
        self.history = History(clock or reactor, node.pages, node.queue, interval)
        self.metrics = Metrics(node, self.history)
        self.lag = ReactorLag(clock or reactor, observe=self.metrics.reactor_lag.observe)
        self._cooperator = task.Cooperator(scheduler=lambda work: reactor.callLater(0, work), started=False)
        sites = None
        if node.sites is not None:
            figures = node.stats.sites if node.stats is not None else None
            sites = SitesApi(node.sites, self.auth, json_body, node.tester, figures)
        self.resource = ApiResource(node, self.history, self.metrics, self.auth, self._cooperator, page_html(),
                                    self.lag, sites, page_html("sites.html"))
        self.site = JsonSite(self.resource, MAX_BODY, socket.gethostname(), "API", reactor=reactor,
                             header_timeout=listen.header_timeout, idle_timeout=listen.idle_timeout)

    @property
    def port(self) -> IListeningPort | None:
        """The listening port (None when not listening)."""
        return self._listener.port

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) listened on over TCP (known after the start, even when port 0 was asked)."""
        return self._listener.address

    @property
    def url(self) -> str:
        """``http://HOST:PORT/``, or ``unix:PATH`` on a UNIX socket."""
        return self._listener.url

    def privilegedStartService(self) -> None:
        super().privilegedStartService()
        self._listen()

    def _listen(self) -> None:
        self._listener.open(self.site)

    def startService(self) -> None:
        self._listen()
        super().startService()
        self._cooperator.start()
        self.history.start()
        self.lag.start()
        url = self.url
        root = url if url.startswith("http") else "/"
        log.info("API on {url} (status page {root}, metrics {root}metrics; auth: {auth})", url=url, root=root,
                 auth=_describe(self.auth))

    def stopService(self) -> Any:
        super().stopService()
        self.history.stop()
        self.lag.stop()
        self._cooperator.stop()
        return self._listener.close()


def _describe(auth: Auth) -> str:
    kinds = [name for name, on in (("bearer token", auth.token), ("basic", auth.username)) if on]
    return " or ".join(kinds) or "none (loopback only)"
