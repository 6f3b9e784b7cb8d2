"""The pool contract of seed 000, run on every backend (memory, LevelDB, Redis), plus what only Redis has: many nodes."""

from __future__ import annotations

import uuid
from typing import Any, Generator

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.logger import LogLevel, capturedLogs, formatEvent
from twisted.trial.unittest import TestCase
from zope.interface.interface import InterfaceClass
from zope.interface.verify import verifyObject

from spiderd.contracts import pool as pool_contracts
from spiderd.contracts.pool import IURLPool, IURLPoolAdmin
from spiderd.core import status
from spiderd.core.conditional import Validators
from spiderd.core.recrawls import Recrawl
from spiderd.core.rules import AdaptiveDelay, PoliteRules
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool import open_leveldb_pool, open_memory_pool
from spiderd.frontier.pool.redis import open_redis_pool
from spiderd.frontier.pool.redis.link import RedisLink, parse_redis_url
from spiderd.frontier.pool.redis.partitions import partition_of

from . import services
from .clusterkeys import ClusterCase

Gen = Generator[Any, Any, None]
LAST_MODIFIED = 1_700_000_000
V1 = Validators('"v1"', LAST_MODIFIED)
V2 = Validators('W/"v2"', LAST_MODIFIED + 60)


class PoolContract:
    """The contract; a subclass per backend provides ``open_pool`` (a Deferred) and ``reopens``."""

    backend = ""
    reopens = True  # a second make_pool() opens the same storage

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.pools: list[Any] = []
        self.addCleanup(self._close_all)  # type: ignore[attr-defined]

    def open_pool(self, politeness: Politeness, options: dict[str, Any]) -> defer.Deferred[Any]:
        raise NotImplementedError

    def open_other(self, politeness: Politeness) -> defer.Deferred[Any]:
        """An empty pool of this backend on storage of its own (for imports)."""
        raise NotImplementedError

    @defer.inlineCallbacks
    def make_other_pool(self) -> Generator[Any, Any, Any]:
        pool = yield self.open_other(Politeness(concurrency=10))
        self.pools.append(pool)
        return pool

    @defer.inlineCallbacks
    def make_pool(self, delay: float = 0.0, concurrency: int = 1, **options: Any) -> Generator[Any, Any, Any]:
        """A pool of this backend; called again, it reopens the same storage where the backend can."""
        options.setdefault("pending_threshold", 60.0)
        politeness = Politeness(delay=delay, concurrency=concurrency, overrides=options.pop("overrides", {}),
                                adaptive=options.pop("adaptive", AdaptiveDelay()),
                                adaptive_overrides=options.pop("adaptive_overrides", {}))
        pool = yield self.open_pool(politeness, options)
        self.pools.append(pool)
        return pool

    @defer.inlineCallbacks
    def _close_all(self) -> Gen:
        for pool in self.pools:
            yield pool.close()

    def drain(self, pool: Any, count: int = 100) -> defer.Deferred[dict[str, bool]]:
        return pool.pop(count)

    # -- the contract ---------------------------------------------------------------

    @defer.inlineCallbacks
    def test_provides_interface(self) -> Gen:
        """Every backend provides IURLPool."""
        assert verifyObject(IURLPool, (yield self.make_pool()))

    @defer.inlineCallbacks
    def test_provides_each_narrow_contract(self) -> Gen:
        """Every backend provides each narrow contract that a consumer types against (spiderd.contracts.pool)."""
        pool = yield self.make_pool()
        contracts = [value for value in vars(pool_contracts).values()
                     if isinstance(value, InterfaceClass) and value is not IURLPoolAdmin]
        assert len(contracts) >= 12, contracts
        for contract in contracts:
            assert verifyObject(contract, pool), contract.__name__

    @defer.inlineCallbacks
    def test_provides_admin_interface(self) -> Gen:
        """Every backend here also provides the admin part (why, export, import), which a backend may lack."""
        pool = yield self.make_pool()
        assert IURLPoolAdmin.providedBy(pool) and verifyObject(IURLPoolAdmin, pool)

    @defer.inlineCallbacks
    def test_add_dedups_and_pop_leases(self) -> Gen:
        """A URL is queued once; a popped URL is pending and not queued again."""
        pool = yield self.make_pool()
        assert (yield pool.add("http://a.example/1")) is True
        assert (yield pool.add("http://A.example:80/1#x")) is False
        assert (yield self.drain(pool)) == {"http://a.example/1": False}
        assert (yield pool.add("http://a.example/1")) is False
        stats = yield pool.stats()
        assert (stats["waiting"], stats["pending"]) == (0, 1)

    @defer.inlineCallbacks
    def test_done_is_final_unless_always(self) -> Gen:
        """200 is done; a done URL is not added again, unless always=True."""
        pool = yield self.make_pool()
        yield pool.add("http://a.example/1")
        yield self.drain(pool)
        yield pool.set_status("http://a.example/1", 200)
        assert (yield pool.add("http://a.example/1")) is False
        assert (yield pool.stats())["done"] == 1
        assert (yield pool.add("http://a.example/1", always=True)) is True
        stats = yield pool.stats()
        assert (stats["done"], stats["waiting"]) == (0, 1)

    @defer.inlineCallbacks
    def test_always_on_a_leased_url_queues_it_when_the_lease_ends(self) -> Gen:
        """add(always=True) on a pending URL queues it again (seed 000) once its lease ends, whatever the
        outcome: never handed out twice at once, and queued once however often it is added meanwhile."""
        pool = yield self.make_pool(concurrency=10)
        url = "http://a.example/1"
        yield pool.add(url)
        assert (yield self.drain(pool)) == {url: False}
        assert (yield pool.add(url, always=True, detail=True)) is True
        assert (yield pool.addmany([url, url], always=True)) == 0
        assert (yield self.drain(pool)) == {}
        why = yield pool.why(url)
        assert (why["state"], why.get("queued_again")) == ("pending", True)
        yield pool.set_status(url, 200)
        stats = yield pool.stats()
        assert (stats["waiting"], stats["pending"], stats["done"]) == (1, 0, 0)
        why = yield pool.why(url)
        assert (why["state"], why["kind"], why["failures"], "queued_again" in why) == ("waiting", "detail", 0, False)
        assert (yield self.drain(pool)) == {url: False}
        yield pool.set_status(url, 200)
        assert (yield self.drain(pool)) == {}
        stats = yield pool.stats()
        assert (stats["waiting"], stats["pending"], stats["done"]) == (0, 0, 1)

    @defer.inlineCallbacks
    def test_always_on_a_leased_url_whose_lease_runs_out(self) -> Gen:
        """A leased URL added again whose lease runs out (its fetch died) is handed out once more, not twice."""
        pool = yield self.make_pool(concurrency=10, pending_threshold=30)
        url = "http://a.example/1"
        yield pool.add(url)
        yield self.drain(pool)
        assert (yield pool.add(url, always=True)) is True
        self.clock.advance(31)
        assert (yield self.drain(pool)) == {url: False}
        yield pool.set_status(url, 200)
        assert (yield self.drain(pool)) == {}
        assert (yield pool.stats())["done"] == 1

    @defer.inlineCallbacks
    def test_always_on_a_leased_url_that_fails(self) -> Gen:
        """A leased URL added again is a new request: a failed fetch of the old one neither fails it for good
        nor counts against the new one."""
        pool = yield self.make_pool(failure_threshold=1)
        url = "http://a.example/1"
        yield pool.add(url)
        yield self.drain(pool)
        yield pool.set_status(url, 500)  # one failure: the next one is final
        yield self.drain(pool)
        assert (yield pool.add(url, always=True)) is True
        yield pool.set_status(url, 500)
        stats = yield pool.stats()
        assert (stats["failed"], stats["waiting"], (yield pool.why(url))["failures"]) == (0, 1, 0)

    @defer.inlineCallbacks
    def test_always_on_a_failed_url_resets_its_failures(self) -> Gen:
        """add(always=True) on a URL that failed for good queues it again with no failures counted."""
        pool = yield self.make_pool(failure_threshold=1)
        url = "http://a.example/1"
        yield pool.add(url)
        for _ in range(2):
            yield self.drain(pool)
            yield pool.set_status(url, 503)
        assert (yield pool.stats())["failed"] == 1
        assert (yield pool.add(url, always=True)) is True
        why = yield pool.why(url)
        assert (why["state"], why["failures"]) == ("waiting", 0)
        yield self.drain(pool)
        yield pool.set_status(url, 503)  # retried again: the count started over
        stats = yield pool.stats()
        assert (stats["failed"], stats["waiting"]) == (0, 1)
        yield self.drain(pool)
        yield pool.set_status(url, 503)
        assert (yield pool.stats())["failed"] == 1

    @defer.inlineCallbacks
    def _final_failure(self, code: int) -> Gen:
        pool = yield self.make_pool()
        yield pool.add("http://a.example/1")
        yield self.drain(pool)
        yield pool.set_status("http://a.example/1", code)
        assert (yield pool.stats())["failed"] == 1
        assert (yield self.drain(pool)) == {}
        assert (yield pool.add("http://a.example/1")) is False

    def test_final_failure_404(self) -> defer.Deferred[None]:
        """404 fails a URL at once."""
        return self._final_failure(404)

    def test_final_failure_410(self) -> defer.Deferred[None]:
        """410 fails a URL at once."""
        return self._final_failure(410)

    def test_final_failure_robots(self) -> defer.Deferred[None]:
        """A robots.txt denial fails a URL at once."""
        return self._final_failure(status.ROBOTS_DENIED)

    def test_final_failure_too_large(self) -> defer.Deferred[None]:
        """A body over the size limit fails a URL at once."""
        return self._final_failure(status.TOO_LARGE)

    @defer.inlineCallbacks
    def _retried_until_threshold(self, code: int) -> Gen:
        pool = yield self.make_pool(failure_threshold=3)
        yield pool.add("http://a.example/1")
        for attempt in range(4):
            assert (yield self.drain(pool)) == {"http://a.example/1": False}, attempt
            yield pool.set_status("http://a.example/1", code)
            self.clock.advance(1)
        assert (yield self.drain(pool)) == {}
        stats = yield pool.stats()
        assert (stats["failed"], stats["waiting"], stats["pending"]) == (1, 0, 0)

    def test_retried_500(self) -> defer.Deferred[None]:
        """500 is retried failure_threshold times, then final (seed: count > threshold)."""
        return self._retried_until_threshold(500)

    def test_retried_503(self) -> defer.Deferred[None]:
        """503 is retried failure_threshold times, then final."""
        return self._retried_until_threshold(503)

    def test_retried_403(self) -> defer.Deferred[None]:
        """403 is retried failure_threshold times, then final."""
        return self._retried_until_threshold(403)

    def test_retried_timeout(self) -> defer.Deferred[None]:
        """A timeout is retried failure_threshold times, then final."""
        return self._retried_until_threshold(status.TIMEOUT)

    def test_retried_refused(self) -> defer.Deferred[None]:
        """A refused connection is retried failure_threshold times, then final."""
        return self._retried_until_threshold(status.CONNECT_REFUSED)

    # -- throttling answers (429, 503) ---------------------------------------------

    @defer.inlineCallbacks
    def test_throttle_blocks_the_whole_host_until_then(self) -> Gen:
        """A throttle blocks every URL of the host until the time given; other hosts go on; the throttled URL
        is queued again without a failure, its reason kept."""
        pool = yield self.make_pool(concurrency=2, failure_threshold=1)
        yield pool.addmany(["http://a.example/1", "http://a.example/2", "http://b.example/1"])
        popped = yield pool.pop(1)
        assert popped == {"http://a.example/1": False}
        now = self.clock.seconds()
        yield pool.throttle("http://a.example/1", now + 30, 429, "throttled: http 429, retry after 30 s")
        assert (yield pool.pop(10)) == {"http://b.example/1": False}
        self.clock.advance(29.5)
        assert (yield pool.pop(10)) == {}
        assert 0 < (yield pool.next_due()) <= 0.5
        self.clock.advance(0.5)
        assert set((yield pool.pop(10))) == {"http://a.example/1", "http://a.example/2"}
        why = yield pool.why("http://a.example/1")
        assert why["failures"] == 0 and why["last_failure"]["reason"] == "throttled: http 429, retry after 30 s"
        stats = yield pool.stats()
        assert (stats["failed"], stats["pending"]) == (0, 3)

    @defer.inlineCallbacks
    def test_throttle_keeps_a_later_block(self) -> Gen:
        """A shorter block does not shorten a longer one already set."""
        pool = yield self.make_pool(concurrency=2)
        yield pool.addmany(["http://a.example/1", "http://a.example/2"])
        yield pool.pop(10)
        now = self.clock.seconds()
        yield pool.throttle("http://a.example/1", now + 60, 503)
        yield pool.throttle("http://a.example/2", now + 5, 503)
        self.clock.advance(30)
        assert (yield pool.pop(10)) == {}
        self.clock.advance(30)
        assert len((yield pool.pop(10))) == 2

    @defer.inlineCallbacks
    def test_throttles_past_the_limit_count_as_failures(self) -> Gen:
        """``max_throttles`` throttles of a URL are free; each one after counts as a failure, so a host that
        throttles forever ends."""
        pool = yield self.make_pool(failure_threshold=1, max_throttles=2)
        yield pool.add("http://a.example/1")
        for attempt in range(4):
            assert (yield pool.pop(1)) == {"http://a.example/1": False}, attempt
            yield pool.throttle("http://a.example/1", self.clock.seconds() + 1, 429)
            self.clock.advance(1)
        assert (yield pool.pop(1)) == {}
        stats = yield pool.stats()
        assert (stats["failed"], stats["waiting"], stats["pending"]) == (1, 0, 0)

    @defer.inlineCallbacks
    def test_done_forgets_the_throttles(self) -> Gen:
        """A URL done after throttles starts from none when added again."""
        pool = yield self.make_pool(failure_threshold=0, max_throttles=1)
        yield pool.add("http://a.example/1")
        yield pool.pop(1)
        yield pool.throttle("http://a.example/1", self.clock.seconds() + 1, 429)
        self.clock.advance(1)
        yield pool.pop(1)
        yield pool.set_status("http://a.example/1", 200)
        yield pool.add("http://a.example/1", always=True)
        yield pool.pop(1)
        yield pool.throttle("http://a.example/1", self.clock.seconds() + 1, 429)
        self.clock.advance(1)
        assert (yield pool.pop(1)) == {"http://a.example/1": False}

    # -- conditional GET: validators of the URLs handed out again ---------------------

    @defer.inlineCallbacks
    def test_validators_of_a_hub_round_trip(self) -> Gen:
        """A hub's done fetch keeps its validators; its next hand-out gives them back; a 304 is done and may
        replace them; a 200 without any drops them; a final failure too."""
        pool = yield self.make_pool(concurrency=10)
        hub = "http://hub.example/"
        yield pool.set_hubs([hub], 60)
        assert (yield pool.pop(1)) == {hub: True}
        assert (yield pool.validators(hub)) is None
        yield pool.set_statuses([(hub, 200, None, V1)])
        assert (yield pool.validators(hub)) == V1
        assert (yield pool.why(hub))["validators"] == {"etag": '"v1"', "last_modified": LAST_MODIFIED}
        for validators, code, kept in ((V2, 304, V2), (None, 200, None), (V1, 200, V1), (None, 404, None)):
            self.clock.advance(61)
            assert (yield pool.pop(1)) == {hub: True}
            assert (yield pool.validators(hub)) == (yield pool.validators(hub))  # asked twice: the same
            yield pool.set_statuses([(hub, code, None, validators)])
            assert (yield pool.validators(hub)) == kept, (code, validators)
        stats = yield pool.stats()
        assert (stats["done"], stats["failed"], stats["pending"]) == (1, 0, 0)

    @defer.inlineCallbacks
    def test_validators_of_a_hub_queued_as_a_page(self) -> Gen:
        """With no recrawled kind, a hub's URL queued again as a page is handed out with the hub's validators."""
        pool = yield self.make_pool(concurrency=10)
        hub = "http://hub.example/"
        yield pool.set_hubs([hub], 60)
        assert (yield pool.pop(1)) == {hub: True}
        yield pool.set_statuses([(hub, 200, None, V1)])
        assert (yield pool.add(hub, always=True))
        assert (yield pool.pop(1)) == {hub: False}
        assert (yield pool.validators(hub)) == V1

    @defer.inlineCallbacks
    def test_validators_kept_only_for_recrawled_kinds(self) -> Gen:
        """Pages of a recrawled (domain, kind) keep their validators; other kinds and domains keep none."""
        pool = yield self.make_pool(concurrency=10, recrawl=[("a.example", "list")])
        lists = ["http://a.example/l", "http://b.example/l"]
        yield pool.addmany(lists)
        yield pool.add("http://a.example/d", detail=True)
        popped = yield self.drain(pool)
        assert len(popped) == 3
        yield pool.set_statuses([(url, 200, None, V1) for url in popped])
        kept = yield defer.gatherResults([pool.validators(url) for url in [*lists, "http://a.example/d"]])
        assert kept == [V1, None, None]
        assert "validators" not in (yield pool.why("http://b.example/l"))

    @defer.inlineCallbacks
    def test_recrawled_page_gets_its_validators_back(self) -> Gen:
        """A recrawled page is handed out with its validators; its 304 is done (and in its crawled set again, so
        it is recrawled after the next interval) with the validators given (the crawler's: those it sent, updated
        by the 304's); a done status without any drops them (a 200 that has none); a final failure too."""
        pool = yield self.make_pool(concurrency=10, recrawl=[("a.example", "list")])
        url = "http://a.example/l"
        yield pool.add(url)
        yield self.drain(pool)
        yield pool.set_statuses([(url, 200, None, V1)])
        for code, given, kept in ((304, V1, V1), (304, V2, V2), (200, None, None), (200, V1, V1), (410, None, None)):
            self.clock.advance(10)
            assert (yield pool.recrawl([("a.example", "list", self.clock.seconds())], 10)) == 1
            assert (yield self.drain(pool)) == {url: False}
            yield pool.set_statuses([(url, code, None, given)])
            assert (yield pool.validators(url)) == kept, (code, given)
            if code != 410:
                assert ((yield pool.stats())["done"], (yield pool.why(url))["state"]) == (1, "done")
        assert (yield pool.why(url))["state"] == "failed"
        assert (yield pool.recrawl([("a.example", "list", self.clock.seconds())], 10)) == 0

    @defer.inlineCallbacks
    def test_batched_details_recrawled(self) -> Gen:
        """Detail URLs sent in batches, of a domain whose detail pages are recrawled, are kept in a crawled set of
        their own: recrawl_batched hands them out once their interval has passed, oldest first, with the fetch
        time and validators a worker told (batched_fetched), else when they were sent, and scores them as sent
        again; they stay batched (seen), and other domains keep nothing."""
        pool = yield self.make_pool(recrawl=[("a.example", "detail")])
        d1, d2, d3 = "http://a.example/d1", "http://a.example/d2", "http://b.example/d3"
        assert (yield pool.seen_add([d1, d2, d3])) == 3
        sent = self.clock.seconds()

        def cutoffs(age: float) -> list[tuple[str, str, float]]:
            now = self.clock.seconds()
            return [("a.example", "detail", now - age), ("b.example", "detail", now - age)]

        assert (yield pool.recrawl_batched(cutoffs(1), 10)) == []
        self.clock.advance(10)
        told = [Recrawl(d2, sent + 5, V1), Recrawl(d3, sent + 5, V1)]
        assert (yield pool.batched_fetched(told)) == 1  # d3's domain keeps nothing
        assert (yield pool.recrawl_batched(cutoffs(5), 1)) == [Recrawl(d1, sent, None)]
        assert (yield pool.recrawl_batched(cutoffs(5), 10)) == [Recrawl(d2, sent + 5, V1)]
        assert (yield pool.recrawl_batched(cutoffs(5), 10)) == []  # scored as sent now
        self.clock.advance(6)
        assert sorted(r.url for r in (yield pool.recrawl_batched(cutoffs(5), 10))) == [d1, d2]
        assert (yield pool.seen_filter([d1, d2, d3])) == []
        stats = yield pool.stats()
        assert (stats["batched"], stats["done"], stats["waiting"]) == (3, 0, 0)
        assert (yield pool.add(d1, always=True))  # queued here again: out of the set of batched pages
        self.clock.advance(6)
        assert [r.url for r in (yield pool.recrawl_batched(cutoffs(5), 10))] == [d2]
        if self.backend == "leveldb":
            from spiderd.frontier.pool.fsck import check

            assert check(pool._kv) == []

    @defer.inlineCallbacks
    def test_recrawl_pairs_changed_at_run_time(self) -> Gen:
        """set_recrawl: pages done from then on are kept in the new pairs' sets (with their validators), those of a
        pair dropped no more; a page batched from then on too."""
        pool = yield self.make_pool(concurrency=10, recrawl=[("b.example", "list")])
        yield pool.set_recrawl([("a.example", "list"), ("a.example", "detail")])
        urls = ["http://a.example/l", "http://b.example/l"]
        yield pool.addmany(urls)
        popped = yield self.drain(pool)
        yield pool.set_statuses([(url, 200, None, V1) for url in popped])
        assert (yield defer.gatherResults([pool.validators(url) for url in urls])) == [V1, None]
        self.clock.advance(10)
        now = self.clock.seconds()
        assert (yield pool.recrawl([("a.example", "list", now), ("b.example", "list", now)], 10)) == 1
        assert (yield self.drain(pool)) == {urls[0]: False}
        assert (yield pool.seen_add(["http://a.example/d"])) == 1
        self.clock.advance(10)
        batched = yield pool.recrawl_batched([("a.example", "detail", self.clock.seconds())], 10)
        assert [r.url for r in batched] == ["http://a.example/d"]

    @defer.inlineCallbacks
    def test_validators_of_a_page_queued_again_while_leased(self) -> Gen:
        """A recrawled page added again (always) while its fetch runs: that fetch's validators are still kept,
        for the fetch that follows."""
        pool = yield self.make_pool(concurrency=10, recrawl=[("a.example", "list")])
        url = "http://a.example/l"
        yield pool.add(url)
        yield self.drain(pool)
        yield pool.add(url, always=True)
        yield pool.set_statuses([(url, 200, None, V2)])
        assert (yield self.drain(pool)) == {url: False}
        assert (yield pool.validators(url)) == V2

    @defer.inlineCallbacks
    def test_validators_not_kept_with_conditional_get_off(self) -> Gen:
        """With conditional_get off the pool keeps no validators and hands none out."""
        pool = yield self.make_pool(concurrency=10, recrawl=[("a.example", "list")], conditional_get=False)
        yield pool.set_hubs(["http://a.example/hub"], 60)
        yield pool.add("http://a.example/l")
        popped = yield self.drain(pool)
        yield pool.set_statuses([(url, 200, None, V1) for url in popped])
        assert (yield defer.gatherResults([pool.validators(url) for url in popped])) == [None, None]

    @defer.inlineCallbacks
    def test_validators_kept_across_a_reopen(self) -> Gen:
        """Validators are stored with the pool: a restarted node sends them back."""
        if not self.reopens:
            self.skipTest("the memory backend keeps nothing across a reopen")  # type: ignore[attr-defined]
        pool = yield self.make_pool(concurrency=10)
        yield pool.set_hubs(["http://a.example/hub"], 60)
        yield self.drain(pool)
        yield pool.set_statuses([("http://a.example/hub", 200, None, V1)])
        pool = yield self.make_pool(concurrency=10)
        yield pool.set_hubs(["http://a.example/hub"], 60)
        self.clock.advance(61)
        assert (yield self.drain(pool)) == {"http://a.example/hub": True}
        assert (yield pool.validators("http://a.example/hub")) == V1
        yield pool.set_hubs([], 60)  # a hub no longer configured drops them
        assert (yield pool.validators("http://a.example/hub")) is None

    @defer.inlineCallbacks
    def test_expired_lease_handed_out_again(self) -> Gen:
        """A pending URL whose lease expired is handed out again without being re-added."""
        pool = yield self.make_pool(pending_threshold=30)
        yield pool.add("http://a.example/1")
        assert (yield self.drain(pool)) == {"http://a.example/1": False}
        self.clock.advance(29)
        assert (yield self.drain(pool)) == {}
        self.clock.advance(2)
        assert (yield self.drain(pool)) == {"http://a.example/1": False}
        yield pool.set_status("http://a.example/1", 200)
        stats = yield pool.stats()
        assert (stats["pending"], stats["done"], stats["waiting"]) == (0, 1, 0)

    @defer.inlineCallbacks
    def test_late_status_after_expiry(self) -> Gen:
        """A status arriving after the lease expired still finishes the URL, which leaves the queue."""
        pool = yield self.make_pool(pending_threshold=30)
        yield pool.add("http://a.example/1")
        yield self.drain(pool)
        self.clock.advance(31)
        assert (yield pool.next_due()) == 0
        yield pool.set_status("http://a.example/1", 200)
        assert (yield self.drain(pool)) == {}
        stats = yield pool.stats()
        assert (stats["waiting"], stats["pending"], stats["done"]) == (0, 0, 1)

    @defer.inlineCallbacks
    def test_recent_failures_newest_first(self) -> Gen:
        """The node remembers the URLs it recorded as failed for good, newest first, with the reason."""
        pool = yield self.make_pool(failure_threshold=1)
        yield pool.addmany(["http://a.example/1", "http://b.example/1"])
        yield pool.pop(10)
        yield pool.set_status("http://a.example/1", 404)
        yield pool.set_status("http://b.example/1", 503)  # retried once first
        assert [e["url"] for e in pool.recent_failures.latest()] == ["http://a.example/1"]
        self.clock.advance(5)
        yield pool.pop(10)
        yield pool.set_status("http://b.example/1", 503)
        latest = pool.recent_failures.latest()
        assert [(e["url"], e["reason"]) for e in latest] == [("http://b.example/1", "http 503"),
                                                            ("http://a.example/1", "http 404")]
        assert pool.recent_failures.latest(1) == latest[:1]

    @defer.inlineCallbacks
    def test_hosts_to_look_at_first(self) -> Gen:
        """hosts(): a throttled host first, then the most waiting URLs; each with its queue, requests in flight,
        next turn, delay and why (throttled, configured, Crawl-delay, adaptive, none) and this node's failed
        fetches; the block's end passed, the host is one like the others."""
        pool = yield self.make_pool(delay=2.0, failure_threshold=5, overrides={"free.example": (0.0, 1)},
                                    adaptive_overrides={"slow.example": AdaptiveDelay(10.0, 0.0, 60.0)})
        yield pool.set_host_delay("robots.example", 7.0)
        yield pool.addmany([f"http://{h}.example/{i}" for h in ("thr", "robots", "slow") for i in (1, 2)]
                           + ["http://free.example/1"])
        assert len((yield pool.pop(10))) == 4  # one URL of each host
        self.clock.advance(1)
        now = self.clock.seconds()
        yield pool.throttle("http://thr.example/1", now + 30, 429)
        yield pool.fetched("http://slow.example/1", 1.0)  # 10 x 1 s: its next turn in 10 s
        yield pool.set_status("http://slow.example/1", 200)
        yield pool.set_status("http://free.example/1", 503)  # retried
        yield pool.addmany([f"http://big.example/{i}" for i in range(5)])

        def row(host: str, waiting: int, inflight: int, next_in: float, delay: float, why: str | None,
                until: float | None = None, errors: int = 0) -> dict[str, Any]:
            return {"host": host, "waiting": waiting, "inflight": inflight, "concurrency": 1, "next_in": next_in,
                    "delay": delay, "delay_why": why, "throttled_until": until, "errors": errors}

        assert (yield pool.hosts()) == [
            row("thr.example", 2, 0, 30.0, 2.0, "throttled", now + 30, errors=1),
            row("big.example", 5, 0, 0.0, 2.0, "configured"),
            row("free.example", 1, 0, 0.0, 0.0, None, errors=1),
            row("robots.example", 1, 1, 6.0, 7.0, "crawl-delay"),
            row("slow.example", 1, 0, 10.0, 2.0, "adaptive"),
        ]
        assert [r["host"] for r in (yield pool.hosts(2))] == ["thr.example", "big.example"]
        self.clock.advance(30)
        top = yield pool.hosts(2)
        assert top == [row("big.example", 5, 0, 0.0, 2.0, "configured"),
                       row("thr.example", 2, 0, 0.0, 2.0, "configured", errors=1)], top

    @defer.inlineCallbacks
    def test_a_pop_of_one_takes_a_due_hub(self) -> Gen:
        """pop(1) hands out a due hub (seed 000: at least one), so a crawl at concurrency 1 does not spin while
        next_due says a hub is due now."""
        pool = yield self.make_pool(concurrency=10)
        yield pool.set_hubs(["http://hub.example/"], 2)
        assert (yield pool.pop(1)) == {"http://hub.example/": True}
        yield pool.set_status("http://hub.example/", 200)
        self.clock.advance(3)
        assert (yield pool.next_due()) == 0
        assert (yield pool.pop(1, hub_percent=50)) == {"http://hub.example/": True}

    @defer.inlineCallbacks
    def test_a_due_hub_waits_for_its_host(self) -> Gen:
        """A due hub whose host may not go yet (its delay, a throttling block) is due at the host's next-allowed
        time: next_due says when, not 0 (which made the fetch loop pop again at once until then)."""
        pool = yield self.make_pool(delay=5.0, concurrency=4)
        hub = "http://hub.example/"
        yield pool.set_hubs([hub], 1)
        assert (yield pool.pop(4)) == {hub: True}
        yield pool.set_status(hub, 200)
        self.clock.advance(1)
        assert (yield pool.pop(4)) == {}
        assert abs((yield pool.next_due()) - 4.0) < 1e-6
        self.clock.advance(2)
        assert abs((yield pool.next_due()) - 2.0) < 1e-6
        self.clock.advance(2)
        assert (yield pool.pop(4)) == {hub: True}

    @defer.inlineCallbacks
    def test_a_due_hub_waits_for_its_host_s_throttling_block(self) -> Gen:
        """A due hub whose host a throttling answer blocks costs a pop or two until the block ends, not one per
        turn of the loop."""
        pool = yield self.make_pool(concurrency=4)
        hub, page = "http://hub.example/", "http://hub.example/page"
        yield pool.set_hubs([hub], 1)
        yield pool.add(page)
        assert (yield pool.pop(4)) == {hub: True, page: False}
        blocked_until = self.clock.seconds() + 30
        yield pool.throttle(page, blocked_until, 429)
        yield pool.set_status(hub, 200)
        pops = 0
        while not (yield pool.pop(4)).get(hub):  # the fetch loop's way: pop, then wait for next_due
            pops += 1
            due = yield pool.next_due()
            assert due > 0 and pops < 5, (due, pops)
            self.clock.advance(due)
        assert self.clock.seconds() >= blocked_until

    @defer.inlineCallbacks
    def test_a_hub_still_held_is_not_handed_out_again(self) -> Gen:
        """A hub due again while its previous fetch still holds it (a refresh span shorter than that fetch) waits
        for that fetch's status: never two fetches of it at once, and its host's slot is freed once."""
        pool = yield self.make_pool(concurrency=4, pending_threshold=60)
        hub = "http://hub.example/"
        yield pool.set_hubs([hub], 1)
        assert (yield pool.pop(4)) == {hub: True}
        self.clock.advance(3)
        assert (yield pool.pop(4)) == {}
        assert (yield pool.next_due()) != 0
        yield pool.add("http://hub.example/page")
        assert (yield pool.pop(4)) == {"http://hub.example/page": False}
        yield pool.set_status(hub, 200)
        self.clock.advance(1)
        assert (yield pool.pop(4)) == {hub: True}
        yield pool.set_status(hub, 200)
        yield pool.set_status("http://hub.example/page", 200)
        yield pool.add("http://hub.example/other")
        assert [row["inflight"] for row in (yield pool.hosts())] == [0]

    @defer.inlineCallbacks
    def test_a_due_hub_waits_for_a_free_slot_of_its_host(self) -> Gen:
        """A due hub whose host's slots are all taken goes once one is freed (the embedded pools at once, Redis
        at its next look, a second on), and costs no pop meanwhile."""
        pool = yield self.make_pool(concurrency=1)
        hub, page = "http://hub.example/", "http://hub.example/page"
        yield pool.set_hubs([hub], 1)
        assert (yield pool.pop(1)) == {hub: True}
        yield pool.set_status(hub, 200)
        yield pool.add(page)
        assert (yield pool.pop(1)) == {page: False}
        self.clock.advance(2)
        assert (yield pool.pop(1)) == {}
        assert (yield pool.next_due()) != 0
        yield pool.set_status(page, 200)
        self.clock.advance(1)
        assert (yield pool.pop(1)) == {hub: True}

    @defer.inlineCallbacks
    def test_hubs_once_per_span(self) -> Gen:
        """Hubs come out flagged, at most once per refresh span, and take at most hub_percent of a pop."""
        pool = yield self.make_pool(concurrency=10)
        yield pool.set_hubs([f"http://h{i}.example/" for i in range(4)], 60)
        yield pool.addmany([f"http://a.example/{i}" for i in range(10)])
        first = yield pool.pop(4, hub_percent=50)
        assert sum(first.values()) == 2 and len(first) == 4
        for url in first:
            yield pool.set_status(url, 200)
        second = yield pool.pop(10, hub_percent=50)
        assert sum(second.values()) == 2
        for url in second:
            yield pool.set_status(url, 200)
        assert sum((yield pool.pop(10)).values()) == 0
        self.clock.advance(61)
        assert sum((yield pool.pop(10)).values()) == 4

    @defer.inlineCallbacks
    def test_list_before_detail(self) -> Gen:
        """Within a host, list URLs (the higher queue) come before detail URLs (the lower queue)."""
        pool = yield self.make_pool(concurrency=10)
        yield pool.addmany([f"http://a.example/d{i}" for i in range(3)], detail=True)
        yield pool.addmany([f"http://a.example/l{i}" for i in range(2)])
        assert list((yield self.drain(pool, 2))) == ["http://a.example/l0", "http://a.example/l1"]

    @staticmethod
    def kinds(popped: Any) -> tuple[int, int]:
        """(list URLs, detail URLs) of a pop whose detail URLs have a path starting with /d."""
        details = sum("/d" in url.split("example", 1)[1][:2] for url in popped)
        return len(popped) - details, details

    @defer.inlineCallbacks
    def test_split_between_kinds(self) -> Gen:
        """With list_ratio and detail_ratio (seed 004's get_list, get_detail), a pop with enough waiting of both
        kinds hands them out in that split, though list URLs come first in a host."""
        pool = yield self.make_pool(concurrency=100, list_ratio=0.25, detail_ratio=0.75)
        yield pool.addmany([f"http://one.example/l{i}" for i in range(20)])
        yield pool.addmany([f"http://one.example/d{i}" for i in range(20)], detail=True)
        assert self.kinds((yield self.drain(pool, 8))) == (2, 6)
        assert self.kinds((yield self.drain(pool, 4))) == (1, 3)

    @defer.inlineCallbacks
    def test_split_over_hosts_of_one_kind(self) -> Gen:
        """The split holds when each kind lives on hosts of its own (list pages on one host, detail pages on
        another: seed 004's item.tmall.com), even with many list hosts taking turns before the detail one."""
        pool = yield self.make_pool(concurrency=10, list_ratio=0.5, detail_ratio=0.5)
        yield pool.addmany([f"http://list{i}.shop.example/l{j}" for i in range(20) for j in range(5)])
        yield pool.addmany([f"http://item.shop.example/d{i}" for i in range(20)], detail=True)
        assert self.kinds((yield self.drain(pool, 10))) == (5, 5)

    @defer.inlineCallbacks
    def test_split_left_to_the_other_kind(self) -> Gen:
        """A kind with none waiting leaves its share to the other: the pop is as large as without a split."""
        pool = yield self.make_pool(concurrency=100, list_ratio=0.5, detail_ratio=0.5)
        yield pool.addmany([f"http://one.example/l{i}" for i in range(20)])
        assert self.kinds((yield self.drain(pool, 6))) == (6, 0)
        yield pool.addmany([f"http://one.example/d{i}" for i in range(3)], detail=True)
        assert self.kinds((yield self.drain(pool, 10))) == (7, 3)
        assert self.kinds((yield self.drain(pool, 4))) == (4, 0)

    @defer.inlineCallbacks
    def test_split_over_small_pops(self) -> Gen:
        """Pops of one URL (the fetch loop's usual pop) add up to the split."""
        pool = yield self.make_pool(concurrency=100, list_ratio=0.7, detail_ratio=0.3)
        yield pool.addmany([f"http://one.example/l{i}" for i in range(20)])
        yield pool.addmany([f"http://one.example/d{i}" for i in range(20)], detail=True)
        popped: dict[str, bool] = {}
        for _ in range(10):
            popped.update((yield self.drain(pool, 1)))
        assert self.kinds(popped) == (7, 3)

    @defer.inlineCallbacks
    def test_delay_and_turns(self) -> Gen:
        """With a delay, each host gives one URL per delay; a big host does not starve a small one."""
        pool = yield self.make_pool(delay=2.0)
        yield pool.addmany([f"http://big.example/{i}" for i in range(1000)])
        yield pool.addmany(["http://small.example/1", "http://small.example/2"])
        popped = yield self.drain(pool)
        assert sorted(popped) == ["http://big.example/0", "http://small.example/1"]
        for url in popped:
            yield pool.set_status(url, 200)
        assert (yield self.drain(pool)) == {}
        assert abs((yield pool.next_due()) - 2.0) < 1e-6
        self.clock.advance(2)
        assert sorted((yield self.drain(pool))) == ["http://big.example/1", "http://small.example/2"]

    @defer.inlineCallbacks
    def test_concurrency_without_delay(self) -> Gen:
        """A delay of 0 with concurrency 64 hands out 64 URLs of one host at once, and more as they finish."""
        pool = yield self.make_pool(delay=0.0, concurrency=64)
        yield pool.addmany([f"http://one.example/{i}" for i in range(200)])
        first = yield self.drain(pool, 100)
        assert len(first) == 64
        assert (yield self.drain(pool, 100)) == {}
        for url in list(first)[:10]:
            yield pool.set_status(url, 200)
        assert len((yield self.drain(pool, 100))) == 10

    @defer.inlineCallbacks
    def test_small_pops_then_a_large_one(self) -> Gen:
        """Pops of one URL, then one of many: every queued URL of the host comes out once, lists first.

        A backend that reads a host's queue ahead must read on when its read-ahead runs out within a pop,
        and must not hand out a URL that a status or a claim took out of the queue meanwhile.
        """
        pool = yield self.make_pool(delay=0.0, concurrency=100)
        lists = [f"http://one.example/l{i}" for i in range(30)]
        details = [f"http://one.example/d{i}" for i in range(30)]
        yield pool.addmany(lists)
        yield pool.addmany(details, detail=True)
        first = list((yield self.drain(pool, 1))) + list((yield self.drain(pool, 1)))
        assert first == lists[:2]
        yield pool.set_status(lists[2], 200)  # a redirect target, waiting in the queue
        assert (yield pool.claim(lists[3])) is True
        yield pool.set_status(details[0], 404)
        rest = list((yield self.drain(pool, 100)))
        assert rest == lists[4:] + details[1:]
        stats = yield pool.stats()
        assert (stats["waiting"], stats["pending"], stats["done"], stats["failed"]) == (0, 58, 1, 1)
        yield pool.addmany([f"http://one.example/l{i}" for i in range(30, 35)])
        assert list((yield self.drain(pool, 100))) == [f"http://one.example/l{i}" for i in range(30, 35)]

    @defer.inlineCallbacks
    def test_crawl_delay_raises_host_delay(self) -> Gen:
        """A robots.txt Crawl-delay raises a host's delay above the configured one."""
        pool = yield self.make_pool(delay=0.0, concurrency=4)
        yield pool.set_host_delay("a.example", 5.0)
        yield pool.addmany([f"http://a.example/{i}" for i in range(5)])
        assert len((yield self.drain(pool))) == 1
        self.clock.advance(4.9)
        assert (yield self.drain(pool)) == {}
        self.clock.advance(0.2)
        assert len((yield self.drain(pool))) == 1

    @defer.inlineCallbacks
    def test_per_host_overrides(self) -> Gen:
        """Configured per-host concurrency applies to that host only."""
        pool = yield self.make_pool(concurrency=1, overrides={"fast.example": (0.0, 3)})
        yield pool.addmany([f"http://fast.example/{i}" for i in range(5)] + [f"http://slow.example/{i}" for i in range(5)])
        popped = yield self.drain(pool)
        assert sum(u.startswith("http://fast") for u in popped) == 3
        assert sum(u.startswith("http://slow") for u in popped) == 1

    # -- per-IP politeness (set_host_group) ------------------------------------------

    three_hosts = "abc"  # the names (x.example) of three hosts of one address (of one partition on a cluster)

    def hosts_of(self, popped: Any) -> list[str]:
        return sorted(u.split("/")[2] for u in popped)

    @defer.inlineCallbacks
    def test_hosts_of_one_group_share_a_turn(self) -> Gen:
        """Two hosts told one group (their address) get one URL per delay between them, taking turns; a host
        of no group keeps its own turn, and a host told its own name is on its own again."""
        pool = yield self.make_pool(delay=2.0, concurrency=10)
        yield pool.set_host_group("a.example", "192.0.2.1")  # told before it has URLs
        yield pool.addmany([f"http://{h}.example/{i}" for h in "abc" for i in range(4)])
        yield pool.set_host_group("b.example", "192.0.2.1")
        turns = []
        for _ in range(4):
            popped = yield self.drain(pool)
            grouped = [h for h in self.hosts_of(popped) if h != "c.example"]
            assert len(grouped) == 1 and "c.example" in self.hosts_of(popped), popped
            turns += grouped
            self.clock.advance(1.99)
            assert (yield self.drain(pool)) == {}
            self.clock.advance(0.01)
        assert sorted(turns) == ["a.example", "a.example", "b.example", "b.example"], turns
        assert turns[0] != turns[1] and turns[2] != turns[3]
        yield pool.set_host_group("a.example", "a.example")
        yield pool.addmany([f"http://{h}.example/{i}" for h in "ab" for i in range(4, 6)])
        assert self.hosts_of((yield self.drain(pool))) == ["a.example", "b.example"]

    @defer.inlineCallbacks
    def test_a_due_hub_waits_for_a_free_slot_of_its_group(self) -> Gen:
        """A due hub whose group's slots are taken by another host of its address goes once that host's fetch
        ends."""
        a, b = (f"{h}.example" for h in self.three_hosts[:2])
        pool = yield self.make_pool(concurrency=1)
        for host in (a, b):
            yield pool.set_host_group(host, "192.0.2.1")
        hub, page = f"http://{a}/", f"http://{b}/page"
        yield pool.set_hubs([hub], 1)
        assert (yield pool.pop(1)) == {hub: True}
        yield pool.set_status(hub, 200)
        yield pool.add(page)
        assert (yield pool.pop(1)) == {page: False}
        self.clock.advance(2)
        assert (yield pool.pop(1)) == {}
        assert (yield pool.next_due()) != 0
        yield pool.set_status(page, 200)
        self.clock.advance(1)
        assert (yield pool.pop(1)) == {hub: True}

    @defer.inlineCallbacks
    def test_hosts_of_one_group_share_the_requests_in_flight(self) -> Gen:
        """Without a delay, a group's hosts have ``concurrency`` requests in flight between them; a host that
        moves to another group takes its requests in flight along."""
        pool = yield self.make_pool(delay=0.0, concurrency=2)
        hosts = [f"{h}.example" for h in self.three_hosts]
        yield pool.addmany([f"http://{h}/{i}" for h in hosts for i in range(5)])
        for host in hosts:
            yield pool.set_host_group(host, "192.0.2.1")
        first = yield self.drain(pool)
        assert len(first) == 2, first
        assert (yield self.drain(pool)) == {}
        yield pool.set_status(sorted(first)[0], 200)
        second = yield self.drain(pool)
        assert len(second) == 1
        moved = next(iter(second)).split("/")[2]
        yield pool.set_host_group(moved, "192.0.2.2")  # its request in flight goes with it
        others = [h for h in hosts if h != moved]
        again = self.hosts_of((yield self.drain(pool)))
        assert moved in again, again  # its turn in its new group
        again.remove(moved)
        assert len(again) == 1 and again[0] in others, again  # the slot it freed in the old group is taken
        yield pool.set_status(sorted(first)[1], 200)
        assert self.hosts_of((yield self.drain(pool)))[0] in others

    @defer.inlineCallbacks
    def test_a_host_that_moves_frees_its_old_group(self) -> Gen:
        """A host whose request in flight filled its group moves to another address: the group's other host,
        refused a turn while that request was in flight, gets one at once (nothing else has to happen)."""
        pool = yield self.make_pool(delay=0.0, concurrency=1)
        yield pool.addmany([f"http://{h}.example/{i}" for h in "ab" for i in range(2)])
        for host in ("a.example", "b.example"):
            yield pool.set_host_group(host, "192.0.2.1")
        first = self.hosts_of((yield self.drain(pool)))
        assert len(first) == 1, first
        assert (yield self.drain(pool)) == {}
        yield pool.set_host_group(first[0], "192.0.2.2")  # its request in flight goes with it
        assert self.hosts_of((yield self.drain(pool))) == [h for h in ("a.example", "b.example") if h != first[0]]

    @defer.inlineCallbacks
    def test_a_drained_group_takes_no_turn(self) -> Gen:
        """A group whose hosts have nothing left waiting takes no turn from a pop: once its last request is
        done, pop(1) hands out another host's URL."""
        pool = yield self.make_pool(delay=0.0, concurrency=1)
        grouped, other = (f"{h}.example" for h in self.three_hosts[::2])
        yield pool.set_host_group(grouped, "192.0.2.1")
        yield pool.add(f"http://{grouped}/0")
        assert (yield pool.pop(1)) == {f"http://{grouped}/0": False}
        yield pool.add(f"http://{other}/0")
        yield pool.set_status(f"http://{grouped}/0", 200)
        assert (yield pool.pop(1)) == {f"http://{other}/0": False}

    @defer.inlineCallbacks
    def test_a_grouped_host_that_drained_comes_back(self) -> Gen:
        """A host of a group whose URLs all went out, one a turn, gets its turn again when a URL is added."""
        pool = yield self.make_pool(delay=0.0, concurrency=1)
        yield pool.set_host_group("a.example", "192.0.2.1")
        yield pool.addmany(["http://a.example/0", "http://a.example/1"])
        for url in ("http://a.example/0", "http://a.example/1"):
            assert (yield pool.pop(10)) == {url: False}
            yield pool.set_status(url, 200)
        yield pool.add("http://a.example/2")
        assert (yield pool.pop(10)) == {"http://a.example/2": False}

    @defer.inlineCallbacks
    def test_a_domains_next_host_of_no_group_waits_for_no_group(self) -> Gen:
        """A grouped host and a host of no group of one domain: each goes in its own turn, the one of no group
        though the group is full (on Redis the grouped one goes first: the domain's queue is in order)."""
        pool = yield self.make_pool(delay=0.0, concurrency=1)
        yield pool.addmany(["http://a.example/0", "http://www.a.example/0"])
        yield pool.set_host_group("a.example", "192.0.2.1")
        popped = [(yield pool.pop(1)), (yield pool.pop(1))]
        assert sorted(url for urls in popped for url in urls) == ["http://a.example/0", "http://www.a.example/0"]

    @defer.inlineCallbacks
    def test_a_throttle_holds_the_hosts_group(self) -> Gen:
        """A throttling answer of one host blocks every host of its group (the shared server) until then; a host
        of no group goes on; the group's hosts take their turns after it."""
        pool = yield self.make_pool(delay=0.0, concurrency=10)
        hosts = [f"{h}.example" for h in self.three_hosts]
        for host in hosts[:2]:
            yield pool.set_host_group(host, "192.0.2.1")
        yield pool.addmany([f"http://{h}/{i}" for h in hosts for i in range(2)])
        popped = yield pool.pop(1)
        assert len(popped) == 1 and next(iter(popped)).split("/")[2] in hosts[:2], popped
        now = self.clock.seconds()
        yield pool.throttle(next(iter(popped)), now + 30, 429)
        assert self.hosts_of((yield self.drain(pool))) == [hosts[2], hosts[2]]
        self.clock.advance(29.9)
        assert (yield self.drain(pool)) == {}
        self.clock.advance(0.1)
        assert {h for h in self.hosts_of((yield self.drain(pool)))} == set(hosts[:2])

    @defer.inlineCallbacks
    def test_fetched_frees_and_paces_the_hosts_group(self) -> Gen:
        """A grouped host's fetch reported over frees its group's request in flight and holds every host of the
        group by the adaptive wait (3 x 2 s), while a host of no group goes on."""
        pool = yield self.make_pool(delay=0.0, concurrency=1, adaptive=AdaptiveDelay(3.0, 0.0, 30.0))
        hosts = [f"{h}.example" for h in self.three_hosts]
        for host in hosts[:2]:
            yield pool.set_host_group(host, "192.0.2.1")
        yield pool.addmany([f"http://{h}/{i}" for h in hosts for i in range(2)])
        popped = yield self.drain(pool)
        grouped = [u for u in popped if u.split("/")[2] != hosts[2]]
        assert len(grouped) == 1 and self.hosts_of(popped).count(hosts[2]) == 1, popped
        self.clock.advance(2.0)
        yield pool.fetched(grouped[0], 2.0)
        assert self.hosts_of((yield self.drain(pool))) == []  # the group waits 6 s; c's slot is still taken
        self.clock.advance(5.99)
        assert (yield self.drain(pool)) == {}
        self.clock.advance(0.01)
        again = self.hosts_of((yield self.drain(pool)))
        assert len(again) == 1 and again[0] in hosts[:2], again

    # -- adaptive politeness (delay_factor) ----------------------------------------

    @defer.inlineCallbacks
    def finish(self, pool: Any, url: str, took: float) -> Gen:
        """``took`` seconds pass, then the fetch of ``url`` is reported over, with its duration."""
        self.clock.advance(took)
        yield pool.fetched(url, took)

    @defer.inlineCallbacks
    def after(self, pool: Any, wait: float) -> Generator[Any, Any, str]:
        """The host's next URL comes out ``wait`` seconds from now, not before; it is popped and returned."""
        due = yield pool.next_due()
        assert due is not None and due <= wait + 1e-6, (due, wait)
        self.clock.advance(wait - 0.01)
        assert (yield self.drain(pool)) == {}
        self.clock.advance(0.01)
        popped = yield self.drain(pool)
        assert len(popped) == 1, popped
        return next(iter(popped))

    @defer.inlineCallbacks
    def test_adaptive_delay_follows_fetch_duration(self) -> Gen:
        """With delay_factor 3, a fetch that took 2 s holds its host's next URL for 6 s from the fetch's end; the
        wait is at least min_delay (1 s) and at most max_delay (10 s)."""
        pool = yield self.make_pool(concurrency=1, adaptive=AdaptiveDelay(3.0, 1.0, 10.0))
        yield pool.addmany([f"http://a.example/{i}" for i in range(4)])
        url = next(iter((yield self.drain(pool))))
        yield self.finish(pool, url, 2.0)
        url = yield self.after(pool, 6.0)
        yield self.finish(pool, url, 0.1)  # 0.3 s: min_delay
        url = yield self.after(pool, 1.0)
        yield self.finish(pool, url, 5.0)  # 15 s: max_delay
        yield self.after(pool, 10.0)

    @defer.inlineCallbacks
    def test_adaptive_delay_keeps_the_configured_delay(self) -> Gen:
        """The configured delay (start to start) stays a lower bound: the later of the two times applies."""
        pool = yield self.make_pool(delay=5.0, concurrency=1, adaptive=AdaptiveDelay(1.0, 0.0, 30.0))
        yield pool.addmany([f"http://a.example/{i}" for i in range(3)])
        url = next(iter((yield self.drain(pool))))
        yield self.finish(pool, url, 0.5)  # adaptive: 0.5 s from the end; configured: 5 s from the start
        url = yield self.after(pool, 4.5)
        yield self.finish(pool, url, 7.0)  # adaptive: 7 s from the end, past the configured 5 s from the start
        yield self.after(pool, 7.0)

    @defer.inlineCallbacks
    def test_adaptive_delay_per_host(self) -> Gen:
        """A host's own rule ([fetch.hosts]) replaces the default one for that host only."""
        pool = yield self.make_pool(concurrency=1, adaptive=AdaptiveDelay(3.0, 0.0, 30.0),
                                    adaptive_overrides={"fast.example": AdaptiveDelay(0.0)})
        yield pool.addmany([f"http://fast.example/{i}" for i in range(3)] + [f"http://slow.example/{i}" for i in range(3)])
        popped = yield self.drain(pool)
        assert len(popped) == 2
        self.clock.advance(1.0)
        for url in popped:
            yield pool.fetched(url, 1.0)
        assert [u.split("/")[2] for u in (yield self.drain(pool))] == ["fast.example"]
        self.clock.advance(2.99)
        assert (yield self.drain(pool)) == {}
        self.clock.advance(0.01)
        assert [u.split("/")[2] for u in (yield self.drain(pool))] == ["slow.example"]

    @defer.inlineCallbacks
    def test_adaptive_delay_off_by_default(self) -> Gen:
        """Without a delay_factor a fetch's duration changes nothing: the next URL goes as soon as the slot is free;
        with one, a fetch reported without its duration adds no wait either."""
        pool = yield self.make_pool(concurrency=1)
        yield pool.addmany([f"http://a.example/{i}" for i in range(3)])
        url = next(iter((yield self.drain(pool))))
        yield self.finish(pool, url, 2.0)
        assert (yield pool.next_due()) == 0.0
        assert len((yield self.drain(pool))) == 1
        other = yield self.make_other_adaptive()
        yield other.add("http://b.example/1")
        yield other.add("http://b.example/2")
        url = next(iter((yield self.drain(other))))
        yield other.fetched(url)
        assert len((yield self.drain(other))) == 1

    @defer.inlineCallbacks
    def make_other_adaptive(self) -> Generator[Any, Any, Any]:
        pool = yield self.open_other(Politeness(concurrency=1, adaptive=AdaptiveDelay(3.0, 1.0, 10.0)))
        self.pools.append(pool)
        return pool

    @defer.inlineCallbacks
    def test_bad_input_rejected_and_counted(self) -> Gen:
        """Bad URLs never raise: they are rejected with a reason and counted."""
        pool = yield self.make_pool()
        bad = ["ftp://a.example/", "http:///x", "x" * 5000, "http://a.example:0x50/", "", None, 42]
        assert (yield pool.addmany(bad)) == 0
        assert (yield pool.add("javascript:void(0)")) is False
        yield pool.set_status("mailto:x@y", 200)
        rejected = (yield pool.stats())["rejected"]
        assert sum(rejected.values()) == len(bad) + 2
        assert {"bad-scheme", "no-host", "too-long", "not-a-string"} <= set(rejected)

    @defer.inlineCallbacks
    def test_addmany_accepts_a_single_string(self) -> Gen:
        """addmany with a str adds that one URL (the seed warns and does the same)."""
        pool = yield self.make_pool()
        assert (yield pool.addmany("http://a.example/1")) == 1

    @defer.inlineCallbacks
    def test_seed_urls_hold_the_seeds_given(self) -> Gen:
        """seed_urls (what the seed timer injects) holds the seeds last given to set_seeds (Redis: and earlier ones)."""
        pool = yield self.make_pool()
        assert (yield pool.set_seeds(["http://a.example/", "http://b.example/"])) == 2
        yield pool.set_seeds(["http://c.example/"])
        seeds = yield pool.seed_urls()
        assert "http://c.example/" in seeds and len(seeds) == (3 if self.backend == "redis" else 1)
        assert (yield pool.stats())["waiting"] == 0  # recorded, not queued

    @defer.inlineCallbacks
    def test_status_of_redirect_target(self) -> Gen:
        """A status for a URL the pool never handed out (a redirect target) records it, and takes it out of the queue."""
        pool = yield self.make_pool()
        yield pool.add("http://a.example/target")
        yield pool.set_status("http://a.example/target", 200)
        yield pool.set_status("http://b.example/unknown", 200)
        assert (yield self.drain(pool)) == {}
        stats = yield pool.stats()
        assert (stats["done"], stats["waiting"]) == (2, 0)

    @defer.inlineCallbacks
    def test_size_empty_and_max_host(self) -> Gen:
        """size, empty and the largest host follow the waiting URLs."""
        pool = yield self.make_pool()
        assert (yield pool.empty()) is True
        yield pool.addmany([f"http://a.example/{i}" for i in range(3)] + ["http://b.example/1"])
        assert (yield pool.size()) == 4
        assert (yield pool.empty()) is False
        stats = yield pool.stats()
        assert stats["max_host"] == ["a.example", 3] and stats["hosts"] == 2
        assert stats["largest"] == [["a.example", 3], ["b.example", 1]]

    @defer.inlineCallbacks
    def test_why(self) -> Gen:
        """why() tells a URL's state, failures and host; a rejected URL comes back without its password."""
        pool = yield self.make_pool()
        yield pool.add("http://a.example/1")
        assert (yield pool.why("http://a.example/1"))["state"] == "waiting"
        yield self.drain(pool)
        yield pool.set_status("http://a.example/1", 503)
        answer = yield pool.why("http://a.example/1")
        assert (answer["state"], answer["failures"], answer["host"]) == ("waiting", 1, "a.example")
        assert (yield pool.why("ftp://x"))["state"] == "rejected"
        assert (yield pool.why("http://never.example/"))["state"] == "unknown"
        answer = yield pool.why("http://user:secretpw@a.example/")  # a rejected URL is shown without its password
        assert answer == {"url": "http://user:***@a.example/", "state": "rejected", "reason": "credentials"}

    @defer.inlineCallbacks
    def test_last_failure_in_why_and_export(self) -> Gen:
        """A 503 then a final failure: why() tells the last one's reason, time and count, the export carries it
        on the failed record; reasons are redacted and cut; a URL done after failing has none."""
        pool = yield self.make_pool(failure_threshold=3)
        yield pool.addmany(["http://a.example/1", "http://b.example/ok"])
        yield self.drain(pool)
        first = self.clock.seconds()
        yield pool.set_status("http://a.example/1", 503)  # no reason given: the code's words
        yield pool.set_statuses([("http://b.example/ok", 503, "x" * 500)])
        answer = yield pool.why("http://a.example/1")
        assert answer["state"] == "waiting"
        assert answer["last_failure"] == {"reason": "http 503", "at": first, "failures": 1}
        assert len((yield pool.why("http://b.example/ok"))["last_failure"]["reason"]) == status.REASON_LENGTH
        self.clock.advance(5)
        yield self.drain(pool)
        with capturedLogs() as events:
            yield pool.set_statuses([("http://a.example/1", 404, "http 404: see http://ops:secret@x.example/\nnow"),
                                     ("http://b.example/ok", 200)])
        lines = [formatEvent(e) for e in events if e["log_level"] == LogLevel.debug]
        assert lines == ["http://a.example/1 failed for good: http 404: see http://ops:***@x.example/ now"]
        answer = yield pool.why("http://a.example/1")
        assert answer["state"] == "failed"
        assert answer["last_failure"] == {"reason": "http 404: see http://ops:***@x.example/ now", "at": first + 5,
                                          "failures": 2}
        assert "last_failure" not in (yield pool.why("http://b.example/ok"))
        records = yield self.export_all(pool)
        failed = [r for r in records if r.get("state") == "failed"]
        assert [r["last_failure"] for r in failed] == [answer["last_failure"]]
        assert all("last_failure" not in r for r in records if r.get("state") != "failed")

    @defer.inlineCallbacks
    def test_reopen_keeps_everything(self) -> Gen:
        """After a reopen: waiting URLs wait, done ones stay done, leases come back, hubs keep their span.

        On LevelDB one process owns the store, so its leases come back at
        once; on Redis a restarted node is one more node, and the old node's
        leases come back when they expire.
        """
        if not self.reopens:
            self.skipTest("the memory backend keeps nothing across a reopen")  # type: ignore[attr-defined]
        pool = yield self.make_pool(concurrency=10)
        yield pool.addmany([f"http://a.example/{i}" for i in range(5)])
        yield pool.set_hubs(["http://a.example/hub"], 3600)
        popped = yield self.drain(pool, 3)
        assert "http://a.example/hub" in popped
        done = [u for u in popped if not popped[u]][0]
        yield pool.set_status(done, 200)
        pool = yield self.make_pool(concurrency=10)
        yield pool.set_hubs(["http://a.example/hub"], 3600)
        stats = yield pool.stats()
        again = dict((yield self.drain(pool)))
        if self.backend == "redis":
            assert (stats["waiting"], stats["pending"], stats["done"]) == (3, 1, 1)
            assert len(again) == 3
            for url in again:
                yield pool.set_status(url, 200)
            self.clock.advance(61)  # past the old node's lease
            later = yield self.drain(pool)
            assert len(later) == 1
            again.update(later)
        else:
            assert (stats["waiting"], stats["pending"], stats["done"]) == (4, 0, 1)
        assert done not in again and "http://a.example/hub" not in again and len(again) == 4

    @defer.inlineCallbacks
    def test_host_whose_id_ends_in_ff(self) -> Gen:
        """A host whose 8-byte id ends in 0xff is popped like any other."""
        from spiderd.frontier.pool.keys import host_id

        host = next(f"h{i}.example" for i in range(100000) if host_id(f"h{i}.example").endswith(b"\xff"))
        pool = yield self.make_pool()
        yield pool.add(f"http://{host}/x")
        assert (yield self.drain(pool)) == {f"http://{host}/x": False}

    @defer.inlineCallbacks
    def test_max_urls_per_host(self) -> Gen:
        """A host takes max_urls_per_host new URLs in all, crawled or not (a calendar trap ends); re-adds are free."""
        pool = yield self.make_pool(max_urls_per_host=3, concurrency=5)
        assert (yield pool.addmany([f"http://trap.example/cal/{i}" for i in range(10)])) == 3
        assert (yield pool.add("http://other.example/1")) is True
        assert (yield pool.stats())["rejected"] == {"host-full": 7}
        popped = yield pool.pop(10)
        for url in popped:
            yield pool.set_status(url, 200)
        assert (yield pool.add("http://trap.example/cal/next")) is False  # the budget is spent, not the queue
        assert (yield pool.add("http://trap.example/cal/0", always=True)) is True  # a re-add is not new
        if self.reopens:
            pool = yield self.make_pool(max_urls_per_host=3)
            assert (yield pool.add("http://trap.example/cal/later")) is False  # the count survives a restart

    @defer.inlineCallbacks
    def crawl_step(self, pool: Any, url: str, links: list[str], code: int = 200, **kwargs: Any) -> Generator[Any, Any, int]:
        """Pop until ``url`` is leased, add ``links`` as its links, record ``code``; fires with the links added."""
        popped = yield self.drain(pool)
        assert url in popped, (url, popped)
        added = yield pool.addmany(links, parent=url, **kwargs)
        for other in popped:
            yield pool.set_status(other, code if other == url else 200)
        return added

    @defer.inlineCallbacks
    def test_max_hops(self) -> Gen:
        """With max_hops 2: a seed is hop 0, its links hop 1, theirs hop 2; a link past that is not queued, and
        counted; a URL found again keeps the count it was first queued with."""
        pool = yield self.make_pool(concurrency=10, max_hops=2)
        yield pool.add("http://a.example/seed")
        assert (yield self.crawl_step(pool, "http://a.example/seed", ["http://a.example/1"])) == 1
        assert (yield self.crawl_step(pool, "http://a.example/1", ["http://a.example/2", "http://a.example/3",
                                                                   "http://b.example/d"], detail=True)) == 3
        popped = yield self.drain(pool)
        assert sorted(popped) == ["http://a.example/2", "http://a.example/3", "http://b.example/d"]
        assert (yield pool.addmany(["http://a.example/far", "http://a.example/1"], parent="http://a.example/2")) == 0
        assert (yield pool.stats())["rejected"] == {"max-hops": 1}  # a known URL is not counted as past the limit
        for url in popped:
            yield pool.set_status(url, 200)
        assert (yield pool.size()) == 0
        yield pool.add("http://c.example/seed2")
        popped = yield self.drain(pool)
        assert (yield pool.addmany(["http://c.example/x"], parent="http://c.example/seed2")) == 1
        yield pool.set_status("http://c.example/seed2", 200)
        yield pool.add("http://c.example/x", always=True)  # already waiting at hop 1: it keeps that count
        assert (yield self.crawl_step(pool, "http://c.example/x", ["http://c.example/y"])) == 1
        assert (yield self.crawl_step(pool, "http://c.example/y", ["http://c.example/z"])) == 0

    @defer.inlineCallbacks
    def test_max_hops_kept_through_retries_expiry_and_reopen(self) -> Gen:
        """A URL's hop count stays with it when it is retried, when its lease runs out, and across a reopen."""
        pool = yield self.make_pool(concurrency=10, max_hops=1, pending_threshold=30)
        yield pool.add("http://a.example/seed")
        assert (yield self.crawl_step(pool, "http://a.example/seed", ["http://a.example/1"])) == 1
        assert (yield self.crawl_step(pool, "http://a.example/1", [], code=500)) == 0  # retried
        assert list((yield self.drain(pool))) == ["http://a.example/1"]
        self.clock.advance(31)  # its lease runs out: queued again
        if self.reopens:
            pool = yield self.make_pool(concurrency=10, max_hops=1, pending_threshold=30)
        assert (yield self.crawl_step(pool, "http://a.example/1", ["http://a.example/2"])) == 0
        assert (yield pool.stats())["rejected"] == {"max-hops": 1}

    @defer.inlineCallbacks
    def test_max_hops_per_site_and_within_hops(self) -> Gen:
        """A site's own limit (by registered domain) wins over the pool's; within_hops filters links that go
        elsewhere (the batcher) by the same rule, and counts those it drops."""
        pool = yield self.make_pool(concurrency=10, max_hops=3, site_hops={"b.example": 1})
        yield pool.add("http://a.example/seed")
        assert (yield self.crawl_step(pool, "http://a.example/seed", ["http://a.example/1"])) == 1
        links = ["http://a.example/2", "http://www.b.example/2", "http://c.example/2"]
        popped = yield self.drain(pool)
        assert (yield pool.within_hops("http://a.example/1", links)) == [links[0], links[2]]
        assert (yield pool.within_hops("http://a.example/seed", links)) == links  # not leased: hop 0
        assert (yield pool.addmany(links, parent="http://a.example/1")) == 2
        assert (yield pool.stats())["rejected"] == {"max-hops": 2}
        for url in popped:
            yield pool.set_status(url, 200)

    @defer.inlineCallbacks
    def test_site_hops_changed_at_run_time(self) -> Gen:
        """set_site_hops: the links found from then on are held to the sites' new limits."""
        pool = yield self.make_pool(concurrency=10, site_hops={"b.example": 1})
        yield pool.add("http://b.example/seed")
        assert (yield self.crawl_step(pool, "http://b.example/seed", ["http://b.example/1"])) == 1
        popped = yield self.drain(pool)
        assert (yield pool.within_hops("http://b.example/1", ["http://b.example/2"])) == []
        yield pool.set_site_hops({"b.example": 2})
        assert (yield pool.addmany(["http://b.example/2"], parent="http://b.example/1")) == 1
        for url in popped:
            yield pool.set_status(url, 200)

    @defer.inlineCallbacks
    def test_politeness_changed_at_run_time(self) -> Gen:
        """set_politeness: a host known takes its new concurrency and delay from its next request on, its
        next-allowed time already set kept; a host's table dropped goes."""
        pool = yield self.make_pool(delay=100.0, concurrency=1, overrides={"c.example": (50.0, 1)},
                                    pending_threshold=1000.0)
        yield pool.addmany([f"http://a.example/{i}" for i in range(4)])
        assert len((yield self.drain(pool))) == 1
        yield pool.set_politeness(PoliteRules(2.0, 2))
        assert (yield self.drain(pool)) == {}  # next allowed at +100 still
        self.clock.advance(100)
        assert len((yield self.drain(pool))) == 1  # beside the one in flight
        self.clock.advance(2)
        assert (yield self.drain(pool)) == {}  # two in flight now
        if hasattr(pool, "parts") or hasattr(pool, "channel"):
            for part in getattr(pool, "parts", [pool]):
                conf = yield part.channel.link.execute("HGET", part.channel.prefix + "conf", "c.example")
                assert conf is None

    @defer.inlineCallbacks
    def test_no_hop_limit(self) -> Gen:
        """Without a limit, links are queued whatever their depth, and within_hops keeps them all."""
        pool = yield self.make_pool(concurrency=10)
        yield pool.add("http://a.example/0")
        for i in range(5):
            assert (yield self.crawl_step(pool, f"http://a.example/{i}", [f"http://a.example/{i + 1}"])) == 1
        assert (yield pool.within_hops("http://a.example/5", ["http://a.example/6"])) == ["http://a.example/6"]
        assert (yield pool.stats())["rejected"] == {}

    @defer.inlineCallbacks
    def test_fetched_frees_the_host_slot_but_keeps_the_lease(self) -> Gen:
        """fetched() lets the host's next URL out while the first is still pending (being processed)."""
        pool = yield self.make_pool(concurrency=1)
        yield pool.addmany(["http://a.example/1", "http://a.example/2"])
        assert list((yield self.drain(pool))) == ["http://a.example/1"]
        assert (yield self.drain(pool)) == {}
        yield pool.fetched("http://a.example/1")
        assert list((yield self.drain(pool))) == ["http://a.example/2"]
        assert (yield pool.stats())["pending"] == 2
        yield pool.set_status("http://a.example/1", 200)
        yield pool.fetched("http://a.example/2")
        yield pool.fetched("http://a.example/2")  # twice is harmless
        yield pool.add("http://a.example/3")
        assert list((yield self.drain(pool))) == ["http://a.example/3"]
        assert (yield self.drain(pool)) == {}

    @defer.inlineCallbacks
    def test_claim(self) -> Gen:
        """claim() leases a waiting or unknown URL once; done, failed or leased URLs are not claimed."""
        pool = yield self.make_pool(concurrency=5, pending_threshold=30)
        yield pool.add("http://b.example/w")
        assert (yield pool.claim("http://b.example/w")) is True
        assert (yield pool.claim("http://b.example/w")) is False
        assert (yield self.drain(pool)) == {}
        assert (yield pool.claim("http://b.example/new")) is True
        assert (yield pool.stats())["pending"] == 2
        yield pool.set_status("http://b.example/w", 200)
        assert (yield pool.claim("http://b.example/w")) is False
        assert (yield pool.claim("ftp://bad")) is False
        self.clock.advance(31)
        assert (yield self.drain(pool)) == {"http://b.example/new": False}

    @defer.inlineCallbacks
    def test_claim_taken_again_by_its_holder(self) -> Gen:
        """A claim is taken again (renewed) by the URL that holds it, by no other URL and not without one."""
        pool = yield self.make_pool(concurrency=5, pending_threshold=30)
        yield pool.add("http://b.example/target")
        assert (yield pool.claim("http://b.example/target", by="http://b.example/from")) is True
        assert (yield pool.claim("http://b.example/target")) is False
        assert (yield pool.claim("http://b.example/target", by="http://b.example/other")) is False
        self.clock.advance(20)
        assert (yield pool.claim("http://b.example/target", by="http://B.example/from")) is True  # canonicalised
        assert (yield pool.stats())["pending"] == 1
        self.clock.advance(20)  # past the first claim's end, not the renewed one's
        assert (yield self.drain(pool)) == {}
        yield pool.set_status("http://b.example/target", 200)
        assert (yield pool.claim("http://b.example/target", by="http://b.example/from")) is False
        stats = yield pool.stats()
        assert (stats["pending"], stats["done"]) == (0, 1)

    @defer.inlineCallbacks
    def test_a_popped_url_is_not_claimed_by_its_redirecting_page(self) -> Gen:
        """A URL handed out by pop (being fetched itself) is not claimed, whoever asks."""
        pool = yield self.make_pool(concurrency=5)
        yield pool.add("http://b.example/target")
        assert list((yield self.drain(pool))) == ["http://b.example/target"]
        assert (yield pool.claim("http://b.example/target", by="http://b.example/from")) is False
        yield pool.set_status("http://b.example/target", 200)
        assert (yield pool.stats())["done"] == 1

    @defer.inlineCallbacks
    def test_set_statuses_with_a_checkpoint(self) -> Gen:
        """set_statuses records every outcome and the checkpoint; the checkpoint is kept until dropped."""
        pool = yield self.make_pool(concurrency=5)
        yield pool.addmany(["http://c.example/1", "http://c.example/2", "http://c.example/3"])
        popped = list((yield self.drain(pool)))
        assert (yield pool.checkpoint("items:x")) is None
        yield pool.set_statuses([(popped[0], 200), (popped[1], 500), (popped[0], 200)], checkpoint=("items:x", 2))
        assert (yield pool.checkpoint("items:x")) == 2
        yield pool.set_statuses([(popped[2], 200)], checkpoint=("items:x", 3))
        yield pool.set_statuses([], checkpoint=("items:y", 0))
        stats = yield pool.stats()
        assert (stats["done"], stats["waiting"], stats["pending"]) == (2, 1, 0)
        assert ((yield pool.checkpoint("items:x")), (yield pool.checkpoint("items:y"))) == (3, 0)
        if self.reopens:
            pool = yield self.make_pool(concurrency=5)
            assert (yield pool.checkpoint("items:x")) == 3
        yield pool.drop_checkpoint("items:x")
        assert (yield pool.checkpoint("items:x")) is None

    @defer.inlineCallbacks
    def test_seen_set_for_batched_urls(self) -> Gen:
        """seen_filter gives the never-seen URLs (canonical, once); seen_add records them as batched, for good."""
        pool = yield self.make_pool()
        yield pool.add("http://a.example/list")
        fresh = yield pool.seen_filter(["http://a.example/d1", "http://A.example/d1#x", "http://a.example/list", "ftp://x"])
        assert fresh == ["http://a.example/d1"]
        assert (yield pool.seen_add(fresh + ["http://a.example/d2"])) == 2
        assert (yield pool.seen_add(["http://a.example/d2"])) == 0
        assert (yield pool.seen_filter(["http://a.example/d1", "http://a.example/d3"])) == ["http://a.example/d3"]
        assert (yield pool.add("http://a.example/d1")) is False
        assert (yield pool.why("http://a.example/d2"))["state"] == "batched"
        assert (yield pool.stats())["batched"] == 2
        assert (yield pool.add("http://a.example/d2", always=True)) is True
        stats = yield pool.stats()
        assert (stats["batched"], stats["failed"], stats["waiting"]) == (1, 0, 2)

    @defer.inlineCallbacks
    def test_batch_numbers_unique_across_reopen(self) -> Gen:
        """next_batch hands out fresh numbers, in ranges, and never again after a reopen."""
        pool = yield self.make_pool()
        assert (yield pool.next_batch()) == 1
        assert (yield pool.next_batch(3)) == 2
        assert (yield pool.next_batch()) == 5
        if self.reopens:
            pool = yield self.make_pool()
            assert (yield pool.next_batch()) == 6

    @defer.inlineCallbacks
    def export_all(self, pool: Any, chunk: int = 2) -> Generator[Any, Any, list[dict[str, Any]]]:
        """Every record of an export, read ``chunk`` at a time."""
        reader = pool.export(chunk)
        records: list[dict[str, Any]] = []
        while True:
            got = yield reader.next()
            if got is None:
                return records
            assert len(got) <= chunk
            records.extend(got)

    @defer.inlineCallbacks
    def fill_for_export(self, pool: Any) -> Gen:
        """Waiting list and detail URLs, a retried one, a leased one, and one done, failed and batched each."""
        yield pool.addmany(["http://c.example/ok", "http://c.example/gone", "http://c.example/retry"])
        yield self.drain(pool)
        yield pool.set_status("http://c.example/ok", 200)
        yield pool.set_status("http://c.example/gone", 404)
        yield pool.set_status("http://c.example/retry", 503)
        yield pool.seen_add(["http://d.example/batched"])
        yield pool.addmany([f"http://a.example/{i}" for i in range(3)])
        yield pool.addmany(["http://b.example/d1", "http://b.example/d2"], detail=True)
        assert (yield pool.claim("http://e.example/leased")) is True

    @defer.inlineCallbacks
    def test_export(self) -> Gen:
        """export() gives waiting and pending URLs with state and kind, and finished URLs as fingerprints."""
        pool = yield self.make_pool(concurrency=10)
        assert (yield self.export_all(pool)) == []
        yield self.fill_for_export(pool)
        records = yield self.export_all(pool)
        urls = {r["url"]: (r["state"], r["kind"], r["failures"]) for r in records if "url" in r}
        assert urls == {
            **{f"http://a.example/{i}": ("waiting", "list", 0) for i in range(3)},
            "http://b.example/d1": ("waiting", "detail", 0),
            "http://b.example/d2": ("waiting", "detail", 0),
            "http://c.example/retry": ("waiting", "list", 1),
            "http://e.example/leased": ("pending", "list", 0),
        }
        finals = [r for r in records if "fp" in r]
        assert sorted(r["state"] for r in finals) == ["batched", "done", "failed"]
        assert len({r["fp"] for r in finals}) == 3 and all(len(r["fp"]) == 16 for r in finals)
        assert len({r["hash"] for r in finals}) == 1

    @defer.inlineCallbacks
    def test_import_restores_an_export(self) -> Gen:
        """import_states() on an empty pool: URLs wait again, finished fingerprints are finished; twice adds nothing."""
        pool = yield self.make_pool(concurrency=10)
        yield self.fill_for_export(pool)
        records = yield self.export_all(pool)
        other = yield self.make_other_pool()
        hash_kind = next(r["hash"] for r in records if "fp" in r)
        bad = [{"url": "ftp://x/", "state": "waiting"}, {"fp": "zz", "state": "done", "hash": hash_kind},
               {"fp": "0" * 16, "state": "done", "hash": "another"}, {"url": "http://a.example/", "state": "done"},
               "junk"]
        answer = yield other.import_states(records + bad)
        assert (answer["queued"], answer["restored"], answer["known"]) == (7, 3, 0)
        assert [index for index, _ in answer["rejected"]] == list(range(len(records), len(records) + len(bad)))
        assert "bad URL" in answer["rejected"][0][1] and "another" in answer["rejected"][2][1]
        stats = yield other.stats()
        assert [stats[k] for k in ("waiting", "pending", "done", "failed", "batched")] == [7, 0, 1, 1, 1]
        assert (yield other.why("http://c.example/ok"))["state"] == "done"
        assert (yield other.why("http://c.example/gone"))["state"] == "failed"
        assert (yield other.why("http://d.example/batched"))["state"] == "batched"
        assert (yield other.why("http://b.example/d1"))["kind"] == "detail"
        assert (yield other.add("http://c.example/ok")) is False
        again = yield other.import_states(records)
        assert (again["queued"], again["restored"], again["known"], again["rejected"]) == (0, 0, 10, [])

    @defer.inlineCallbacks
    def test_export_while_the_pool_changes(self) -> Gen:
        """An export goes on while URLs are added and popped between its chunks (not a snapshot, no error)."""
        pool = yield self.make_pool(concurrency=10)
        yield pool.addmany([f"http://a.example/{i}" for i in range(6)])
        reader = pool.export(2)
        seen = list((yield reader.next()))
        yield pool.addmany([f"http://a.example/new{i}" for i in range(3)])
        yield self.drain(pool, 4)
        while True:
            got = yield reader.next()
            if got is None:
                break
            seen.extend(got)
        assert {r["url"] for r in seen} >= {"http://a.example/0", "http://a.example/1"}


