"""A site's HTTP proxy (``[[sites]] proxy = "http://[user:pass@]host:port"``): ``http://`` and ``https://`` URLs.

``http://`` URLs of the site are sent to the proxy as absolute URIs by Twisted's ``ProxyAgent``, with the proxy's
credentials in a ``Proxy-Authorization: Basic`` header; ``https://`` URLs go through a CONNECT tunnel
(:mod:`spiderd.fetch.tunnel`), the credentials in the CONNECT request only, TLS with the origin inside.  Both
agents of a proxy share one pool of connections, as the fetcher's own (:mod:`spiderd.fetch.connections`), keyed
per proxy (plain requests) and per origin (tunnels).  A proxied site's URLs never go around its proxy: another
scheme fails with :class:`ProxyUnsupported`.  The proxy URL is shown only through
:func:`spiderd.core.secrets.redact`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from twisted.internet.interfaces import IReactorTCP
from twisted.web import client
from twisted.web.iweb import IAgent, IPolicyForHTTPS

from spiderd.core.proxyurl import ProxyURL
from spiderd.core.reactors import ITCPClock
from spiderd.core.secrets import redact
from spiderd.fetch.connections import CachedEndpoints, ConnectionPool, _QuietEndpoint
from spiderd.fetch.tunnel import TunnelEndpoints

if TYPE_CHECKING:  # (fetcher.py imports this module)
    from spiderd.fetch.fetcher import FetchConfig


class ProxyUnsupported(Exception):
    """A URL the site's proxy cannot carry (a scheme other than http:// and https://)."""


@dataclass(frozen=True)
class _Proxy:
    """The agents of one proxy: absolute URIs (http://) and CONNECT tunnels (https://)."""

    plain: IAgent
    tunnel: IAgent
    url: ProxyURL


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
        self._tls = tls or client.BrowserLikePolicyForHTTPS()
        self._proxies: dict[str, _Proxy] = {}
        self.pools = pools

    def agent(self, proxy: str, url: str) -> tuple[IAgent, ProxyURL]:
        """The agent sending ``url`` through ``proxy`` (by its scheme), and the parsed proxy URL."""
        made = self._proxies.get(proxy) or self._make(proxy)
        if url.startswith("http://"):
            return made.plain, made.url
        if url.startswith("https://"):
            return made.tunnel, made.url
        raise ProxyUnsupported(f"{url.partition(':')[0]!r} URLs do not go through an HTTP proxy")

    def _make(self, proxy: str) -> _Proxy:
        parsed = ProxyURL.parse(proxy)
        pool = ConnectionPool(self._reactor, self._per_host, self._keepalive)
        self.pools.append(pool)
        endpoint = self._endpoints.tcp(parsed.host, parsed.port)
        plain = client.ProxyAgent(_QuietEndpoint(endpoint), self._reactor, pool=pool)
        tunnels = TunnelEndpoints(endpoint, self._reactor, parsed.authorization, self._connect_timeout,
                                  redact(proxy), self._tls)
        tunnel: IAgent = client.Agent.usingEndpointFactory(self._reactor, tunnels, pool=pool)
        made = self._proxies[proxy] = _Proxy(plain, tunnel, parsed)
        return made
