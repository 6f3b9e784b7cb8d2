"""Settings a reload changes while a node crawls (time a Clock the test advances, the I/O real: loopback sites).

``[fetch]``'s politeness keys: the hosts known take the new delay and concurrency from their next request on, the
request in flight and the next-allowed time already set are kept, and nothing is lost (LevelDB and Redis pools).
``[sitemaps]``: the next read of a host's sitemaps follows the new keys, at the new ``refresh``."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable

from twisted.internet import defer, reactor, task
from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial import unittest
from twisted.web import resource, server

from spiderd import tap
from spiderd.config import settings as cfg
from spiderd.core.rules import AdaptiveDelay, PoliteRules
from spiderd.engine.politeness import Politeness
from spiderd.ops.reload import ReloadService

from . import services
from .helpers import ClockedReactor, node_toml

START = 1_000_000.0
ITEMS = 4


class Timed(resource.Resource):
    """``/list`` links to ``/item/1`` .. ``/item/4``; logs each request's path and clock time (from START); items
    of ``held`` are answered when the test releases them."""

    isLeaf = True

    def __init__(self, clock: Clock, held: tuple[int, ...] = (1, 2), links: int = ITEMS) -> None:
        super().__init__()
        self.clock = clock
        self.log: list[tuple[str, float]] = []
        self.held: dict[int, server.Request] = {}
        self.holding = set(held)
        self.links = links
        self.files: dict[str, bytes] = {}  # robots.txt, sitemaps

    def render_GET(self, request: server.Request) -> bytes | int:
        path = request.path.decode()
        self.log.append((path, self.clock.seconds() - START))
        if path in self.files:
            request.setHeader(b"content-type", b"text/plain" if path.endswith(".txt") else b"application/xml")
            return self.files[path]
        request.setHeader(b"content-type", b"text/html")
        if path == "/list":
            return "".join(f"<a href='/item/{n}'>{n}</a>" for n in range(1, self.links + 1)).encode()
        if not path.startswith("/item/"):
            request.setResponseCode(404)
            return b"no"
        n = int(path.rpartition("/")[2])
        if n in self.holding:
            self.held[n] = request
            return server.NOT_DONE_YET
        return f"<html><body><h1>Item {n}</h1></body></html>".encode()

    def release(self, n: int) -> None:
        self.held.pop(n).finish()


SHOP = {"name": "shop", "allowed_hosts": ["127.0.0.1"], "list_urls": ["/list$"], "detail_urls": [r"/item/\d+$"],
        "fields": {"title": "//h1/text()"}}


def toml(data_dir: Path, root: str, pool: dict[str, Any], fetch: dict[str, Any] | None = None,
         site: dict[str, Any] | None = None, **sections: dict[str, Any]) -> str:
    """The node's configuration: ``fetch`` and ``site`` (keys of the shop's table) added, ``sections`` more tables."""
    return node_toml({
        "spiderd": {"data_dir": str(data_dir), "log_interval": 3600},
        "pool": {"seeds": [f"{root}list"], "pending_threshold": 200000, **pool},
        "fetch": {"robots": False, "timeout": 100000, **(fetch or {})},
        "parse": {"workers": 0}, "batch": {"targets": []}, "store": {"url": "none"}, "api": {"port": 0},
        **sections}, [{**SHOP, **(site or {})}])


def host_table(host: str, delay: float, concurrency: int) -> dict[str, Any]:
    """``[fetch]``'s table of one host (its politeness key: host and port)."""
    return {"hosts": {host: {"delay": delay, "concurrency": concurrency}}}


SLOW_DEFAULTS = {"per_host_delay": 100, "per_host_concurrency": 1}
FAST_DEFAULTS = {"per_host_delay": 2, "per_host_concurrency": 2}


