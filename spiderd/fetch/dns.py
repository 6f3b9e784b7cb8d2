"""Name resolution for the fetcher: answers kept for ``ttl`` seconds, and one lookup per name at a time.

Twisted's ``HostnameEndpoint`` asks the reactor's resolver for every new
connection, and the default resolver runs ``getaddrinfo`` in the reactor's
thread pool: a thread hop (and a lookup) per connection.  Against a server
that closes every connection (HTTP/1.0, ``Connection: close``) that is one per
page, about a fifth of the reactor's time in a profile of such a crawl.  As
Scrapy's DNS cache does, a name is looked up once and its addresses reused,
here for ``ttl`` seconds (``getaddrinfo`` gives no record TTL); lookups of a
name already being looked up wait for that one.  Failures and empty answers
are not kept, so a name that did not resolve is asked again at the next
connection.  Each answer's first address is told to ``on_resolved(name, port,
address)`` (per-IP politeness: the pool groups the hosts of one address), so
once per lookup: once per ``ttl``, at every connection with ``ttl`` 0.

:class:`ResolvingReactor` hands a ``HostnameEndpoint`` the caching resolver in
place of the reactor's own (the public ``IReactorPluggableNameResolver`` way),
and is the reactor in every other respect.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from twisted.internet.defer import maybeDeferred
from twisted.internet.interfaces import (
    IAddress,
    IHostnameResolver,
    IHostResolution,
    IReactorPluggableNameResolver,
    IReactorTime,
    IResolutionReceiver,
)
from twisted.logger import Logger
from zope.interface import directlyProvides, implementer, providedBy

log = Logger()

_Key = tuple[str, int, tuple[type[IAddress], ...] | None, str]
R = TypeVar("R", bound=IReactorTime)  # a reactor: its timers are the cache's clock


@implementer(IHostResolution)
class _Resolution:
    def __init__(self, name: str) -> None:
        self.name = name

    def cancel(self) -> None:  # the lookup is shared; a receiver that goes away just stops listening
        pass


@implementer(IHostnameResolver)
class CachingResolver:
    """Wraps an ``IHostnameResolver``: addresses of a name are kept ``ttl`` seconds (at most ``size`` names)."""

    def __init__(self, resolver: IHostnameResolver, clock: IReactorTime, ttl: float = 300.0, size: int = 10_000,
                 on_resolved: Callable[[str, int, str], Any] | None = None) -> None:
        self._resolver = resolver
        self._on_resolved = on_resolved
        self._clock = clock
        self.ttl = ttl
        self._size = size
        self._cache: OrderedDict[_Key, tuple[float, list[IAddress]]] = OrderedDict()
        self._waiting: dict[_Key, list[IResolutionReceiver]] = {}
        self.lookups = 0

    def resolveHostName(self, resolutionReceiver: IResolutionReceiver, hostName: str, portNumber: int = 0,
                        addressTypes: Sequence[type[IAddress]] | None = None,
                        transportSemantics: str = "TCP") -> IHostResolution:
        """Answer from the cache, or join (or start) the lookup of this name."""
        key = (hostName, portNumber, tuple(addressTypes) if addressTypes is not None else None, transportSemantics)
        resolution = _Resolution(hostName)
        resolutionReceiver.resolutionBegan(resolution)
        cached = self._cached(key)
        if cached is not None:
            _replay(resolutionReceiver, cached)
        elif key in self._waiting:
            self._waiting[key].append(resolutionReceiver)
        else:
            self._waiting[key] = [resolutionReceiver]
            self.lookups += 1
            self._resolver.resolveHostName(_Collector(self, key), hostName, portNumber, addressTypes,
                                           transportSemantics)
        return resolution

    def _cached(self, key: _Key) -> list[IAddress] | None:
        entry = self._cache.get(key)
        if entry is None:
            return None
        expires, addresses = entry
        if expires <= self._clock.seconds():
            del self._cache[key]
            return None
        return addresses

    def _done(self, key: _Key, addresses: list[IAddress]) -> None:
        if addresses and self._on_resolved is not None:
            self._tell(key[0], key[1], addresses[0])
        if addresses and self.ttl > 0:
            self._cache[key] = (self._clock.seconds() + self.ttl, addresses)
            self._cache.move_to_end(key)
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)
        for receiver in self._waiting.pop(key, []):
            _replay(receiver, addresses)


    def _tell(self, name: str, port: int, address: IAddress) -> None:
        """``on_resolved(name, port, address)``; a failure (a pool over the network) is logged, not raised."""
        host = getattr(address, "host", None)
        if isinstance(host, str) and self._on_resolved is not None:
            d = maybeDeferred(self._on_resolved, name, port, host)
            d.addErrback(lambda f: log.failure("Telling the address of {name}", f, name=name))


@implementer(IResolutionReceiver)
class _Collector:
    """Receives the wrapped resolver's answer for one name and hands it to the cache."""

    def __init__(self, cache: CachingResolver, key: _Key) -> None:
        self._cache = cache
        self._key = key
        self._addresses: list[IAddress] = []

    def resolutionBegan(self, resolutionInProgress: IHostResolution) -> None:
        pass

    def addressResolved(self, address: IAddress) -> None:
        self._addresses.append(address)

    def resolutionComplete(self) -> None:
        self._cache._done(self._key, self._addresses)


def _replay(receiver: IResolutionReceiver, addresses: list[IAddress]) -> None:
    for address in addresses:
        receiver.addressResolved(address)
    receiver.resolutionComplete()


class ResolvingReactor:
    """``reactor`` with ``nameResolver`` replaced by ``resolver`` (for ``HostnameEndpoint``)."""

    def __init__(self, reactor: object, resolver: IHostnameResolver) -> None:
        self._reactor = reactor
        self.nameResolver = resolver
        directlyProvides(self, providedBy(reactor), IReactorPluggableNameResolver)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reactor, name)


def caching_reactor(reactor: R, ttl: float, on_resolved: Callable[[str, int, str], Any] | None = None) -> R:
    """The reactor ``HostnameEndpoint`` should get: ``reactor`` itself with ``ttl`` 0 (no cache) and no
    ``on_resolved`` (see :class:`CachingResolver`).

    The other is a ``ResolvingReactor``: it provides what ``reactor`` provides, and passes for it."""
    if (ttl <= 0 and on_resolved is None) or not IReactorPluggableNameResolver.providedBy(reactor):
        return reactor
    resolving = cast(IReactorPluggableNameResolver, reactor)
    resolver = CachingResolver(resolving.nameResolver, reactor, max(ttl, 0.0), on_resolved=on_resolved)
    return cast(R, ResolvingReactor(reactor, resolver))