class MemoryPoolTests(PoolContract, TestCase):
    """The contract on the in-memory pool."""

    backend = "memory"
    reopens = False

    def open_pool(self, politeness: Politeness, options: dict[str, Any]) -> defer.Deferred[Any]:
        return defer.succeed(open_memory_pool(self.clock, politeness=politeness, **options))

    def open_other(self, politeness: Politeness) -> defer.Deferred[Any]:
        return defer.succeed(open_memory_pool(self.clock, politeness=politeness))


class LevelDBPoolTests(PoolContract, TestCase):
    """The contract on the LevelDB pool; a reopen closes the open pool first (one process owns the store)."""

    backend = "leveldb"

    def setUp(self) -> None:
        super().setUp()
        self.path = self.mktemp()

    @defer.inlineCallbacks
    def open_pool(self, politeness: Politeness, options: dict[str, Any]) -> Generator[Any, Any, Any]:
        for old in self.pools:
            yield old.close()
        return open_leveldb_pool(self.path, self.clock, politeness=politeness, **options)

    def open_other(self, politeness: Politeness) -> defer.Deferred[Any]:
        return defer.succeed(open_leveldb_pool(self.mktemp(), self.clock, politeness=politeness))

    @defer.inlineCallbacks
    def test_hops_in_queue_and_lease_values(self) -> Gen:
        """A URL at 1 hop or more has its count in its Q (waiting) or L (leased) value, 2 bytes; a seed and a pool
        without a limit have none; export and fsck read the values as before; a claim keeps the count."""
        from spiderd.frontier.pool import keys as k
        from spiderd.frontier.pool.fsck import check

        pool = yield self.make_pool(concurrency=10, max_hops=3)
        yield pool.add("http://a.example/seed")
        [(_, seed)] = list(pool._kv.iterator(prefix=k.QUEUE))
        assert seed == b"\x00http://a.example/seed"
        yield pool.pop(10)
        yield pool.addmany(["http://a.example/1", "http://b.example/2"], parent="http://a.example/seed")
        queued = sorted(value for _, value in pool._kv.iterator(prefix=k.QUEUE))
        assert queued == [b"\x00\x00\x01http://a.example/1", b"\x00\x00\x01http://b.example/2"]
        assert (yield pool.claim("http://b.example/2", by="http://a.example/seed")) is True
        leases = sorted(value for _, value in pool._kv.iterator(prefix=k.LEASE))
        assert leases == [b"\x00\x00\x00\x01http://b.example/2", b"\x00\x00http://a.example/seed"]
        assert check(pool._kv) == []
        exported = yield self.export_all(pool)
        assert sorted(r["url"] for r in exported) == ["http://a.example/1", "http://a.example/seed",
                                                      "http://b.example/2"]


