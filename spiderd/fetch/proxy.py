"""A site's HTTP proxy (``[[sites]] proxy = "http://[user:pass@]host:port"``): Twisted's ``ProxyAgent``.

``http://`` URLs of the site are sent to the proxy as absolute URIs, over connections to the proxy pooled
as the fetcher's own (:mod:`spiderd.fetch.connections`); the proxy's credentials go in a
``Proxy-Authorization: Basic`` header to the proxy only.  ``https://`` URLs of a proxied site are never fetched
directly (that would bypass the proxy): they fail with :class:`ProxyUnsupported` (a CONNECT tunnel is not
built yet).  The proxy URL is shown only through :func:`spiderd.core.secrets.redact`.
"""

from __future__ import annotations

from typing import Any

from twisted.web import client

from spiderd.core.proxyurl import ProxyURL
from spiderd.fetch.connections import CachedEndpoints, ConnectionPool, _QuietEndpoint


class ProxyUnsupported(Exception):
    """A URL the site's proxy cannot carry (``https://``: no CONNECT tunnel yet)."""


class Proxies:
    """One ProxyAgent per proxy URL, made at its first use, each over its own pool of connections to the proxy."""

    def __init__(self, reactor: Any, connecting: Any, config: Any, pools: list[ConnectionPool]) -> None:
        """``config``: the fetcher's FetchConfig (timeouts, connections per host, the first source address);
        ``pools``: the list the agents' pools are added to (the fetcher closes them)."""
        self._reactor = reactor
        bind = (config.source_addresses[0], 0) if config.source_addresses else None
        self._endpoints = CachedEndpoints(connecting, config.connect_timeout, bind)
        self._per_host = config.per_host_connections
        self._keepalive = config.keepalive_timeout
        self._agents: dict[str, tuple[client.ProxyAgent, ProxyURL]] = {}
        self.pools = pools

    def agent(self, proxy: str) -> tuple[client.ProxyAgent, ProxyURL]:
        """The agent sending through ``proxy``, and the parsed proxy URL."""
        made = self._agents.get(proxy)
        if made is None:
            parsed = ProxyURL.parse(proxy)
            pool = ConnectionPool(self._reactor, self._per_host, self._keepalive)
            self.pools.append(pool)
            endpoint = _QuietEndpoint(self._endpoints._tcp(parsed.host, parsed.port))
            made = self._agents[proxy] = (client.ProxyAgent(endpoint, self._reactor, pool=pool), parsed)
        return made
