"""https:// through an HTTP proxy: a CONNECT tunnel, then TLS with the origin inside it.

:class:`TunnelEndpoint` connects to the proxy, sends ``CONNECT host:port HTTP/1.1`` (with ``Host``, and
``Proxy-Authorization`` when the proxy URL has credentials: to the proxy only, never to the origin), and reads the
proxy's answer, bounded (at most ``MAX_ANSWER`` bytes of status line and headers, within ``timeout`` seconds of the
connection).  On a 2xx (RFC 9110 9.3.6: any 2xx opens the tunnel) the factory's protocol gets the connection; on
anything else the connection is dropped and the connect fails with :class:`TunnelError`, naming the proxy's status.
:class:`TunnelEndpoints` is the endpoint factory of an ``Agent.usingEndpointFactory`` for one proxy: TLS for the
origin (``wrapClientTLS``, the fetcher's TLS policy) over a tunnel per connection; the agent's pool keeps the
tunnels' connections per origin.  Scrapy's ``TunnelingTCP4ClientEndpoint`` is the recipe; here the handshake is
a protocol of its own that relays the connection to the factory's protocol once the tunnel is open.
The proxy is shown only redacted (:func:`spiderd.core.secrets.redact`).
"""

from __future__ import annotations

import re
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import wrapClientTLS
from twisted.internet.interfaces import (
    IDelayedCall, IProtocol, IProtocolFactory, IReactorTime, IStreamClientEndpoint,
)
from twisted.internet.protocol import Factory, Protocol, connectionDone
from twisted.python.failure import Failure
from twisted.web.client import URI
from twisted.web.error import SchemeNotSupported
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface import implementer

from spiderd.core.reactors import ITCPClock
from spiderd.fetch.connections import CachedEndpoints, _QuietEndpoint

MAX_ANSWER = 16 * 1024  # bytes of the proxy's status line and headers read, at most
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # a proxy's reason phrase goes into reasons and logs without these
_STATUS = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?: ([^\r\n]*))?\r\n")


class TunnelError(Exception):
    """The proxy did not open the tunnel: it refused (its status), closed, or answered too much or nothing."""


class TunnelTimeout(TunnelError):
    """The proxy gave no whole answer to CONNECT within the deadline."""


def connect_request(host: bytes, port: int, authorization: bytes | None) -> bytes:
    """The CONNECT request for ``host:port`` (an IPv6 address in brackets)."""
    target = (b"[" + host + b"]" if b":" in host else host) + b":%d" % port
    lines = [b"CONNECT " + target + b" HTTP/1.1", b"Host: " + target]
    if authorization is not None:
        lines.append(b"Proxy-Authorization: " + authorization)
    return b"\r\n".join(lines) + b"\r\n\r\n"


