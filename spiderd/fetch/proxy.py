"""A site's HTTP proxy (``[[sites]] proxy = "http://[user:pass@]host:port"``): ``http://`` and ``https://`` URLs.

``http://`` URLs of the site are sent to the proxy as absolute URIs by Twisted's ``ProxyAgent``, with the proxy's
credentials in a ``Proxy-Authorization: Basic`` header; ``https://`` URLs go through a CONNECT tunnel
(:mod:`spiderd.fetch.tunnel`), the credentials in the CONNECT request only, TLS with the origin inside.  The
agents of a proxy share one pool of connections, as the fetcher's own (:mod:`spiderd.fetch.connections`), keyed
per origin: tunnels by their origin, plain requests by an agent per origin (``ProxyAgent`` keys its connections by
its endpoint), so a connection to the proxy carries one origin's requests only, and bytes an origin sends past
an answer (relayed by a proxy that does not frame answers itself) reach no other site's request
(:mod:`spiderd.fetch.framing`).  A proxied site's URLs never go around its proxy: another
scheme fails with :class:`ProxyUnsupported`.  The proxy URL is shown only through
:func:`spiderd.core.secrets.redact`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from twisted.internet.interfaces import IReactorTCP, IStreamClientEndpoint
from twisted.web import client
from twisted.web.iweb import IAgent, IPolicyForHTTPS

from spiderd.core.proxyurl import ProxyURL
from spiderd.core.reactors import ITCPClock
from spiderd.core.secrets import redact
from spiderd.fetch.connections import CachedEndpoints, ConnectionPool, _QuietEndpoint
from spiderd.fetch.tunnel import TunnelEndpoints

if TYPE_CHECKING:  # (fetcher.py imports this module)
    from spiderd.fetch.fetcher import FetchConfig

MAX_ORIGINS = 4096  # origins per proxy whose plain agents are kept (the oldest made is dropped past it)


class ProxyUnsupported(Exception):
    """A URL the site's proxy cannot carry (a scheme other than http:// and https://)."""


@dataclass(frozen=True)
class _Proxy:
    """The agents of one proxy: CONNECT tunnels (https://), and absolute URIs (http://) by an agent per origin."""

    tunnel: IAgent
    url: ProxyURL
    endpoint: IStreamClientEndpoint  # the proxy's
    pool: ConnectionPool
    plain: dict[str, IAgent] = field(default_factory=dict)  # per origin ("http://host:port")


class Proxies:
    """Agents per proxy URL, made at its first use, each proxy's over its own pool of connections."""

    def __init__(self, reactor: ITCPClock, connecting: IReactorTCP, config: FetchConfig, pools: list[ConnectionPool],
                 tls: IPolicyForHTTPS | None = None) -> None:
        """``config``: the fetcher's FetchConfig (timeouts, connections per host, the first source address);
        ``pools``: the list the agents' pools are added to (the fetcher closes them); ``tls``: the fetcher's
        TLS policy (for the origins behind the tunnels)."""
        self._reactor = reactor
        bind = (config.source_addresses[0], 0) if config.source_addresses else None
        self._endpoints = CachedEndpoints(connecting, config.connect_timeout, bind)
        self._connect_timeout = config.connect_timeout
        self._per_host = config.per_host_connections
        self._keepalive = config.keepalive_timeout
        self._max_idle = config.max_idle_connections
        self._tls = tls or client.BrowserLikePolicyForHTTPS()
        self._proxies: dict[str, _Proxy] = {}
        self.pools = pools

    def agent(self, proxy: str, url: str) -> tuple[IAgent, ProxyURL]:
        """The agent sending ``url`` through ``proxy`` (by its scheme), and the parsed proxy URL."""
        made = self._proxies.get(proxy) or self._make(proxy)
        if url.startswith("http://"):
            return self._plain(made, url), made.url
        if url.startswith("https://"):
            return made.tunnel, made.url
        raise ProxyUnsupported(f"{url.partition(':')[0]!r} URLs do not go through an HTTP proxy")

    def _make(self, proxy: str) -> _Proxy:
        parsed = ProxyURL.parse(proxy)
        pool = ConnectionPool(self._reactor, self._per_host, self._keepalive, self._max_idle)
        self.pools.append(pool)
        endpoint = self._endpoints.tcp(parsed.host, parsed.port)
        tunnels = TunnelEndpoints(endpoint, self._reactor, parsed.authorization, self._connect_timeout,
                                  redact(proxy), self._tls)
        tunnel: IAgent = client.Agent.usingEndpointFactory(self._reactor, tunnels, pool=pool)
        made = self._proxies[proxy] = _Proxy(tunnel, parsed, endpoint, pool)
        return made

    def _plain(self, made: _Proxy, url: str) -> IAgent:
        """The agent of ``url``'s origin through ``made``: an endpoint object of its own, so its own pool key."""
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2].lower()}"
        agent = made.plain.get(origin)
        if agent is None:
            if len(made.plain) >= MAX_ORIGINS:
                made.plain.pop(next(iter(made.plain)))
            agent = made.plain[origin] = client.ProxyAgent(_QuietEndpoint(made.endpoint), self._reactor,
                                                           pool=made.pool)
        return agent
