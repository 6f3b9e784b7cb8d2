"""Per-IP politeness in the worker: the hosts of one address share one slot (in-flight count, next start).

The unit tests drive the engine's host queue (through tests/test_hostqueue.py's ``Slots``) with a Clock; the end-to-end test runs the worker role (``build_worker``
from the settings) on one job of URLs on two host names that an injected resolver maps to 127.0.0.2, as
tests/test_politeness_ip.py does for the frontier's pools.
"""

from __future__ import annotations

import json
import os
import tempfile
import shutil
from typing import Any

from treq.client import HTTPClient
from twisted.internet import defer, reactor
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.trial import unittest
from twisted.web.client import URI, Agent, HTTPConnectionPool

from spiderd.config import settings as cfg
from spiderd.core.rules import AdaptiveDelay
from spiderd.demo.config import DEMO
from spiderd.feed.shipper import FeedShipper
from spiderd.fetch.connections import CachedEndpoints, pool_hosts
from spiderd.fetch.fetcher import Fetcher, FetchResult, fetch_config
from spiderd.fetch.parsepool import ParsePool
from spiderd.worker import build_worker, worker_config

from .test_hostqueue import Slots
from .test_politeness_ip import HOSTS, MappedReactor, listen_shared
from .helpers import rules_of
from .test_throttle import START, Base
from .test_worker import assert_fires_after

SITES = [dict(DEMO["sites"][0], name="shared", allowed_hosts=list(HOSTS), detail_urls=["/\\d+$"])]