class _Handshake(Protocol):
    """Sends CONNECT, reads the answer, then hands the connection to the protocol ``factory`` builds (``ready``
    fires with it) and relays what comes to it; ``ready`` fails if the tunnel does not open."""

    def __init__(self, request: bytes, factory: IProtocolFactory, clock: IReactorTime, timeout: float,
                 where: str) -> None:
        self.ready: Deferred[IProtocol] = Deferred(self._cancel)
        self._request = request
        self._factory = factory
        self._clock = clock
        self._timeout = timeout
        self._where = where
        self._answer = b""
        self._inner: IProtocol | None = None
        self._timer: IDelayedCall | None = None

    def connectionMade(self) -> None:
        self._timer = self._clock.callLater(self._timeout, self._expired)
        self.transport.write(self._request)  # type: ignore[union-attr]  # connected: it has a transport

    def dataReceived(self, data: bytes) -> None:
        if self._inner is not None:
            self._inner.dataReceived(data)
        elif not self.ready.called:
            self._answer += data
            self._read()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._stop_timer()
        if self._inner is not None:
            self._inner.connectionLost(reason)
        elif not self.ready.called:
            self.ready.errback(TunnelError(f"proxy {self._where} closed the connection before answering CONNECT"))

    def _read(self) -> None:
        end = self._answer.find(b"\r\n\r\n")
        if (end + 4 if end >= 0 else len(self._answer)) > MAX_ANSWER:
            return self._fail(TunnelError(f"proxy {self._where} answered CONNECT with more than {MAX_ANSWER} "
                                          "bytes of headers"))
        if end < 0:
            return
        status = _STATUS.match(self._answer)
        if status is None:
            first = self._answer.split(b"\r\n", 1)[0][:80].decode("latin-1")
            return self._fail(TunnelError(f"proxy {self._where} answered CONNECT with no HTTP status: {first!r}"))
        code = int(status.group(1))
        if not 200 <= code < 300:
            phrase = _CONTROL.sub("?", (status.group(2) or b"").decode("latin-1")[:100])
            return self._fail(TunnelError(f"proxy {self._where} refused CONNECT: {code} {phrase}".rstrip()))
        self._open(self._answer[end + 4 :])

    def _open(self, rest: bytes) -> None:
        """The tunnel is open: the factory's protocol takes the connection (and any bytes past the answer)."""
        self._stop_timer()
        transport = self.transport
        assert transport is not None
        inner = self._factory.buildProtocol(transport.getPeer())
        if inner is None:
            return self._fail(TunnelError("no protocol for the tunnel"))
        self._inner = inner
        inner.makeConnection(transport)
        self.ready.callback(inner)
        if rest:
            inner.dataReceived(rest)

    def _expired(self) -> None:
        self._timer = None
        self._fail(TunnelTimeout(f"no answer from proxy {self._where} to CONNECT within {self._timeout:g} s"))

    def _fail(self, reason: TunnelError) -> None:
        self._stop_timer()
        if not self.ready.called:
            self.ready.errback(reason)
        if self.transport is not None:
            self.transport.abortConnection()  # type: ignore[attr-defined]  # a TCP transport (ITCPTransport)

    def _cancel(self, ready: Deferred[IProtocol]) -> None:
        """The fetch was cancelled (its timeout) during the handshake: drop the connection."""
        self._stop_timer()
        if self.transport is not None:
            self.transport.abortConnection()  # type: ignore[attr-defined]

    def _stop_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None


class _HandshakeFactory(Factory):
    """Builds the one handshake protocol of a connection to the proxy."""

    noisy = False

    def __init__(self, handshake: _Handshake) -> None:
        self._handshake = handshake

    def buildProtocol(self, addr: Any) -> _Handshake:
        return self._handshake


@implementer(IStreamClientEndpoint)
class TunnelEndpoint:
    """Connections to ``host:port`` through the proxy at ``proxy`` (an endpoint), by CONNECT."""

    def __init__(self, proxy: IStreamClientEndpoint, clock: IReactorTime, host: bytes, port: int,
                 authorization: bytes | None, timeout: float, where: str) -> None:
        """``timeout``: seconds the proxy has to answer CONNECT once connected; ``where``: the proxy as shown
        (redacted)."""
        self._proxy = proxy
        self._clock = clock
        self._request = connect_request(host, port, authorization)
        self._timeout = timeout
        self._where = where

    def connect(self, protocolFactory: IProtocolFactory) -> Deferred[IProtocol]:
        """Fires with ``protocolFactory``'s protocol once the tunnel is open; cancelling drops the connection."""
        handshake = _Handshake(self._request, protocolFactory, self._clock, self._timeout, self._where)
        connecting = self._proxy.connect(_HandshakeFactory(handshake))
        return connecting.addCallback(lambda _: handshake.ready)

    def __repr__(self) -> str:
        return f"<TunnelEndpoint {self._request.split(b' ', 2)[1].decode('ascii')} via {self._where}>"


class TunnelEndpoints(CachedEndpoints):
    """The endpoints of an Agent sending https:// through one proxy: TLS for the origin in a CONNECT tunnel."""

    def __init__(self, proxy: IStreamClientEndpoint, reactor: ITCPClock, authorization: bytes | None,
                 connect_timeout: float, where: str, tls: IPolicyForHTTPS) -> None:
        super().__init__(reactor, connect_timeout, None, tls=tls)
        self._proxy = proxy
        self._clock: IReactorTime = reactor
        self._authorization = authorization
        self._where = where

    def _make(self, uri: URI) -> IStreamClientEndpoint:
        if uri.scheme != b"https":  # http:// goes through the ProxyAgent (absolute URIs), never a tunnel
            raise SchemeNotSupported(f"unsupported scheme {uri.scheme!r} for a CONNECT tunnel")
        tunnel = TunnelEndpoint(self._proxy, self._clock, uri.host, uri.port, self._authorization, self._timeout,
                                self._where)
        return _QuietEndpoint(wrapClientTLS(self._tls.creatorForNetloc(uri.host, uri.port), tunnel))
