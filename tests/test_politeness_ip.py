"""Per-IP politeness end to end: two host names on one loopback address, crawled with a delay per host.

The fetcher's resolver maps ``a.test`` and ``b.test`` to 127.0.0.2 (no /etc/hosts); the fetch tells the pool each
host's address (``set_host_group``); time is a Clock advanced by the test, the I/O real.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer, reactor, task
from twisted.internet.address import IPv4Address
from twisted.internet.interfaces import IHostnameResolver, IHostResolution
from twisted.internet.task import Clock
from twisted.trial import unittest
from twisted.web import resource, server
from zope.interface import implementer

from spiderd.engine.steps import PageSteps
from spiderd.core.stats import CrawlStats
from spiderd.demo.config import DEMO
from spiderd.fetch.dns import CachingResolver
from spiderd.fetch.fetcher import FetchConfig, Fetcher
from spiderd.fetch.parsepool import ParsePool
from spiderd.frontier.crawler import CrawlService
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool import open_memory_pool

from .helpers import ClockedReactor, rules_of
from .test_pool_contract import RedisKeys
from .test_throttle import START, Base

HOSTS = {"a.test": "127.0.0.2", "b.test": "127.0.0.2"}


@implementer(IHostResolution)
class _Resolution:
    def __init__(self, name: str) -> None:
        self.name = name

    def cancel(self) -> None:
        pass


@implementer(IHostnameResolver)
class MapResolver:
    """Answers the names of ``HOSTS`` at once, each with its one address."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def resolveHostName(self, resolutionReceiver: Any, hostName: str, portNumber: int = 0,
                        addressTypes: Any = None, transportSemantics: str = "TCP") -> IHostResolution:
        self.asked.append(hostName)
        resolution = _Resolution(hostName)
        resolutionReceiver.resolutionBegan(resolution)
        if hostName in HOSTS:
            resolutionReceiver.addressResolved(IPv4Address("TCP", HOSTS[hostName], portNumber))
        resolutionReceiver.resolutionComplete()
        return resolution


class MappedReactor(ClockedReactor):
    """The real reactor for I/O, a Clock for time, and MapResolver for names."""

    def __init__(self, reactor: Any, clock: Any) -> None:
        super().__init__(reactor, clock)
        self.nameResolver = MapResolver()


class Log(resource.Resource):
    """Answers every GET with a small page; records each request's host and (clock) time."""

    isLeaf = True

    def __init__(self, clock: Any) -> None:
        super().__init__()
        self.clock = clock
        self.log: list[tuple[str, float]] = []

    def render_GET(self, request: Any) -> bytes:
        host = (request.getHeader(b"host") or b"").decode().rpartition(":")[0]
        self.log.append((host, self.clock.seconds() - START))
        request.setHeader(b"content-type", b"text/html")
        return b"<html><body>ok</body></html>"


def listen_shared(case: unittest.TestCase, clock: Any) -> tuple[Log, Any]:
    """A :class:`Log` site listening on 127.0.0.2 (the address of ``HOSTS``) until ``case`` ends; (site, port)."""
    site = Log(clock)
    factory = server.Site(site)
    factory.noisy = False
    port = reactor.listenTCP(0, factory, interface="127.0.0.2")
    case.addCleanup(port.stopListening)
    return site, port