class RedisKeys:
    """A key space of its own on the test Redis (skipped without one), deleted after the test."""

    def setUp(self) -> None:
        host, port = services.need_redis()
        super().setUp()  # type: ignore[misc]
        self.redis_url = f"redis://{host}:{port}/0"
        self.namespace = f"spiderd-test:{uuid.uuid4().hex[:12]}:"
        self.prefix = self.namespace + "spiderd:"
        self.admin = RedisLink(parse_redis_url(self.redis_url))
        self.addCleanup(self._delete_keys)  # type: ignore[attr-defined]

    def open_redis(self, clock: Clock, politeness: Politeness, options: dict[str, Any]) -> defer.Deferred[Any]:
        return open_redis_pool(self.redis_url, clock, prefix=self.prefix, namespace=self.namespace,
                               politeness=politeness, **options)

    @defer.inlineCallbacks
    def keys(self) -> Generator[Any, Any, list[str]]:
        """Every key of this test."""
        cursor, found = "0", set()
        while True:
            cursor, batch = yield self.admin.execute("SCAN", cursor, "MATCH", self.namespace + "*", "COUNT", "1000")
            found.update(batch)
            if cursor == "0":
                return sorted(found)

    @defer.inlineCallbacks
    def _delete_keys(self) -> Gen:
        keys = yield self.keys()
        if keys:
            yield self.admin.execute("DEL", *keys)
        yield self.admin.close()


