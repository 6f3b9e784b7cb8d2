"""The seed timer (cron, one node per firing) and the recrawler (budget, intervals), on a Clock."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, Generator

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial.unittest import TestCase

from spiderd.config import settings as cfg
from spiderd.core.cron import CronError, parse
from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool import open_memory_pool
from spiderd.frontier.scheduler import RecrawlPolicy, Recrawler, SeedTimer, budget

from .test_pool_contract import RedisKeys

Gen = Generator[Any, Any, None]
UTC = timezone.utc
START = datetime(2024, 3, 10, 22, 0, 0, tzinfo=UTC).timestamp()  # a Sunday
SEEDS = ["http://a.example/", "http://b.example/"]


def at(text: str) -> float:
    """Epoch seconds of a UTC time written ``YYYY-MM-DD HH:MM:SS``."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()


# -- cron expressions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression, first, second",
    [
        ("0 10 1 * * ?", "2024-03-11 01:10:00", "2024-03-12 01:10:00"),  # seed 002: 01:10 every night
        ("30 */15 * * * ?", "2024-03-10 22:00:30", "2024-03-10 22:15:30"),
        ("0 0 12 ? * 2", "2024-03-11 12:00:00", "2024-03-18 12:00:00"),  # Quartz 2 = Monday
        ("0 0 12 ? * MON-FRI", "2024-03-11 12:00:00", "2024-03-12 12:00:00"),
        ("0 0 12 ? * 6#3", "2024-03-15 12:00:00", "2024-04-19 12:00:00"),  # third Friday
        ("0 0 12 ? * 6L", "2024-03-29 12:00:00", "2024-04-26 12:00:00"),  # last Friday
        ("0 0 12 1 * ? 2025", "2025-01-01 12:00:00", "2025-02-01 12:00:00"),
        ("10 1 * * 1", "2024-03-11 01:10:00", "2024-03-18 01:10:00"),  # classic cron: 1 = Monday
    ],
)
def test_cron_quartz_and_classic(expression: str, first: str, second: str) -> None:
    """Quartz (seconds first, ``?``, Sunday = 1) and five-field cron fire when their authors meant."""
    cron = parse(expression, UTC)
    assert cron.next_after(START) == at(first)
    assert cron.next_after(at(first)) == at(second)


@pytest.mark.parametrize(
    "expression, words",
    [
        ("0 10 1 ? * ?", "not both"),
        ("0 0 12 ? * 8", "1 (Sunday) to 7"),
        ("61 * * * * ?", "not a valid"),
        ("* * * *", "5 (cron) or 6-7"),
        ("0 0 0 30 2 ?", "never fires"),
        ("0 0 12 1 * ? 1999", "never fires"),
    ],
)
def test_bad_cron(expression: str, words: str) -> None:
    """A bad expression says what is wrong."""
    with pytest.raises(CronError, match=re.escape(words)):
        parse(expression, UTC)


def test_bad_cron_is_a_config_error() -> None:
    """A bad seed_cron is a ConfigError naming pool.seed_cron at load, before anything starts."""
    with pytest.raises(cfg.ConfigError, match=r"^x.toml: pool.seed_cron: .*not both"):
        cfg.from_dict({"pool": {"seed_cron": "0 10 1 ? * ?"}}, "x.toml")
    assert cfg.from_dict({"pool": {"seed_cron": "0 10 1 * * ?"}}).pool.seed_cron == "0 10 1 * * ?"


# -- the seed timer -----------------------------------------------------------------------