class ClockedNodeCase(unittest.TestCase):
    """A node (built by tap, as twistd builds it) on a Clock, crawling the loopback shop ``self.shop``."""

    timeout = 60

    def site(self) -> Timed:
        return Timed(self.clock)

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.shop = self.site()
        factory = server.Site(self.shop)
        factory.noisy = False
        port = reactor.listenTCP(0, factory, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.host = f"127.0.0.1:{port.getHost().port}"
        self.root = f"http://{self.host}/"
        self.data = Path(tempfile.mkdtemp(prefix="spiderd-polite-"))
        self.addCleanup(shutil.rmtree, self.data, True)
        self.file = self.data / "spiderd.toml"

    def pool_section(self) -> dict[str, Any]:
        return {"backend": "leveldb"}

    def write(self, fetch: dict[str, Any]) -> None:
        self.file.write_text(toml(self.data, self.root, self.pool_section(), fetch))

    def start(self) -> tuple[Any, ReloadService]:
        top = tap.build(cfg.with_overlay(cfg.load(str(self.file))), ClockedReactor(reactor, self.clock))
        top.startService()
        self.addCleanup(self.stop, top)
        reload = ReloadService(reactor, top.getServiceNamed("config"), install=False)
        return top, reload

    @defer.inlineCallbacks
    def stop(self, top: Any) -> Any:
        """Stop the node, letting clock time pass while it drains (its writers' timers are the Clock's)."""
        for n in list(self.shop.held):
            self.shop.release(n)
        stopped = top.stopService()
        for _ in range(600):
            if stopped.called:
                break
            self.clock.advance(1.0)
            yield task.deferLater(reactor, 0.01, lambda: None)
        yield stopped

    @defer.inlineCallbacks
    def finish(self, crawler: Any) -> Any:
        """Let clock time pass (the items' checkpoints, the statuses' flush) until the crawl has finished."""
        for _ in range(600):
            if crawler.finished.called:
                return
            self.clock.advance(1.0)
            yield task.deferLater(reactor, 0.01, lambda: None)
        raise AssertionError("the crawl did not finish")

    @defer.inlineCallbacks
    def settle(self, predicate: Callable[[], bool], real_seconds: float = 20.0) -> Any:
        """Turn the real reactor and run the Clock's due calls until ``predicate()``; no clock time passes."""
        for _ in range(int(real_seconds / 0.005)):
            self.clock.advance(0)
            if predicate():
                return
            yield task.deferLater(reactor, 0.005, lambda: None)
        raise AssertionError(f"timed out waiting; requests: {self.shop.log}")

    @defer.inlineCallbacks
    def run_to(self, crawler: Any, at: float, requests: int) -> Any:
        """Let clock time pass a second at a time up to ``at`` (from START), the crawler settled at each second
        (``calm``), until ``requests`` have come."""
        calm = self.calm(crawler)
        while True:
            yield self.settle(calm)
            if self.clock.seconds() - START >= at:
                break
            self.clock.advance(1.0)
        yield self.settle(lambda: len(self.shop.log) >= requests)

    def calm(self, crawler: Any) -> Callable[[], bool]:
        """Nothing in flight but the held items, nothing being popped."""
        return lambda: crawler.fetching == len(self.shop.held) and not crawler._popping


class LivePolitenessTests(ClockedNodeCase):
    """A node crawling one host 100 s apart, one request at a time, is reloaded to 2 s apart, two at a time."""

    @defer.inlineCallbacks
    def crawl_with_reload(self, before: dict[str, Any], after: dict[str, Any]) -> Any:
        """Crawl with ``before`` until item 1 is in flight, reload with ``after``, crawl to the end; the pool's
        stats, the node and its reload."""
        self.write(before)
        top, reload = self.start()
        crawler = top.getServiceNamed("crawler")
        yield self.settle(lambda: len(self.shop.log) == 1)
        yield self.run_to(crawler, 100, 2)  # item 1 at 100 s, held in flight
        self.write(after)
        with capturedLogs() as events:
            self.assertTrue((yield reload.reload()))
        said = " ".join(formatEvent(e) for e in events)
        self.assertIn("no restart needed", said)
        yield self.run_to(crawler, 200, 3)  # the next-allowed time set at 100 s is kept; item 2 goes beside item 1
        self.shop.release(2)
        yield self.run_to(crawler, 204, 5)
        self.shop.release(1)
        yield self.finish(crawler)
        stats = yield crawler.pool.stats()
        self.assertEqual(self.shop.log, [("/list", 0.0), ("/item/1", 100.0), ("/item/2", 200.0),
                                         ("/item/3", 202.0), ("/item/4", 204.0)])
        self.assertEqual((stats["waiting"], stats["pending"], stats["failed"], stats["done"]), (0, 0, 0, 5))
        return top, reload, said

    @defer.inlineCallbacks
    def test_new_default_delay_and_concurrency(self) -> Any:
        """``per_host_delay`` 100 -> 2 and ``per_host_concurrency`` 1 -> 2: item 2 starts while item 1 is still in
        flight, then one item each 2 s; the status names no restart."""
        top, _, said = yield self.crawl_with_reload(SLOW_DEFAULTS, FAST_DEFAULTS)
        self.assertIn("fetch.per_host_delay", said)
        self.assertEqual(top.getServiceNamed("config").status()["restart_needed"], [])

    @defer.inlineCallbacks
    def test_new_host_table(self) -> Any:
        """The same by the host's own ``[fetch.hosts]`` table."""
        yield self.crawl_with_reload(host_table(self.host, 100, 1), host_table(self.host, 2, 2))


class OnRedis:
    """A ClockedNodeCase's node on the Redis pool (a key space of its own on the test Redis, deleted after)."""

    namespace = redis_url = ""

    def setUp(self) -> None:
        host, port = services.need_redis()
        super().setUp()  # type: ignore[misc]  # (mixed into a TestCase)
        self.namespace = f"spiderd-test:{uuid.uuid4().hex[:12]}:"
        self.redis_url = f"redis://{host}:{port}/0"
        self.addCleanup(services.delete_redis_keys, self.redis_url, self.namespace + "*")  # type: ignore[attr-defined]

    def pool_section(self) -> dict[str, Any]:
        return {"backend": "redis", "redis_url": self.redis_url, "redis_prefix": self.namespace + "spiderd:",
                "redis_namespace": self.namespace}


class RedisLivePolitenessTests(OnRedis, LivePolitenessTests):
    """The same on the Redis pool: the host tables are rewritten in ``P conf``, for every node, and one a reload
    drops is deleted there."""

    @defer.inlineCallbacks
    def test_new_host_table(self) -> Any:
        """The host's table in ``P conf`` follows the file; a reload without it deletes it."""
        top, reload, _ = yield self.crawl_with_reload(host_table(self.host, 100, 1), host_table(self.host, 2, 2))
        pool = top.getServiceNamed("crawler").pool
        conf = self.namespace + "spiderd:conf"
        self.assertEqual((yield pool.channel.link.execute("HGET", conf, self.host)), "2.0 2")
        self.write(FAST_DEFAULTS)
        self.assertTrue((yield reload.reload()))
        self.assertIsNone((yield pool.channel.link.execute("HGET", conf, self.host)))


class ConfigureTests(unittest.SynchronousTestCase):
    """``Politeness.configure``, sans I/O."""

    def test_known_hosts_take_the_new_rules_and_keep_their_turns(self) -> None:
        """A known host takes its new delay and concurrency (its Crawl-delay still a floor), keeps its next-allowed
        time and requests in flight, and is queued when it has a free slot now; a new host takes the new
        defaults; the adaptive rules follow; the hosts whose table went are named."""
        politeness = Politeness(delay=10.0, concurrency=1, overrides={"b.test": (1.0, 1)})
        a = politeness.slot("a.test")
        a.waiting = 2
        politeness.requeue(a)
        self.assertIs(politeness.ready(0.0), a)
        politeness.taken(a, 1, 0.0)
        politeness.set_robots_delay("b.test", 5.0)
        b = politeness.slot("b.test")
        self.assertIsNone(politeness.ready(10.0))  # a: its one slot is busy
        rules = PoliteRules(3.0, 2, {"b.test": (4.0, 3)}, AdaptiveDelay(2.0), {"c.test": AdaptiveDelay(1.0, 0.5)})
        self.assertEqual(politeness.configure(rules), [])
        self.assertEqual((a.delay, a.concurrency, a.next_allowed, a.inflight), (3.0, 2, 10.0, 1))
        self.assertEqual((b.delay, b.concurrency), (5.0, 3))
        self.assertIsNone(politeness.ready(9.0))
        self.assertIs(politeness.ready(10.0), a)  # a second request beside the one in flight
        self.assertEqual((politeness.slot("new.test").delay, politeness.slot("new.test").concurrency),
                         (3.0, 2))
        self.assertEqual((politeness.adaptive_of("a.test"), politeness.adaptive_of("c.test")),
                         (AdaptiveDelay(2.0), AdaptiveDelay(1.0, 0.5)))
        self.assertEqual(politeness.configure(PoliteRules(3.0, 2)), ["b.test", "c.test"])
        self.assertEqual((b.delay, b.concurrency), (5.0, 2))

    def test_a_group_takes_the_highest_new_concurrency(self) -> None:
        """Per IP: the group's cap is its hosts' highest concurrency as configured now."""
        politeness = Politeness(delay=0.0, concurrency=4)
        for host in ("a.test", "b.test"):
            politeness.slot(host)
            politeness.set_group(host, "192.0.2.1")
        group = politeness.hosts["a.test"].group
        assert group is not None
        self.assertEqual(group.cap, 4)
        politeness.configure(PoliteRules(0.0, 2, {"b.test": (0.0, 3)}))
        self.assertEqual(group.cap, 3)


class Chain(Timed):
    """``/list`` links to ``/l/1``, each ``/l/N`` to ``/l/N+1`` (to ``/l/5``); ``/l/1`` is held (``held[101]``)."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock, held=(), links=0)

    def render_GET(self, request: server.Request) -> bytes | int:
        path = request.path.decode()
        if path == "/list":
            self.log.append((path, self.clock.seconds() - START))
            request.setHeader(b"content-type", b"text/html")
            return b"<a href='/l/1'>1</a>"
        if not path.startswith("/l/"):
            return super().render_GET(request)
        self.log.append((path, self.clock.seconds() - START))
        request.setHeader(b"content-type", b"text/html")
        n = int(path.rpartition("/")[2])
        if n == 1:
            self.held[101] = request
            return server.NOT_DONE_YET
        return f"<a href='/l/{n + 1}'>next</a>".encode() if n < 5 else b"end"

    def release(self, n: int) -> None:
        request = self.held.pop(n)
        request.write(b"<a href='/l/2'>next</a>")
        request.finish()


class LiveHopsTests(ClockedNodeCase):
    """A site's ``max_hops`` changed by a reload while its page at hop 1 is in flight: its links are held to the
    new limit, without a restart (nothing lost)."""

    def site(self) -> Timed:
        return Chain(self.clock)

    def write(self, hops: int) -> None:
        chain = {"list_urls": ["/list$", r"/l/\d+$"], "max_hops": hops}
        self.file.write_text(toml(self.data, self.root, self.pool_section(), site=chain))

    @defer.inlineCallbacks
    def test_links_are_held_to_the_new_limit(self) -> Any:
        """max_hops 1 -> 3 while /l/1 (hop 1) is fetched: /l/2 and /l/3 are crawled, /l/4 (hop 4) is not."""
        self.write(1)
        top, reload = self.start()
        crawler = top.getServiceNamed("crawler")
        yield self.settle(lambda: 101 in self.shop.held)
        self.write(3)
        with capturedLogs() as events:
            self.assertTrue((yield reload.reload()))
        self.assertIn("sites.shop.max_hops", " ".join(formatEvent(e) for e in events))
        self.assertEqual(top.getServiceNamed("config").status()["restart_needed"], [])
        self.shop.release(101)
        yield self.finish(crawler)
        stats = yield crawler.pool.stats()
        self.assertEqual([path for path, _ in self.shop.log], ["/list", "/l/1", "/l/2", "/l/3"])
        self.assertEqual((stats["waiting"], stats["pending"], stats["failed"], stats["done"]), (0, 0, 0, 4))
        self.assertEqual(stats["rejected"]["max-hops"], 1)


class RedisLiveHopsTests(OnRedis, LiveHopsTests):
    """The same on the Redis pool."""


class LiveRecrawlTests(ClockedNodeCase):
    """A site's ``recrawl_detail`` set by a reload (its ``recrawl_list`` runs the recrawler, every 10 s): the detail
    pages done after it are fetched again once their interval has passed."""

    def site(self) -> Timed:
        return Timed(self.clock, held=(1, 2), links=2)

    def write(self, detail: int) -> None:
        pool = {**self.pool_section(), "recrawl_every": 10}
        self.file.write_text(toml(self.data, self.root, pool, site={"recrawl_list": 1000, "recrawl_detail": detail}))

    @defer.inlineCallbacks
    def test_a_detail_page_done_after_the_reload_is_recrawled(self) -> Any:
        """recrawl_detail 0 -> 30 while items 1 and 2 are fetched: both are fetched again 30 s or more after, once
        in the minute; no restart is named."""
        self.write(0)
        top, reload = self.start()
        crawler = top.getServiceNamed("crawler")
        yield self.settle(lambda: len(self.shop.held) == 2)
        self.write(30)
        with capturedLogs() as events:
            self.assertTrue((yield reload.reload()))
        self.assertIn("sites.shop.recrawl_detail", " ".join(formatEvent(e) for e in events))
        self.assertEqual(top.getServiceNamed("config").status()["restart_needed"], [])
        self.shop.release(1)
        self.shop.release(2)
        yield self.run_to(crawler, 60, 5)
        again = {path: at for path, at in self.shop.log[3:] if path.startswith("/item/")}
        self.assertEqual(sorted(again), ["/item/1", "/item/2"])
        self.assertTrue(all(at >= 30 for at in again.values()), self.shop.log)


class RedisLiveRecrawlTests(OnRedis, LiveRecrawlTests):
    """The same on the Redis pool."""


SITEMAPS_BEFORE = {"max_urls": 1, "refresh": 1000}
SITEMAPS_AFTER = {"max_urls": 3, "refresh": 10}


class LiveSitemapsTests(ClockedNodeCase):
    """A node reads a host's sitemap (robots.txt names it) with ``max_urls = 1`` and ``refresh = 1000``; reloaded
    to 3 and 10, it reads it again 10 s after the end of the first read, taking 3 URLs."""

    def site(self) -> Timed:
        return Timed(self.clock, held=(), links=0)

    def write(self, sitemaps: dict[str, Any]) -> None:
        self.file.write_text(toml(self.data, self.root, self.pool_section(), {"robots": True}, sitemaps=sitemaps))

    def calm(self, crawler: Any) -> Callable[[], bool]:
        sitemaps = self.top.getServiceNamed("sitemaps")
        return lambda: crawler.fetching == 0 and not crawler._popping and not sitemaps.busy()

    @defer.inlineCallbacks
    def test_the_next_read_takes_the_new_keys(self) -> Any:
        """The refresh due at 1000 s comes at 10 s, and reads 3 URLs of the sitemap, not 1; nothing else changes."""
        self.shop.files["/robots.txt"] = f"User-agent: *\nSitemap: {self.root}s.xml\n".encode()
        self.shop.files["/s.xml"] = urlset(self.root, ["item/1", "item/2", "item/3"])
        self.write(SITEMAPS_BEFORE)
        self.top, reload = self.start()
        crawler = self.top.getServiceNamed("crawler")
        yield self.run_to(crawler, 0, 1)
        yield self.settle(lambda: ("/item/1", 0.0) in self.shop.log and self.calm(crawler)())
        self.write(SITEMAPS_AFTER)
        with capturedLogs() as events:
            self.assertTrue((yield reload.reload()))
        self.assertIn("sitemaps.max_urls", " ".join(formatEvent(e) for e in events))
        self.assertEqual(self.top.getServiceNamed("config").status()["restart_needed"], [])
        yield self.run_to(crawler, 9, 1)
        self.assertEqual([path for path, _ in self.shop.log].count("/s.xml"), 1)
        yield self.run_to(crawler, 12, 1)
        fetched = [(path, at) for path, at in self.shop.log if path.startswith(("/s.xml", "/item/"))]
        self.assertEqual(fetched, [("/s.xml", 0.0), ("/item/1", 0.0), ("/s.xml", 10.0), ("/item/2", 10.0),
                                   ("/item/3", 10.0)])


def urlset(root: str, paths: list[str]) -> bytes:
    entries = "".join(f"<url><loc>{root}{path}</loc></url>" for path in paths)
    return f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'.encode()


class WorkerPolitenessTests(unittest.TestCase):
    """A worker-role node (no pool) takes the politeness keys too."""

    @defer.inlineCallbacks
    def test_the_worker_takes_the_new_keys(self) -> Any:
        """A reload reaches the worker's host queue (every job's politeness, a host known there included); the
        status names no restart."""
        data = Path(self.mktemp())
        data.mkdir()
        path = data / "spiderd.toml"
        head = {"spiderd": {"role": "worker", "data_dir": str(data)}, "worker": {"port": 0}, "api": {"port": 0}}
        path.write_text(node_toml({**head, "fetch": SLOW_DEFAULTS}, []))
        top = tap.build(cfg.load(str(path)), reactor)
        top.startService()
        self.addCleanup(top.stopService)
        worker, live = top.getServiceNamed("worker"), top.getServiceNamed("config")
        while not live.running:
            yield task.deferLater(reactor, 0.01, lambda: None)
        politeness = worker.runner._pipeline.queue.politeness
        known = politeness.slot("known.test")
        path.write_text(node_toml({**head, "fetch": {**FAST_DEFAULTS, **host_table("known.test", 7, 3)}}, []))
        self.assertTrue((yield ReloadService(reactor, live, install=False).reload()))
        self.assertEqual((known.delay, known.concurrency), (7.0, 3))
        self.assertEqual((politeness.delay, politeness.concurrency), (2.0, 2))
        self.assertEqual(live.status()["restart_needed"], [])


class RenderSettingsTests(unittest.TestCase):
    """A node with a rendered site takes a reload's [render] bounds (its browsers as they are replaced); the browser
    and their number need a restart, and say so."""

    def test_render_keys_reach_the_render_pool(self) -> None:
        data = Path(self.mktemp())
        data.mkdir()
        path = data / "spiderd.toml"

        def config(**render: Any) -> str:
            return toml(data, "http://127.0.0.1:9/", {"backend": "memory"}, site={"render": "always"}, render=render)

        path.write_text(config(navigation_timeout=15.0, auto_probe=3))
        top = tap.build(cfg.load(str(path)), reactor)  # (not started: no browser is needed to see the settings)
        live, modes = top.getServiceNamed("config"), top.getServiceNamed("api").node.render
        pool = modes.pool
        path.write_text(config(navigation_timeout=4.0, auto_probe=7, browsers=2))
        keys = live.apply(cfg.load(str(path)), "test")
        self.assertEqual(sorted(keys), ["render.auto_probe", "render.browsers", "render.navigation_timeout"])
        self.assertEqual((pool.config.navigation_timeout, pool._init[3], modes.auto.probe), (4.0, 4.0, 7))
        self.assertEqual((pool.config.browsers, len(pool.children)), (1, 1))
        self.assertEqual(live.restart_needed(), ["render.browsers"])