class RedisPoolTests(RedisKeys, PoolContract, TestCase):
    """The contract on the Redis pool; a reopen is a restarted node: a new pool object on the same keys."""

    backend = "redis"

    @defer.inlineCallbacks
    def open_pool(self, politeness: Politeness, options: dict[str, Any]) -> Generator[Any, Any, Any]:
        for old in self.pools:
            yield old.close()
        return (yield self.open_redis(self.clock, politeness, options))

    @defer.inlineCallbacks
    def test_hop_counts_dropped_at_a_final_status(self) -> Gen:
        """Hop counts live in P h:<bucket> while a URL is active (not for a seed, nor without a limit): a done or
        failed URL drops its count, so finished URLs cost nothing."""
        pool = yield self.make_pool(concurrency=10, max_hops=3)
        yield pool.add("http://a.example/seed")
        assert [key for key in (yield self.keys()) if ":h:" in key] == []
        assert (yield self.crawl_step(pool, "http://a.example/seed", ["http://a.example/1", "http://a.example/2"]))
        assert [key for key in (yield self.keys()) if ":h:" in key]
        popped = yield self.drain(pool)
        yield pool.set_status("http://a.example/1", 200)
        yield pool.set_status("http://a.example/2", 404)
        assert sorted(popped) == ["http://a.example/1", "http://a.example/2"]
        assert [key for key in (yield self.keys()) if ":h:" in key] == []

    @defer.inlineCallbacks
    def test_host_groups_are_recorded(self) -> Gen:
        """set_host_group keeps a host's address in P group for every node; a host told its own name leaves it."""
        pool = yield self.make_pool()
        yield pool.set_host_group("a.example", "192.0.2.1")
        yield pool.set_host_group("b.example:8080", "192.0.2.1")
        yield pool.set_host_group("a.example", "a.example")
        assert (yield self.admin.execute("HGETALL", self.prefix + "group")) == ["b.example:8080", "192.0.2.1"]

    def open_other(self, politeness: Politeness) -> defer.Deferred[Any]:
        other = self.namespace + "other:"
        return open_redis_pool(self.redis_url, self.clock, prefix=other + "spiderd:", namespace=other,
                               politeness=politeness)