class CountingPool:
    """A memory pool that counts the seed injections (add with always=True) and can be told to fail."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self.injections = 0
        self.fail_next = False

    def addmany(self, urls: Any, always: bool = False, detail: bool = False) -> Any:
        if always:
            self.injections += 1
            if self.fail_next:
                self.fail_next = False
                return defer.fail(RuntimeError("the pool is on fire"))
        return self._pool.addmany(urls, always, detail)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


class SeedTimerTests(TestCase):
    """The timer on a Clock and the memory pool (one node)."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.pool = CountingPool(open_memory_pool(self.clock, politeness=Politeness(0.0, 10)))
        self.successResultOf(self.pool.set_seeds(SEEDS))  # as SeedService.load does at start
        self.timer = SeedTimer(self.clock, self.pool, parse("0 10 1 * * ?", UTC))
        self.timer.startService()
        self.addCleanup(self.timer.stopService)

    def test_fires_at_the_cron_time_and_rearms(self) -> None:
        """Nothing before 01:10:00; then the seeds are queued again, even done ones; then every night."""
        self.successResultOf(self.pool.addmany(SEEDS))
        popped = self.successResultOf(self.pool.pop(10))
        for url in popped:
            self.successResultOf(self.pool.set_status(url, 200))
        self.assertEqual(self.timer.next_firing, at("2024-03-11 01:10:00"))
        self.clock.advance(at("2024-03-11 01:10:00") - START - 0.001)
        self.assertEqual(self.pool.injections, 0)
        self.clock.advance(0.001)
        self.assertEqual(self.pool.injections, 1)
        stats = self.successResultOf(self.pool.stats())
        self.assertEqual((stats["waiting"], stats["done"]), (2, 0))
        self.assertEqual(self.timer.next_firing, at("2024-03-12 01:10:00"))
        for _ in range(3):
            self.clock.advance(86400)
        self.assertEqual(self.pool.injections, 4)

    def test_a_late_firing_injects_once(self) -> None:
        """A reactor that wakes days late fires once, then waits for the next firing after now."""
        self.clock.advance(5 * 86400)
        self.assertEqual(self.pool.injections, 1)
        self.assertEqual(self.timer.next_firing, at("2024-03-16 01:10:00"))

    def test_a_failing_firing_is_logged_and_the_timer_goes_on(self) -> None:
        """An injection that fails is logged; the next firing injects."""
        self.pool.fail_next = True
        self.clock.advance(at("2024-03-11 01:10:00") - START)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.clock.advance(86400)
        self.assertEqual(self.pool.injections, 2)
        self.assertEqual(self.successResultOf(self.pool.stats())["waiting"], 2)

    def test_seeds_are_read_at_each_firing(self) -> None:
        """The pool's seeds at firing time are injected: a reload (set_seeds again) replaces the embedded pool's."""
        timer = SeedTimer(self.clock, self.pool, parse("0 0 * * * ?", UTC))
        timer.startService()
        self.addCleanup(timer.stopService)
        self.successResultOf(self.pool.set_seeds(["http://c.example/", "http://d.example/"]))
        self.clock.advance(3600)
        self.assertEqual(self.successResultOf(self.pool.seed_urls()), ["http://c.example/", "http://d.example/"])
        self.assertEqual(self.successResultOf(self.pool.stats())["waiting"], 2)


class SeedTimerNodesTests(RedisKeys, TestCase):
    """Three nodes on one Redis, each with its timer: exactly one injects per firing."""

    @defer.inlineCallbacks
    def test_exactly_one_node_injects_per_firing(self) -> Gen:
        """Every node fires; the one whose SET NX succeeds injects, the others log and skip."""
        clock = Clock()
        clock.advance(START)
        nodes, timers = [], []
        for _ in range(3):
            pool = yield self.open_redis(clock, Politeness(0.0, 10), {"pending_threshold": 60.0})
            self.addCleanup(pool.close)
            nodes.append(CountingPool(pool))
            yield pool.set_seeds(SEEDS)
            timers.append(SeedTimer(clock, nodes[-1], parse("0 10 1 * * ?", UTC)))
        for timer in timers:
            timer.startService()
            self.addCleanup(timer.stopService)
        for day in range(3):
            clock.advance(at("2024-03-11 01:10:00") + day * 86400 - clock.seconds())
            yield defer.gatherResults([timer.settled() for timer in timers])
            self.assertEqual(sum(node.injections for node in nodes), day + 1)
        self.assertEqual((yield nodes[0].stats())["waiting"], 2)
        claims = yield self.admin.execute("KEYS", self.prefix + "cron:*")
        self.assertEqual(len(claims), 3)


# -- recrawl ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "waiting, fetches, expected",
    [
        (0, 0, 100),  # nothing waits: top the queues up to the batch
        (40, 0, 60),
        (5000, 0, 0),  # a backlog and nothing fetched yet: wait
        (5000, 200, 50),  # a backlog: a quarter of the fetches
        (5000, 10_000, 100),  # never more than the batch
        (90, 200, 50),
    ],
)
def test_budget(waiting: int, fetches: int, expected: int) -> None:
    """The recrawl budget: ratio x fetches while new URLs wait, topped up to the batch when the queues run low."""
    assert budget(waiting, fetches, 100, 0.25) == expected


def test_policy_from_sites() -> None:
    """Intervals per registered domain and kind; sites sharing a domain share the shortest; 0 is never."""
    sites = cfg.from_dict({"batch": {"targets": []}, "sites": [
        {"allowed_hosts": ["www.shop.example.co.uk", "*.other.example"], "recrawl_list": 3600},
        {"allowed_hosts": ["shop.example.co.uk:8080"], "recrawl_list": 600, "recrawl_detail": 86400},
        {"allowed_hosts": ["never.example"]},
    ]}).sites
    policy = RecrawlPolicy.from_sites(sites)
    assert dict(policy.intervals) == {("example.co.uk", "list"): 600, ("other.example", "list"): 3600,
                                      ("example.co.uk", "detail"): 86400}
    assert [c[1] for c in policy.cutoffs(1000.0)] == ["list", "list", "detail"]
    assert {c[0] for c in policy.cutoffs(1000.0, 0)[:2]} == {"example.co.uk", "other.example"}
    assert policy.cutoffs(1000.0, 0)[:2] != policy.cutoffs(1000.0, 1)[:2]