class GroupedSlotsTests(unittest.SynchronousTestCase):
    """The host queue with hosts told their address (``set_group``), on a Clock."""

    def test_hosts_of_one_address_share_the_next_start(self) -> None:
        """Two hosts told one address start 2 s apart between them (per_host_delay 2); a host of another address,
        and one never told, go at once."""
        clock = Clock()
        slots = Slots(8, delay=2.0, clock=clock)
        slots.set_group("a.test", "192.0.2.1")
        slots.set_group("b.test", "192.0.2.1")
        slots.set_group("c.test", "192.0.2.2")
        first, second = slots.acquire("a.test"), slots.acquire("b.test")
        self.successResultOf(first)
        self.assertNoResult(second)
        self.successResultOf(slots.acquire("c.test"))
        self.successResultOf(slots.acquire("d.test"))
        third = slots.acquire("a.test")
        clock.advance(2)
        self.successResultOf(second)
        self.assertNoResult(third)
        clock.advance(2)
        self.successResultOf(third)
        self.assertEqual(slots.queue.blocked_until("b.test"), 6.0)

    def test_hosts_of_one_address_share_the_requests_in_flight(self) -> None:
        """With per_host_concurrency 1 the address has one request in flight; a host's own [fetch.hosts]
        concurrency is its limit on the address's count (a host of concurrency 2 may go beside one request)."""
        slots = Slots(1, overrides={"wide.test": (0.0, 2)})
        for host in ("a.test", "b.test", "wide.test"):
            slots.set_group(host, "192.0.2.1")
        self.successResultOf(slots.acquire("a.test"))
        waiting = slots.acquire("b.test")
        self.assertNoResult(waiting)  # the address's one request in flight: b.test's limit
        self.successResultOf(slots.acquire("wide.test"))  # its own limit is 2: it goes beside a.test's request
        wide = slots.acquire("wide.test")
        self.assertNoResult(wide)  # two in flight: its limit too
        slots.release("a.test")
        self.successResultOf(wide)  # one in flight: below wide.test's limit, not below b.test's
        self.assertNoResult(waiting)
        slots.release("wide.test")
        self.assertNoResult(waiting)
        slots.release("wide.test")
        self.successResultOf(waiting)

    def test_a_host_override_delay_paces_its_address_after_its_own_requests(self) -> None:
        """The address's next start is booked by the delay of the host that went: after a host with its own
        delay 0, the next host of the address goes at once; after one of the default 2 s, it waits 2 s."""
        clock = Clock()
        slots = Slots(8, delay=2.0, clock=clock, overrides={"fast.test": (0.0, 8)})
        slots.set_group("fast.test", "192.0.2.1")
        slots.set_group("slow.test", "192.0.2.1")
        self.successResultOf(slots.acquire("fast.test"))
        self.successResultOf(slots.acquire("slow.test"))
        assert_fires_after(self, clock, slots.acquire("fast.test"), 2.0)

    def test_a_block_and_an_adaptive_wait_hold_the_address(self) -> None:
        """A throttling answer's block of one host and its adaptive wait hold every host of its address."""
        clock = Clock()
        slots = Slots(8, clock=clock, adaptive_overrides={"a.test": AdaptiveDelay(2.0, 0.0, 60.0)})
        slots.set_group("a.test", "192.0.2.1")
        slots.set_group("b.test", "192.0.2.1")
        slots.queue.block("a.test", 30.0)
        self.assertEqual(slots.queue.blocked_until("b.test"), 30.0)
        held = slots.acquire("b.test")
        clock.advance(30)
        self.successResultOf(held)
        self.successResultOf(slots.acquire("a.test"))
        slots.release("a.test", 5.0)  # 2 x 5 s from now
        slots.release("b.test")
        assert_fires_after(self, clock, slots.acquire("b.test"), 10.0)

    def test_a_host_that_moves_takes_its_requests_and_frees_its_old_slot(self) -> None:
        """A host whose address changes takes its request in flight and its waiting one to the new address's
        slot: the old address's waiting host goes at once, the new address's hosts wait for the moved request;
        once all are released no slot is left."""
        slots = Slots(1)
        slots.set_group("a.test", "192.0.2.1")
        slots.set_group("b.test", "192.0.2.1")
        slots.set_group("c.test", "192.0.2.2")
        self.successResultOf(slots.acquire("a.test"))
        moving, old_neighbour = slots.acquire("a.test"), slots.acquire("b.test")
        slots.set_group("a.test", "192.0.2.2")
        self.successResultOf(old_neighbour)  # the old address is free of a.test's request
        self.assertNoResult(moving)
        new_neighbour = slots.acquire("c.test")
        self.assertNoResult(new_neighbour)  # a.test's request in flight holds its new address
        slots.release("a.test")
        self.successResultOf(moving)  # it came first
        self.assertNoResult(new_neighbour)
        slots.release("a.test")
        self.successResultOf(new_neighbour)
        for host in ("b.test", "c.test"):
            slots.release(host)
        self.assertEqual(len(slots), 0)

    def test_an_address_that_is_the_host_puts_it_on_its_own(self) -> None:
        """Told its own name as address (set_group's "on its own"), a host leaves its group with its request."""
        slots = Slots(1)
        slots.set_group("a.test", "192.0.2.1")
        slots.set_group("b.test", "192.0.2.1")
        self.successResultOf(slots.acquire("a.test"))
        waiting = slots.acquire("b.test")
        slots.set_group("a.test", "a.test")
        self.successResultOf(waiting)
        self.assertEqual((slots.politeness.group_of("a.test"), slots.politeness.group_of("b.test")), ("a.test", "192.0.2.1"))

    def test_a_cancelled_wait_in_a_group_leaves_nothing(self) -> None:
        """A waiting acquire cancelled after its host moved leaves its new slot; the slots empty once released."""
        slots = Slots(1)
        slots.set_group("a.test", "192.0.2.1")
        self.successResultOf(slots.acquire("b.test"))
        slots.set_group("b.test", "192.0.2.1")
        waiting = slots.acquire("a.test")
        slots.set_group("a.test", "192.0.2.9")  # moves while waiting; its new slot is free
        self.successResultOf(waiting)
        slots.release("a.test")
        waiting = slots.acquire("b.test")
        waiting.cancel()
        self.failureResultOf(waiting, CancelledError)
        slots.release("b.test")
        self.assertEqual(len(slots), 0)

    def test_the_address_table_is_bounded(self) -> None:
        """Of 1000 hosts told an address, at most ``groups_kept`` addresses of hosts without a slot are kept, the
        last told; a host with a request in flight keeps its own however many come after it (besides them)."""
        slots = Slots(1, groups_kept=10)
        slots.set_group("busy.test", "192.0.2.99")
        self.successResultOf(slots.acquire("busy.test"))
        for i in range(1000):
            slots.set_group(f"h{i}.test", f"192.0.2.{i % 7}")
        self.assertLessEqual(len(slots.politeness._group_of), 10 + 1)
        self.assertEqual(slots.politeness.group_of("h999.test"), "192.0.2.5")
        self.assertEqual(slots.politeness.group_of("h0.test"), "h0.test")  # on its own until its next lookup
        self.assertEqual(slots.politeness.group_of("busy.test"), "192.0.2.99")
        slots.release("busy.test")
        self.assertEqual(len(slots), 0)


