"""The fetcher's name cache: one lookup per name per TTL, shared by lookups in flight, failures not kept."""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import IHostnameResolver
from twisted.internet.task import Clock
from twisted.trial import unittest
from zope.interface import implementer

from spiderd.demo.pages import SiteSpec
from spiderd.demo.static import static_paths, write_static
from spiderd.fetch.dns import CachingResolver, caching_reactor
from spiderd.fetch.fetcher import FetchConfig, Fetcher

from .httpservers import HTTP10Handler, ThreadedServer
from .test_servers import fetch_all


@implementer(IHostnameResolver)
class FakeResolver:
    """Answers by hand: each lookup waits in ``asked`` until the test answers it."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, Any]] = []

    def resolveHostName(self, receiver: Any, hostName: str, portNumber: int = 0, addressTypes: Any = None,
                        transportSemantics: str = "TCP") -> Any:
        receiver.resolutionBegan(None)
        self.asked.append((hostName, receiver))

    def answer(self, *addresses: str, port: int = 80) -> None:
        _, receiver = self.asked.pop(0)
        for address in addresses:
            receiver.addressResolved(IPv4Address("TCP", address, port))
        receiver.resolutionComplete()


class Receiver:
    def __init__(self) -> None:
        self.addresses: list[str] = []
        self.complete = 0

    def resolutionBegan(self, resolution: Any) -> None:
        pass

    def addressResolved(self, address: Any) -> None:
        self.addresses.append(address.host)

    def resolutionComplete(self) -> None:
        self.complete += 1


class CachingResolverTests(unittest.TestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.inner = FakeResolver()
        self.cache = CachingResolver(self.inner, self.clock, ttl=300)

    def resolve(self, name: str = "shop.example", port: int = 80) -> Receiver:
        receiver = Receiver()
        self.cache.resolveHostName(receiver, name, port)
        return receiver

    def test_a_name_is_looked_up_once_per_ttl(self) -> None:
        first = self.resolve()
        self.inner.answer("192.0.2.1", "192.0.2.2")
        second = self.resolve()
        self.assertEqual((first.addresses, first.complete), (["192.0.2.1", "192.0.2.2"], 1))
        self.assertEqual((second.addresses, second.complete), (["192.0.2.1", "192.0.2.2"], 1))
        self.assertEqual((self.cache.lookups, self.inner.asked), (1, []))
        self.clock.advance(301)
        third = self.resolve()
        self.assertEqual((self.cache.lookups, third.complete), (2, 0))  # expired: asked again, waiting
        self.inner.answer("192.0.2.3")
        self.assertEqual(third.addresses, ["192.0.2.3"])

    def test_lookups_in_flight_share_one(self) -> None:
        waiting = [self.resolve() for _ in range(16)]
        self.assertEqual(len(self.inner.asked), 1)
        self.inner.answer("192.0.2.1")
        self.assertEqual({(tuple(r.addresses), r.complete) for r in waiting}, {(("192.0.2.1",), 1)})

    def test_ports_and_names_are_kept_apart(self) -> None:
        self.resolve("a.example")
        self.resolve("b.example")
        self.resolve("a.example", 8080)
        self.assertEqual([name for name, _ in self.inner.asked], ["a.example", "b.example", "a.example"])

    def test_a_failed_lookup_is_not_kept(self) -> None:
        failed = self.resolve()
        self.inner.answer()  # no address: Twisted's endpoint makes it a DNSLookupError
        self.assertEqual((failed.addresses, failed.complete), ([], 1))
        self.resolve()
        self.assertEqual((self.cache.lookups, len(self.inner.asked)), (2, 1))

    def test_the_cache_is_bounded(self) -> None:
        cache = CachingResolver(self.inner, self.clock, ttl=300, size=2)
        for name in ("a", "b", "c"):
            cache.resolveHostName(Receiver(), name, 80)
            self.inner.answer("192.0.2.1")
        cache.resolveHostName(Receiver(), "a", 80)  # the oldest went
        self.assertEqual((cache.lookups, len(self.inner.asked)), (4, 1))

    def test_ttl_zero_keeps_the_reactor(self) -> None:
        self.assertIs(caching_reactor(reactor, 0), reactor)

    def test_each_lookup_tells_its_first_address(self) -> None:
        """``on_resolved`` hears (name, port, first address) once per lookup, not per cached answer; with ttl 0
        too (a resolver is then made all the same); a listener that fails is logged, not raised."""
        told: list[tuple[str, int, str]] = []
        cache = CachingResolver(self.inner, self.clock, ttl=300, on_resolved=lambda *a: told.append(a))
        cache.resolveHostName(Receiver(), "shop.example", 8080)
        self.inner.answer("192.0.2.7", "192.0.2.8")
        cache.resolveHostName(Receiver(), "shop.example", 8080)
        self.assertEqual(told, [("shop.example", 8080, "192.0.2.7")])
        uncached = caching_reactor(reactor, 0, lambda *a: 1 / 0)
        self.assertIsNot(uncached, reactor)
        self.assertEqual(uncached.nameResolver.ttl, 0)
        failing = CachingResolver(self.inner, self.clock, ttl=0, on_resolved=lambda *a: 1 / 0)
        failing.resolveHostName(Receiver(), "shop.example", 80)
        self.inner.answer("192.0.2.7")
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)


class FetcherLookupsTests(unittest.TestCase):
    """Against a server that closes every connection, a crawl of one host looks its name up once."""

    timeout = 60

    def setUp(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="spiderd-dns-"))
        self.addCleanup(shutil.rmtree, self.directory, True)
        self.spec = SiteSpec(lists=2, details=60, faults=False, seed=5)
        write_static(self.spec, self.directory)
        self.served = ThreadedServer(self.directory, HTTP10Handler)
        self.addCleanup(self.served.stop)

    @defer.inlineCallbacks
    def test_one_lookup_for_many_connections(self) -> Any:
        fetcher = Fetcher(reactor, FetchConfig(timeout=20, connect_timeout=5, per_host_connections=8))
        self.addCleanup(fetcher.close)
        urls = [self.served.root.replace("127.0.0.1", "localhost") + p for p in static_paths(self.spec)]
        results = yield fetch_all(fetcher, urls, concurrency=8)
        self.assertEqual(Counter(r.status for r in results), {200: len(urls)})
        self.assertEqual(self.served.connections, len(urls))
        self.assertEqual(fetcher.resolver.lookups, 1)