class RedisEvalPoolTests(RedisPoolTests):
    """The contract on the Redis pool as it runs on a Redis before 7.0 (no functions): each script, and the pair a
    pop sends with the statuses waiting (statuspop), as an EVALSHA script of its own."""

    def setUp(self) -> None:
        super().setUp()
        scripts_only = RedisLink._eval_scripts
        self.patch(RedisLink, "_eval_scripts", lambda link, conn, functions: scripts_only(link, conn, False))

    @defer.inlineCallbacks
    def test_scripts_run_by_evalsha(self) -> Gen:
        """No FCALL: every call is an EVALSHA of a script Redis has (SCRIPT LOAD at connecting), statuspop too."""
        pool = yield self.make_pool(concurrency=2)
        commands: list[str] = []
        send = pool.channel.link._send
        pool.channel.link._send = lambda *args: commands.append(args[0]) or send(*args)
        scripts: list[str] = []
        run = pool.channel.link.run
        pool.channel.link.run = lambda script, args: scripts.append(script.name) or run(script, args)
        yield pool.addmany([f"http://a.example/{i}" for i in range(4)])
        acks = [pool.set_status(url, 200) for url in (yield pool.pop(2))]  # the second waits for the first
        popped = yield pool.pop(2)  # ... and goes with this pop, which sees its host slot freed
        yield defer.gatherResults(acks)
        assert scripts == ["add", "pop", "status", "statuspop"] and set(commands) == {"EVALSHA"}
        assert len(popped) == 2 and (yield pool.stats())["done"] == 2