class CountingFetcher(Fetcher):
    """The fetcher, counting the fetches under way (the test turns the clock only when none is)."""

    fetching = 0

    def fetch(self, url: str, *args: Any, **kwargs: Any) -> Deferred[FetchResult]:
        self.fetching += 1
        return super().fetch(url, *args, **kwargs).addBoth(self._over)

    def _over(self, result: Any) -> Any:
        self.fetching -= 1
        return result


class WorkerPerIPTests(Base):
    """The worker role with ``[fetch] politeness = "ip"`` against ``"host"``: one job of three pages on each of two
    hosts of 127.0.0.2, per_host_delay 2 s, two URLs in flight."""

    @defer.inlineCallbacks
    def crawl(self, politeness: str) -> Any:
        """The (host, clock second) of each request of the job, once it is finished."""
        self.clock = Clock()
        self.clock.advance(START)
        site, port = listen_shared(self, self.clock)
        data = tempfile.mkdtemp(prefix="spiderd-workerip-")
        self.addCleanup(shutil.rmtree, data, True)
        settings = cfg.from_dict({
            "spiderd": {"data_dir": data, "role": "worker"}, "parse": {"workers": 0}, "sites": SITES,
            "fetch": {"politeness": politeness, "per_host_delay": 2.0, "per_host_concurrency": 4, "robots": False,
                      "timeout": 10},
            "worker": {"port": 0, "concurrency": 2},
        }, "<test>")
        clocked = MappedReactor(reactor, self.clock)
        fetcher = CountingFetcher(clocked, fetch_config(settings.fetch, settings.sites))
        self.addCleanup(fetcher.close)
        parser = ParsePool(reactor, rules_of({"sites": SITES}), 0)
        parser.startService()
        self.addCleanup(parser.stopService)
        shipper = FeedShipper(clocked, os.path.join(data, "spool"), stop_timeout=5.0)
        shipper.startService()
        self.addCleanup(shipper.stopService)
        worker = build_worker(worker_config(settings.worker, settings.fetch, data_dir=data, role="worker"),
                              clocked, fetcher, parser, None, shipper)
        worker.startService()
        self.addCleanup(lambda: worker.stopService() if worker.running else None)
        jobid = yield self.schedule(worker, [f"http://{host}:{port.getHost().port}/{i}"
                                             for i in range(3) for host in HOSTS])
        yield self.settle(lambda: bool(fetcher.fetching or site.log))  # the job started: its first fetches
        for _ in range(30):
            yield self.settle(lambda: fetcher.fetching == 0)
            if len(site.log) == 6:
                break
            yield self.advance(1.0, step=1.0)
        yield self.settle(lambda: worker.runner.jobs[jobid].state == "finished")
        self.assertEqual(worker.runner.jobs[jobid].stats["pages"], 6)
        return sorted(site.log, key=lambda entry: entry[1])

    @defer.inlineCallbacks
    def schedule(self, worker: Any, urls: list[str]) -> Any:
        """POST schedule.json (the job's URLs in DISTRIBUTED_START_URLS); fires with the job id."""
        pool = HTTPConnectionPool(reactor, persistent=False)
        http = HTTPClient(Agent(reactor, pool=pool))
        d = http.post("http://%s:%d/schedule.json" % worker.address, data=[
            ("project", "spiderd"), ("spider", "shared"),
            ("setting", "DISTRIBUTED_START_URLS=" + json.dumps(urls))])
        self.clock.advance(0)
        response = yield d
        answer = json.loads((yield response.content()))
        self.assertEqual(answer["status"], "ok", answer)
        return answer["jobid"]

    @defer.inlineCallbacks
    def test_hosts_on_one_address_share_one_turn(self) -> Any:
        """With "ip", once the fetcher has told the worker both hosts' address, their pages start one per 2 s
        between them (the first of each went before either address was known)."""
        log = yield self.crawl("ip")
        self.assertEqual([at for _, at in log], [0.0, 0.0, 2.0, 4.0, 6.0, 8.0])
        self.assertEqual(sorted(host for host, _ in log), ["a.test"] * 3 + ["b.test"] * 3)

    @defer.inlineCallbacks
    def test_by_host_each_host_has_its_own_turn(self) -> Any:
        """With "host" (the default), each host gives one page per 2 s, both at once."""
        log = yield self.crawl("host")
        self.assertEqual([at for _, at in log], [0.0, 0.0, 2.0, 2.0, 4.0, 4.0])


