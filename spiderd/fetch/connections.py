"""Connections for the fetcher: endpoints per origin, and a pool that copes with servers as they are.

Servers close connections: HTTP/1.0 ones after each answer, every server when
its keep-alive timeout expires.  An answer that forbids reuse keeps its
connection out of the pool, idle connections close after
``keepalive_timeout``, and a GET sent on a pooled connection the server has
already closed is sent once more at once on a new one (Twisted's automatic
retry), so a closed connection is never a failed fetch.  A connection whose
answer had bytes past its end, or was framed oddly, is closed too, never reused
(:mod:`spiderd.fetch.framing`, whose protocol the pool builds).  Public Twisted
APIs: ``HTTPConnectionPool.getConnection``, ``Request.persistent``,
``HTTP11ClientProtocol.state`` and ``abort()``; and private ones:
``HTTPConnectionPool._factory`` (the framing protocol), and ``_connections``:
Twisted's pool keeps an empty list for every host it ever pooled a connection of,
so :class:`ConnectionPool` drops a host's list once it is empty (``getConnection``
took its last connection, or ``_removeConnection`` closed it), or a crawl of a
million hosts would keep a million lists.  And it keeps every idle connection
until its timeout: a crawl of many hosts, each met again only after the
timeout, would hold ``keepalive_timeout`` x its connections a second open and
idle, so :class:`ConnectionPool` also caps the idle connections of all hosts
together (``max_idle``): past it, the one idle longest is closed (an
OrderedDict in the order they became idle, O(1) a connection: a connection
leaves it as Twisted deletes its timeout from the private ``_timeouts``,
whichever way it leaves the pool).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, Hashable

from twisted.internet.defer import Deferred
from twisted.internet.abstract import isIPAddress, isIPv6Address
from twisted.internet.endpoints import HostnameEndpoint, TCP4ClientEndpoint, TCP6ClientEndpoint, wrapClientTLS
from twisted.internet.interfaces import (
    IAddress, IProtocol, IProtocolFactory, IReactorTCP, IReactorTime, IStreamClientEndpoint,
)
from twisted.internet.protocol import Factory
from twisted.web import client
from twisted.web.client import URI
from twisted.web.error import SchemeNotSupported
from twisted.web.iweb import IPolicyForHTTPS, IResponse
from zope.interface import implementer

from spiderd.core.urls import DEFAULT_PORTS
from spiderd.fetch import framing


class CachedEndpoints:
    """Endpoints per (scheme, host, port), made once: Agent builds one per request, IDNA-checking the host each time."""

    def __init__(self, reactor: IReactorTCP, connect_timeout: float, bind: tuple[str, int] | None,
                 size: int = 4096, tls: IPolicyForHTTPS | None = None) -> None:
        """``tls``: the policy of https:// connections (Twisted's browser-like one, the system's trust roots)."""
        self._reactor = reactor
        self._timeout = connect_timeout
        self._bind = bind
        self._size = size
        self._tls = tls or client.BrowserLikePolicyForHTTPS()
        self._cache: dict[tuple[bytes, bytes, int], IStreamClientEndpoint] = {}

    def endpointForURI(self, uri: URI) -> IStreamClientEndpoint:
        key = (uri.scheme, uri.host, uri.port)
        endpoint = self._cache.get(key)
        if endpoint is None:
            endpoint = self._make(uri)
            if len(self._cache) >= self._size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = endpoint
        return endpoint

    def schemes(self, host: str, port: int) -> list[str]:
        """The schemes of the endpoints made for ``host:port`` (and still kept): whose URLs a lookup served."""
        name = host.encode("ascii", "replace")
        return [scheme for scheme in ("http", "https") if (scheme.encode(), name, port) in self._cache]

    def _make(self, uri: URI) -> IStreamClientEndpoint:
        host = uri.host.decode("ascii")
        endpoint = self.tcp(host, uri.port)
        if uri.scheme == b"https":
            return _QuietEndpoint(wrapClientTLS(self._tls.creatorForNetloc(uri.host, uri.port), endpoint))
        if uri.scheme != b"http":
            raise SchemeNotSupported(f"unsupported scheme {uri.scheme!r}")
        return _QuietEndpoint(endpoint)

    def tcp(self, host: str, port: int) -> IStreamClientEndpoint:
        """A plain TCP endpoint for an IP address (one connection attempt, nothing to resolve: a third of the
        cost of a ``HostnameEndpoint``'s connect, which builds a resolution receiver class and a timer for
        every connection, what a server that closes after each answer makes the fetcher pay per page); a
        ``HostnameEndpoint`` (resolution, then attempts at each address) for a name."""
        if isIPAddress(host):
            return TCP4ClientEndpoint(self._reactor, host, port, timeout=self._timeout, bindAddress=self._bind)
        if isIPv6Address(host):
            return TCP6ClientEndpoint(self._reactor, host, port, timeout=self._timeout, bindAddress=self._bind)
        return HostnameEndpoint(self._reactor, host, port, timeout=self._timeout, bindAddress=self._bind)


def pool_hosts(name: str, port: int, schemes: Iterable[str]) -> list[str]:
    """The pool's host keys of ``name:port`` reached by ``schemes`` ("x" for http://x:80 and https://x:443,
    "x:443" for http://x:443); with no scheme known (a lookup not made for a URL's endpoint), by the port alone."""
    hosts = sorted({name if DEFAULT_PORTS.get(scheme) == port else f"{name}:{port}" for scheme in schemes})
    return hosts or [name if port in DEFAULT_PORTS.values() else f"{name}:{port}"]