class RecrawlerTests(TestCase):
    """The recrawler on a Clock and the memory pool."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.policy = RecrawlPolicy({("a.example", "list"): 3600.0, ("a.example", "detail"): 7200.0})
        self.pool = open_memory_pool(self.clock, politeness=Politeness(0.0, 1000), pending_threshold=60,
                                     recrawl=self.policy.pairs())
        self.fetches = 0
        self.recrawler = Recrawler(self.clock, self.pool, self.policy, lambda: self.fetches, every=60, batch=10,
                                   ratios={"list": 0.5, "detail": 0.2})
        self.recrawler.startService()
        self.addCleanup(self.recrawler.stopService)

    def crawl(self, urls: list[str], detail: bool = False) -> None:
        self.successResultOf(self.pool.addmany(urls, detail=detail))
        for url in self.successResultOf(self.pool.pop(len(urls))):
            self.successResultOf(self.pool.set_status(url, 200))
            self.fetches += 1

    def test_pages_come_back_after_their_interval(self) -> None:
        """Nothing is queued again before the interval; then the due pages, within the batch per run."""
        self.crawl([f"http://a.example/l{i}" for i in range(15)])
        self.clock.advance(3600 - 60)
        self.assertEqual(self.recrawler.queued, 0)
        self.clock.advance(60)
        self.assertEqual(self.recrawler.queued, 10)
        self.assertEqual(self.successResultOf(self.pool.stats())["waiting"], 10)
        self.clock.advance(60)  # the queue is full (10 waiting) and nothing was fetched: no room
        self.assertEqual(self.recrawler.queued, 10)
        self.crawl_waiting()
        self.clock.advance(60)
        self.assertEqual(self.recrawler.queued, 15)

    def crawl_waiting(self) -> None:
        for url in self.successResultOf(self.pool.pop(100)):
            self.successResultOf(self.pool.set_status(url, 200))
            self.fetches += 1

    def test_new_urls_keep_their_share(self) -> None:
        """With a backlog of new URLs, recrawls get at most ratio x the fetches of the last period."""
        self.crawl([f"http://a.example/l{i}" for i in range(10)])
        self.successResultOf(self.pool.addmany([f"http://a.example/new{i}" for i in range(100)], detail=True))
        self.clock.advance(3600)
        self.assertEqual(self.recrawler.queued, 5)  # 10 fetches in the period, ratio 0.5

    def test_each_kind_keeps_to_its_ratio(self) -> None:
        """With a backlog, recrawled list pages get mod_list x the fetches and detail pages mod_detail x them."""
        self.crawl([f"http://a.example/l{i}" for i in range(20)])
        self.crawl([f"http://a.example/d{i}" for i in range(20)], detail=True)  # 40 fetches in this period
        self.successResultOf(self.pool.addmany([f"http://b.example/new{i}" for i in range(100)], detail=True))
        self.clock.advance(7200)
        self.assertEqual(self.recrawler.queued_by_kind, {"list": 10, "detail": 8})  # capped by the batch of 10

    def test_low_queues_are_topped_up_list_pages_first(self) -> None:
        """With nothing waiting, a run queues up to the batch: due list pages first, then detail pages."""
        self.crawl([f"http://a.example/l{i}" for i in range(4)])
        self.crawl([f"http://a.example/d{i}" for i in range(20)], detail=True)
        self.clock.advance(7200)
        self.assertEqual(self.recrawler.queued_by_kind, {"list": 4, "detail": 6})
        popped = self.successResultOf(self.pool.pop(100))
        self.assertEqual(sorted(list(popped)[:4]), [f"http://a.example/l{i}" for i in range(4)])

    def test_a_failing_run_is_logged_and_the_next_runs(self) -> None:
        """A run whose pool call fails is logged; the loop goes on."""
        self.crawl(["http://a.example/l0"])
        real = self.pool.size
        self.pool.size = lambda: defer.fail(RuntimeError("gone"))  # type: ignore[method-assign]
        self.clock.advance(3600)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)
        self.pool.size = real  # type: ignore[method-assign]
        self.clock.advance(60)
        self.assertEqual(self.recrawler.queued, 1)


def test_wired_by_tap(tmp_path: Any) -> None:
    """seed_cron adds the seed timer, a site's recrawl interval the recrawler and the pool's crawled sets; the
    kinds' shares of a pop (list_ratio, detail_ratio) reach the pool."""
    from twisted.internet import reactor

    from spiderd import tap

    raw = {"spiderd": {"data_dir": str(tmp_path)}, "parse": {"workers": 0}, "batch": {"targets": []},
           "pool": {"backend": "memory", "seed_cron": "0 10 1 * * ?", "list_ratio": 0.3, "detail_ratio": 0.6},
           "store": {"url": "none"},
           "sites": [{"allowed_hosts": ["www.a.example"], "recrawl_list": 60}]}
    named = tap.build(cfg.from_dict(raw), reactor).namedServices
    assert isinstance(named["seed-timer"], SeedTimer) and isinstance(named["recrawler"], Recrawler)
    assert named["pool"].pool.crawled.kept == {"a.example": frozenset({0})}
    assert named["pool"].pool.split.ratios == (0.3, 0.6)
    raw["pool"] = {"backend": "memory"}
    raw["sites"] = [{"allowed_hosts": ["www.a.example"]}]
    named = tap.build(cfg.from_dict(raw), reactor).namedServices
    assert "seed-timer" not in named and "recrawler" not in named