class FanOutTests(Base):
    """The fetcher tells each lookup's address to every listener (the all role: the pool and the local worker)."""

    @defer.inlineCallbacks
    def test_every_listener_is_told_and_one_failing_does_not_stop_the_others(self) -> Any:
        """With ``tell_addresses`` (``politeness = "ip"``), a fetch by name tells both listeners the host (with its
        port) and its address; a listener that raises is logged and the next is still told."""
        self.clock = Clock()
        _, port = listen_shared(self, self.clock)
        settings = cfg.from_dict({"fetch": {"politeness": "ip", "robots": False}}, "<test>")
        fetcher = Fetcher(MappedReactor(reactor, self.clock), fetch_config(settings.fetch))
        self.addCleanup(fetcher.close)
        told: list[tuple[str, str]] = []

        def broken(host: str, address: str) -> None:
            raise RuntimeError("a pool that is down")

        fetcher.add_address_listener(broken)
        fetcher.add_address_listener(lambda host, address: told.append((host, address)))
        result = yield fetcher.fetch(f"http://a.test:{port.getHost().port}/0")
        self.assertEqual(result.status, 200)
        self.assertEqual(told, [(f"a.test:{port.getHost().port}", "127.0.0.2")])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)


class PoolHostTests(unittest.TestCase):
    """The host key told with an address is the pool's: the scheme's default port left out, other ports kept."""

    def test_keys_by_scheme(self) -> None:
        self.assertEqual(pool_hosts("x", 443, ["https"]), ["x"])
        self.assertEqual(pool_hosts("x", 443, ["http"]), ["x:443"])
        self.assertEqual(pool_hosts("x", 80, ["http", "https"]), ["x", "x:80"])
        self.assertEqual(pool_hosts("x", 8080, ["http"]), ["x:8080"])

    def test_by_port_when_no_scheme_is_known(self) -> None:
        self.assertEqual(pool_hosts("x", 443, []), ["x"])
        self.assertEqual(pool_hosts("x", 8443, []), ["x:8443"])

    def test_endpoints_say_which_schemes_they_served(self) -> None:
        endpoints = CachedEndpoints(reactor, 5.0, None)
        endpoints.endpointForURI(URI.fromBytes(b"http://x.test:443/a"))
        endpoints.endpointForURI(URI.fromBytes(b"https://y.test/a"))
        self.assertEqual(endpoints.schemes("x.test", 443), ["http"])
        self.assertEqual(endpoints.schemes("y.test", 443), ["https"])
        self.assertEqual(endpoints.schemes("x.test", 80), [])

    def test_a_lookup_for_http_on_443_is_told_with_the_port(self) -> None:
        """http://x:443's address goes to the pool under "x:443" (its host key), not "x" (https://x's)."""
        told: list[tuple[str, str]] = []
        fetcher = Fetcher(reactor, fetch_config(cfg.from_dict({"fetch": {"robots": False}}, "<test>").fetch),
                          on_address=lambda host, address: told.append((host, address)))
        self.addCleanup(fetcher.close)
        fetcher._endpoints[0].endpointForURI(URI.fromBytes(b"http://x.test:443/a"))  # as the Agent does first
        fetcher._tell_address("x.test", 443, "192.0.2.1")  # as the resolver does then
        self.assertEqual(told, [("x.test:443", "192.0.2.1")])