@implementer(IStreamClientEndpoint)
class _QuietEndpoint:
    """An endpoint whose connections log no "Starting factory" line: the pool's factory is wrapped in a quiet one."""

    def __init__(self, endpoint: IStreamClientEndpoint) -> None:
        self._endpoint = endpoint

    def connect(self, factory: IProtocolFactory) -> Deferred[IProtocol]:
        return self._endpoint.connect(_QuietFactory(factory))

    def __repr__(self) -> str:
        return repr(self._endpoint)


class _QuietFactory(Factory):
    """Builds the wrapped factory's protocols; neither it nor the wrapped factory logs its start and stop."""

    noisy = False

    def __init__(self, factory: IProtocolFactory) -> None:
        self._factory = factory

    def buildProtocol(self, addr: IAddress) -> IProtocol | None:  # type: ignore[override]  # the wrapped factory's
        return self._factory.buildProtocol(addr)


class ConnectionPool(client.HTTPConnectionPool):
    """Twisted's pool: at most ``per_host`` idle connections per host and ``max_idle`` in all (0: no cap; past
    it the one idle longest is closed), each closed after ``keepalive_timeout`` seconds idle, and only
    connections the answer lets be reused.

    ``retryAutomatically``: a GET that got no answer on a connection taken from
    the pool is sent once more on a new connection; one that fails on a new
    connection is not retried.  ``Connection: close`` answers Twisted keeps out
    of the pool itself; ``_Connection`` does it for HTTP/1.0 answers, and
    :class:`spiderd.fetch.framing.Protocol` for answers out of step or framed oddly.
    """

    retryAutomatically = True
    _factory = framing.Factory  # its connections' protocol: framing faults named, none pooled out of step

    def __init__(self, reactor: IReactorTime, per_host: int, keepalive_timeout: float, max_idle: int = 0) -> None:
        super().__init__(reactor, persistent=True)
        self.maxPersistentPerHost = per_host
        self.cachedConnectionTimeout = keepalive_timeout  # type: ignore[assignment]  # inferred int; seconds
        self.max_idle = max_idle
        self._idle: OrderedDict[Any, Hashable] = OrderedDict()  # idle connection -> its key, idle longest first
        self._timeouts = _Timeouts(self._idle)

    def idle(self) -> int:
        """Connections idle in the pool, of all hosts."""
        return len(self._idle)

    def getConnection(  # type: ignore[override]  # _Connection stands in for the protocol (request is all Agent calls)
        self, key: Hashable, endpoint: IStreamClientEndpoint
    ) -> Deferred[_Connection]:
        d = super().getConnection(key, endpoint).addCallback(_Connection)
        self._forget_if_empty(key)
        return d

    def _putConnection(self, key: Hashable, connection: Any) -> None:
        """Twisted's (an answered connection back in the pool, its host's idle longest closed past ``per_host``),
        then the one idle longest of all hosts closed past ``max_idle``."""
        super()._putConnection(key, connection)
        if connection in self._timeouts:
            self._idle[connection] = key
        while self.max_idle and len(self._idle) > self.max_idle:
            oldest, its_key = self._idle.popitem(last=False)
            self._timeouts[oldest].cancel()
            self._removeConnection(its_key, oldest)

    def _removeConnection(self, key: Hashable, connection: Any) -> None:
        """Twisted's (an idle connection timed out, or the cap closed it), then the host's list goes if that was
        its last."""
        super()._removeConnection(key, connection)
        self._forget_if_empty(key)

    def closeCachedConnections(self) -> Deferred[None]:
        self._idle.clear()
        closed: Deferred[None] = super().closeCachedConnections()
        self._timeouts = _Timeouts(self._idle)  # (Twisted's is a new dict)
        return closed

    def _forget_if_empty(self, key: Hashable) -> None:
        if not self._connections.get(key, True):
            del self._connections[key]


class _Timeouts(dict[Any, Any]):
    """Twisted's timeouts of the idle connections (connection -> its DelayedCall); a connection whose timeout
    Twisted deletes (taken by ``getConnection``, dropped past ``per_host``, timed out or closed by the cap) leaves
    ``idle`` too."""

    def __init__(self, idle: OrderedDict[Any, Hashable]) -> None:
        super().__init__()
        self._idle = idle

    def __delitem__(self, connection: Any) -> None:
        super().__delitem__(connection)
        self._idle.pop(connection, None)


class _Connection:
    """A connection from the pool, for one request: an answer that forbids reuse keeps it out of the pool."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection  # an HTTP11ClientProtocol, or Twisted's retrying wrapper of a pooled one

    def request(self, request: client.Request) -> Deferred[IResponse]:
        d: Deferred[IResponse] = self._connection.request(request)
        return d.addCallback(self._answered, request)

    def _answered(self, response: IResponse, request: client.Request) -> IResponse:
        if not reusable(response):
            request.persistent = False  # read when the body has come: the connection is then closed, not pooled
            connection = self._connection
            if isinstance(connection, client.HTTP11ClientProtocol) and connection.state == "QUIESCENT":
                # No body: the answer was over, and the connection pooled, before it came here.  abort() takes
                # it out of use at once (the pool drops a connection that is not QUIESCENT).
                connection.abort()
        return response


def reusable(response: IResponse) -> bool:
    """Whether the connection of ``response`` may carry another request (``Connection: close`` aside).

    HTTP/1.0 closes after each answer unless it says ``Connection: keep-alive``;
    Twisted keeps that header from the response, so every HTTP/1.0 answer
    counts as closing.
    """
    return tuple(response.version[1:]) >= (1, 1)