def test_prefix_end_carries() -> None:
    """The end of a key range carries over 0xff bytes (a host id may end in them)."""
    from spiderd.frontier.pool.keys import prefix_end

    assert prefix_end(b"Qa") == b"Qb"
    assert prefix_end(b"Q\x01\xff\xff") == b"Q\x02"
    assert prefix_end(b"\xff\xff") is None


def test_split_ratios_checked() -> None:
    """Kind ratios outside 0..1, or adding up to more than 1, are refused."""
    import pytest

    from spiderd.frontier.pool.split import KindSplit

    for ratios in ((-0.1, 0.0), (0.0, 1.5), (0.6, 0.5)):
        with pytest.raises(ValueError):
            KindSplit(*ratios)


class RedisClusterPoolTests(ClusterCase, PoolContract, TestCase):
    """The contract on the partitioned pool over a real 3-master Redis Cluster (a key space of its own per test;
    the cluster is this class's and goes at its end)."""

    backend = "redis"

    def setUp(self) -> None:
        super().setUp()
        self.namespace = f"t{uuid.uuid4().hex[:12]}:"

    @defer.inlineCallbacks
    def open_pool(self, politeness: Politeness, options: dict[str, Any]) -> Generator[Any, Any, Any]:
        for old in self.pools:
            yield old.close()
        return (yield open_redis_pool(self.cluster.url, self.clock, prefix=self.namespace + "spiderd:",
                                      namespace=self.namespace, politeness=politeness, **options))

    def open_other(self, politeness: Politeness) -> defer.Deferred[Any]:
        other = self.namespace + "other:"
        return open_redis_pool(self.cluster.url, self.clock, prefix=other + "spiderd:", namespace=other,
                               politeness=politeness)

    # A group lives in its hosts' domain partition: the contract's three hosts of one address are of one partition
    # (a, b and q.example: partition 2 of 12; c.example is of partition 8).
    three_hosts = "abq"

    @defer.inlineCallbacks
    def test_hosts_of_one_address_are_grouped_per_partition(self) -> Gen:
        """Hosts of one address whose domains are in different partitions are grouped per partition: a and b
        (partition 2) share one request in flight, c (partition 8) has its own group's."""
        assert {partition_of(f"{h}.example", 12) for h in "ab"} == {2} and partition_of("c.example", 12) == 8
        pool = yield self.make_pool(delay=0.0, concurrency=1)
        yield pool.addmany([f"http://{h}.example/{i}" for h in "abc" for i in range(2)])
        for host in ("a.example", "b.example", "c.example"):
            yield pool.set_host_group(host, "192.0.2.1")
        first = self.hosts_of((yield self.drain(pool)))
        assert len(first) == 2 and first[0] in ("a.example", "b.example") and first[1] == "c.example", first
        assert (yield self.drain(pool)) == {}