class PerIPTests(Base):
    """``[fetch] politeness = "ip"`` against ``"host"``: two hosts on one address, per_host_delay 2 s."""

    @defer.inlineCallbacks
    def crawl(self, per_ip: bool) -> Any:
        """Three pages of each host; the (host, clock second) of each request, once all are done."""
        self.clock = Clock()
        self.clock.advance(START)
        site, port = listen_shared(self, self.clock)
        pool = yield self.open_pool(per_ip)
        clocked = MappedReactor(reactor, self.clock)
        fetcher = Fetcher(clocked, FetchConfig(timeout=10), on_address=pool.set_host_group if per_ip else None)
        self.addCleanup(fetcher.close)
        parser = ParsePool(reactor, rules_of({"sites": DEMO["sites"]}), 0)
        parser.startService()
        self.addCleanup(parser.stopService)
        crawler = CrawlService(clocked, pool, fetcher, PageSteps(clocked, parser), parser.rules, CrawlStats(self.clock),
                               concurrency=4)
        port_number = port.getHost().port
        yield pool.addmany([f"http://{host}:{port_number}/{i}" for i in range(3) for host in HOSTS])
        crawler.startService()
        self.addCleanup(crawler.stopService)
        for _ in range(20):
            yield self.settle(lambda: crawler.processing == 0 and crawler.fetching == 0 and not crawler._popping)
            if (yield self.pool_done(pool)) == 6:
                break
            yield self.advance(1.0, step=1.0)
        for _ in range(200):  # the last statuses on their way (no clock time passes)
            if (yield self.pool_done(pool)) == 6:
                break
            yield self.settle(lambda: True)
            yield task.deferLater(reactor, 0.01, lambda: None)
        self.assertEqual((yield self.pool_done(pool)), 6)
        self.assertIsInstance(fetcher.resolver, CachingResolver)
        return sorted(site.log, key=lambda entry: entry[1])

    def open_pool(self, per_ip: bool) -> defer.Deferred[Any]:
        """The pool crawled from: 2 s between two requests of one slot, 4 at once."""
        return defer.succeed(open_memory_pool(self.clock, politeness=Politeness(delay=2.0, concurrency=4)))

    def pool_done(self, pool: Any) -> defer.Deferred[int]:
        return pool.stats().addCallback(lambda stats: int(stats["done"]))

    @defer.inlineCallbacks
    def test_hosts_on_one_address_share_one_turn(self) -> Any:
        """With "ip", once the fetch has told the pool both hosts' address, their pages come one per 2 s between
        them (the first of each went before either address was known), taking turns."""
        log = yield self.crawl(per_ip=True)
        self.assertEqual([at for _, at in log], [0.0, 0.0, 2.0, 4.0, 6.0, 8.0])
        self.assertEqual(sorted(host for host, _ in log[2:4]), ["a.test", "b.test"])

    @defer.inlineCallbacks
    def test_by_host_each_host_has_its_own_turn(self) -> Any:
        """With "host" (the default), each host gives one page per 2 s, both at once."""
        log = yield self.crawl(per_ip=False)
        self.assertEqual([at for _, at in log], [0.0, 0.0, 2.0, 2.0, 4.0, 4.0])


class RedisPerIPTests(RedisKeys, PerIPTests):
    """The same crawls on the Redis pool (``per_ip`` is ``[fetch] politeness = "ip"``'s pool option): its scripts
    group the hosts by the addresses the fetch told it (``P group``)."""

    @defer.inlineCallbacks
    def open_pool(self, per_ip: bool) -> Any:
        pool = yield self.open_redis(self.clock, Politeness(delay=2.0, concurrency=4), {"per_ip": per_ip})
        self.addCleanup(pool.close)
        return pool


class GroupMemoryTests(unittest.SynchronousTestCase):
    """What per-IP politeness remembers of hosts that come and go."""

    def test_forgotten_hosts_leave_a_bounded_table(self) -> None:
        """Hosts told their address, crawled and forgotten by ``collect`` leave at most ``groups_kept`` addresses
        behind (a broad crawl meets millions of hosts once); the most recently told still rejoin their group when
        they come back, and a host with a slot keeps its group however many come after it."""
        politeness = Politeness(groups_kept=100)
        politeness.slot("kept.example").waiting = 1
        politeness.set_group("kept.example", "192.0.2.9")
        for i in range(1000):
            host = f"h{i}.example"
            politeness.slot(host)
            politeness.set_group(host, f"192.0.2.{i % 7}")
            if i % 100 == 99:
                politeness.collect(0.0)
        politeness.collect(0.0)
        self.assertLessEqual(len(politeness._group_of), 101)
        self.assertEqual(politeness.slot("h999.example").group.key, "192.0.2.5")  # type: ignore[union-attr]
        self.assertIsNone(politeness.slot("h0.example").group)  # on its own until its next lookup
        self.assertEqual(politeness.hosts["kept.example"].group.key, "192.0.2.9")  # type: ignore[union-attr]
        self.assertIn("kept.example", politeness._group_of)
