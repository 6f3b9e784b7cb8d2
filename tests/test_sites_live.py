"""Sites changed while a node crawls (SIGHUP, the sites API): the next pages use the new rules, nothing in flight is
lost, and a bad change changes nothing and says why."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import treq.client
from twisted.internet import defer, reactor, task
from twisted.logger import capturedLogs, formatEvent
from twisted.trial import unittest
from twisted.web import resource, server
from twisted.web.client import Agent, HTTPConnectionPool

from spiderd import tap
from spiderd.config import settings as cfg
from spiderd.frontier import sharedsites
from spiderd.ops import sitebook
from spiderd.ops.reload import ReloadService

from . import services
from .clusterkeys import ClusterCase
from .helpers import node_toml

ITEMS = 3
PAGE = ("<html><body><h1>Title {n}</h1><h2>Subtitle {n}</h2><p class='price'>{n} EUR</p>"
        "<a href='/list'>home</a></body></html>")


class Shop(resource.Resource):
    """``/list`` links to ``/item/1`` .. ``/item/3``; items 2 and 3 (``held``) are answered only when the test releases
    them."""

    isLeaf = True

    def __init__(self, items: int = ITEMS, held: tuple[int, ...] = (2, 3)) -> None:
        super().__init__()
        self.items = items
        self.arrived = {n: defer.Deferred() for n in held}  # fires when item n is asked for (its fetch in flight)
        self.held: dict[int, server.Request] = {}

    def render_GET(self, request: server.Request) -> bytes | int:
        path = request.path.decode()
        if path == "/list":
            links = "".join(f"<a href='/item/{n}'>item {n}</a>" for n in range(1, self.items + 1))
            return f"<html><body>{links}</body></html>".encode()
        if not path.startswith("/item/"):
            request.setResponseCode(404)
            return b"no"
        n = int(path.rpartition("/")[2])
        if n in self.arrived:
            self.held[n] = request
            self.arrived[n].callback(None)
            return server.NOT_DONE_YET
        return PAGE.format(n=n).encode()

    def release(self, n: int) -> None:
        request = self.held.pop(n)
        request.setHeader(b"content-type", b"text/html")
        request.write(PAGE.format(n=n).encode())
        request.finish()


def toml(data_dir: str, root: str, title: str, pool: dict[str, Any], more_sites: list[dict[str, Any]] | None = None,
         api_port: int = 0, robots: bool = False) -> str:
    """The node's configuration: the shop's title at ``title``, then ``more_sites``."""
    shop = {"name": "shop", "allowed_hosts": ["127.0.0.1"], "list_urls": ["/list$"], "detail_urls": [r"/item/\d+$"],
            "fields": {"title": title, "price": {"css": "p.price::text"}}}
    return node_toml({
        "spiderd": {"data_dir": data_dir, "log_interval": 3600},
        "pool": {"seeds": [f"{root}list"], "failure_threshold": 1, "pending_threshold": 60, **pool},
        "fetch": {"robots": robots, "timeout": 10}, "parse": {"workers": 1}, "batch": {"targets": []},
        "store": {"url": "none"}, "api": {"port": api_port}}, [shop, *(more_sites or [])])


@defer.inlineCallbacks
def call(api: Any, method: str, path: str, body: Any = None, csrf: bool = True) -> Any:
    """(code, JSON answer) of one request to a node's API; writes carry its CSRF token unless ``csrf`` is False."""
    headers = {"content-type": "application/json"}
    if csrf:
        headers["x-csrf-token"] = api.resource.sites.csrf
    data = json.dumps(body).encode() if body is not None else None
    client = treq.client.HTTPClient(Agent(reactor, pool=HTTPConnectionPool(reactor, persistent=False)))
    answer = yield client.request(method, api.url + path.lstrip("/"), headers=headers, data=data)
    text = yield answer.content()
    return answer.code, json.loads(text)


class LiveSitesTests(unittest.TestCase):
    """A node crawling a loopback shop takes site changes by SIGHUP and by PUT while item fetches are in flight."""

    timeout = 60

    def setUp(self) -> None:
        self.shop = Shop()
        self.port = reactor.listenTCP(0, server.Site(self.shop), interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.root = f"http://127.0.0.1:{self.port.getHost().port}/"
        self.data = Path(tempfile.mkdtemp(prefix="spiderd-live-"))
        self.addCleanup(shutil.rmtree, self.data, True)
        self.file = self.data / "spiderd.toml"

    def pool_section(self) -> dict[str, Any]:
        return {"backend": "leveldb"}

    def write(self, title: str, more_sites: list[dict[str, Any]] | None = None) -> None:
        self.file.write_text(toml(str(self.data), self.root, title, self.pool_section(), more_sites))

    def start(self) -> tuple[Any, list[dict[str, Any]], dict[int, defer.Deferred[None]]]:
        """Build and start the node; its items as written, and a Deferred per item number firing at its item."""
        settings = cfg.with_overlay(cfg.load(str(self.file)))
        top = tap.build(settings, reactor)
        items: list[dict[str, Any]] = []
        written = {n: defer.Deferred() for n in range(1, ITEMS + 1)}
        writer = top.getServiceNamed("items")
        write = writer.write

        def spy(item: dict[str, Any], statuses: Any = (), line: str | None = None) -> Any:
            items.append(item)
            n = int(item["url"].rpartition("/")[2])
            d = write(item, statuses, line)
            reactor.callLater(0, written[n].callback, None)
            return d

        writer.write = spy
        top.startService()
        self.addCleanup(top.stopService)
        return top, items, written

    @defer.inlineCallbacks
    def test_sighup_changes_a_field_and_adds_a_site_while_fetches_are_in_flight(self) -> Any:
        """Item 1 with the file's rules; a reload while item 2 is fetched: item 2 takes the new selector; a bad file
        changes nothing and says why; a reload removes the site added."""
        self.write("//h1/text()")
        top, items, written = self.start()
        reload = ReloadService(reactor, top.getServiceNamed("api").node.config, install=False)
        reload.startService()
        self.addCleanup(reload.stopService)
        yield written[1]
        yield self.shop.arrived[2]
        self.write("//h2/text()", [{"name": "blog", "allowed_hosts": ["blog.example"]}])
        with capturedLogs() as events:
            ok = yield reload.reload()
        self.assertTrue(ok)
        said = " ".join(formatEvent(e) for e in events)
        self.assertIn("sites.shop.fields", said)
        self.assertIn("sites.blog.allowed_hosts", said)
        self.assertIn("no restart needed", said)
        self.shop.release(2)
        yield written[2]
        yield self.shop.arrived[3]
        self.file.write_text("[pool]\nseeds = 'not a list'\n")
        ok = yield reload.reload()
        self.assertFalse(ok)
        config = top.getServiceNamed("api").node.config
        self.assertIn("pool.seeds", config.status()["error"])
        self.assertEqual([s.name for s in config.settings.sites], ["shop", "blog"])
        self.write("//h2/text()")  # the blog removed
        with capturedLogs() as events:
            self.assertTrue((yield reload.reload()))
        self.assertIn("changed: sites.blog.allowed_hosts", " ".join(formatEvent(e) for e in events))
        self.assertEqual([s.name for s in config.settings.sites], ["shop"])
        self.assertIsNone(config.rules.site_for("http://blog.example/"))
        self.assertIsNone(config.status()["error"])
        self.shop.release(3)
        yield written[3]
        crawler = top.getServiceNamed("crawler")
        yield crawler.finished
        stats = yield crawler.pool.stats()
        titles = {item["url"].rpartition("/")[2]: item["title"] for item in items}
        self.assertEqual(titles, {"1": "Title 1", "2": "Subtitle 2", "3": "Subtitle 3"})
        self.assertEqual((stats["waiting"], stats["pending"], stats["failed"], stats["done"]), (0, 0, 0, 4))

    @defer.inlineCallbacks
    def test_a_restart_key_is_named_and_not_applied(self) -> Any:
        """A changed listening port is logged as needing a restart and shown in the status."""
        self.write("//h1/text()")
        top, items, written = self.start()
        live = top.getServiceNamed("api").node.config
        reload = ReloadService(reactor, live, install=False)
        reload.startService()
        self.addCleanup(reload.stopService)
        yield written[1]
        self.file.write_text(toml(str(self.data), self.root, "//h1/text()", self.pool_section(), api_port=6999))
        with capturedLogs() as events:
            ok = yield reload.reload()
        self.assertTrue(ok)
        said = " ".join(formatEvent(e) for e in events)
        self.assertIn("needs a restart: api.port", said)
        self.assertEqual(live.status()["restart_needed"], ["api.port"])
        for n in (2, 3):
            yield self.shop.arrived[n]
            self.shop.release(n)
        yield top.getServiceNamed("crawler").finished


    @defer.inlineCallbacks
    def test_put_changes_a_field_while_fetches_are_in_flight_and_a_bad_table_changes_nothing(self) -> Any:
        """PUT a site's table while item 2 is fetched: item 2 takes it; a bad table is refused, saying why; DELETE
        and the history; the changes survive a restart (the overlay in the data directory)."""
        self.write("//h1/text()")
        top, items, written = self.start()
        api = top.getServiceNamed("api")
        yield written[1]
        yield self.shop.arrived[2]
        code, got = yield call(api, "GET", "/api/sites/shop")
        self.assertEqual((code, got["origin"], got["table"]["fields"]["title"]), (200, "file", "//h1/text()"))
        table = dict(got["table"], fields={"title": {"css": "h2::text"}, "price": {"css": "p.price::text"}})
        code, got = yield call(api, "PUT", "/api/sites/shop", table, csrf=False)
        self.assertEqual(code, 403)
        code, got = yield call(api, "PUT", "/api/sites/shop", table)
        self.assertEqual(code, 200, got)
        self.assertEqual(got["changed"], ["sites.shop.fields"])
        self.shop.release(2)
        yield written[2]
        before = (yield call(api, "GET", "/api/sites"))[1]
        code, got = yield call(api, "PUT", "/api/sites/shop", dict(table, fields={"title": "//h2[bad"}))
        self.assertEqual(code, 400)
        self.assertIn("sites.shop.fields.title: bad XPath", got["message"])
        code, got = yield call(api, "PUT", "/api/sites/shop", dict(table, colour="red"))
        self.assertEqual(code, 400)
        self.assertIn("colour: unknown key", got["message"])
        self.assertEqual((yield call(api, "GET", "/api/sites"))[1], before)
        code, got = yield call(api, "PUT", "/api/sites/blog", {"allowed_hosts": ["blog.example"]})
        self.assertEqual(code, 200)
        code, got = yield call(api, "DELETE", "/api/sites/blog")
        self.assertEqual((code, got["changed"]), (200, ["sites.blog.allowed_hosts"]))
        yield self.shop.arrived[3]
        self.shop.release(3)
        yield written[3]
        crawler = top.getServiceNamed("crawler")
        yield crawler.finished
        stats = yield crawler.pool.stats()
        self.assertEqual((stats["waiting"], stats["pending"], stats["failed"], stats["done"]), (0, 0, 0, 4))
        titles = {item["url"].rpartition("/")[2]: item["title"] for item in items}
        self.assertEqual(titles, {"1": "Title 1", "2": "Subtitle 2", "3": "Subtitle 3"})
        code, got = yield call(api, "GET", "/api/sites/shop/history")
        self.assertEqual([(e["user"], e["action"], e["keys"]) for e in got["history"]],
                         [("loopback", "put", ["sites.shop.fields"])])
        code, got = yield call(api, "GET", "/api/sites/blog/history")
        self.assertEqual([e["action"] for e in got["history"]], ["put", "delete"])
        code, got = yield call(api, "GET", "/api/status")
        self.assertEqual(got["config"]["rules"], api.node.config.rules.digest)
        yield top.stopService()
        again = cfg.with_overlay(cfg.load(str(self.file)))
        self.assertEqual([(s.name, s.fields[0].xpath) for s in again.sites],
                         [("shop", "descendant-or-self::h2/text()")])

    @defer.inlineCallbacks
    def test_an_invalid_file_is_shown_in_the_status(self) -> Any:
        """A reload of a bad file keeps the running rules; GET /api/status says why."""
        self.write("//h1/text()")
        top, items, written = self.start()
        api = top.getServiceNamed("api")
        reload = ReloadService(reactor, api.node.config, install=False)
        reload.startService()
        self.addCleanup(reload.stopService)
        yield written[1]
        digest = api.node.config.rules.digest
        self.write("//h1[")
        self.assertFalse((yield reload.reload()))
        code, got = yield call(api, "GET", "/api/status")
        self.assertIn("sites[0].fields.title: bad XPath", got["config"]["error"])
        self.assertEqual(got["config"]["rules"], digest)
        for n in (2, 3):
            yield self.shop.arrived[n]
            self.shop.release(n)
        yield top.getServiceNamed("crawler").finished


    @defer.inlineCallbacks
    def test_the_sitemap_reader_follows_the_sites(self) -> Any:
        """A site added by PUT is one whose hosts' sitemaps are read (its rules: the reader's, on both threads)."""
        self.file.write_text(toml(str(self.data), self.root, "//h1/text()", self.pool_section(), robots=True))
        top, items, written = self.start()
        api, sitemaps = top.getServiceNamed("api"), top.getServiceNamed("sitemaps")
        while not api.running:
            yield task.deferLater(reactor, 0.01, lambda: None)
        self.assertIsNone(sitemaps._rules.site_for("http://blog.example/"))
        code, got = yield call(api, "PUT", "/api/sites/blog", {"allowed_hosts": ["blog.example"]})
        self.assertEqual(code, 200, got)
        self.assertEqual(sitemaps._rules.site_for("http://blog.example/").name, "blog")
        self.assertEqual(sitemaps._lane_rules.site_for("http://blog.example/").name, "blog")
        for n in (2, 3):
            yield self.shop.arrived[n]
            self.shop.release(n)
        yield top.getServiceNamed("crawler").finished


    @defer.inlineCallbacks
    def test_the_history_keeps_the_newest_changes_of_each_site(self) -> Any:
        """A site changed more often than its history keeps (3 here) keeps its newest changes only, stored as
        listed; another site's history stays."""
        self.patch(sitebook, "HISTORY_PER_SITE", 3)
        self.patch(sitebook, "SLACK", 1)
        self.patch(sharedsites, "HISTORY_PER_SITE", 3)
        self.write("//h1/text()")
        top, items, written = self.start()
        api = top.getServiceNamed("api")
        while not api.running:
            yield task.deferLater(reactor, 0.01, lambda: None)
        code, got = yield call(api, "PUT", "/api/sites/blog", {"allowed_hosts": ["blog.example"]})
        self.assertEqual(code, 200, got)
        rules = []
        for n in range(6):
            code, got = yield call(api, "PUT", "/api/sites/other", {"allowed_hosts": [f"h{n}.example"]})
            self.assertEqual(code, 200, got)
            rules.append(got["rules"])
        code, got = yield call(api, "GET", "/api/sites/other/history")
        self.assertEqual([e["rules"] for e in got["history"]], rules[-3:])
        stored = yield self.stored_history(api, "other")
        self.assertEqual(stored[-3:], rules[-3:])
        self.assertLessEqual(len(stored), 4)
        code, got = yield call(api, "GET", "/api/sites/blog/history")
        self.assertEqual([e["action"] for e in got["history"]], ["put"])
        for n in (2, 3):
            yield self.shop.arrived[n]
            self.shop.release(n)
        yield top.getServiceNamed("crawler").finished

    def stored_history(self, api: Any, name: str) -> defer.Deferred[list[str]]:
        """The rules versions of the changes of ``name`` the node keeps (its history file's lines)."""
        path = api.node.sites.history_path
        lines = Path(path).read_text().splitlines()
        return defer.succeed([json.loads(line)["rules"] for line in lines if json.loads(line)["site"] == name])


class RedisLiveSitesTests(LiveSitesTests):
    """The same on the Redis pool (a key space of its own on the test Redis, deleted after)."""

    def setUp(self) -> None:
        host, port = services.need_redis()
        super().setUp()
        self.namespace = f"spiderd-test:{uuid.uuid4().hex[:12]}:"
        self.redis_url = f"redis://{host}:{port}/0"
        self.addCleanup(self._delete_keys)

    def pool_section(self) -> dict[str, Any]:
        return {"backend": "redis", "redis_url": self.redis_url, "redis_prefix": self.namespace + "spiderd:",
                "redis_namespace": self.namespace}

    @defer.inlineCallbacks
    def test_a_change_on_one_node_reaches_the_fleet(self) -> Any:
        """Two frontier nodes on one Redis pool: a PUT on one is taken by the other at its next turn, which then
        sends batches with the same rules; the history is the fleet's."""
        self.write("//h1/text()")
        first, _, _ = self.start()
        other = self.data / "other"
        other.mkdir()
        settings = cfg.load(str(self.file), {"spiderd.data_dir": str(other)})
        cfg.check_data_dir(settings)
        second = tap.build(settings, reactor)
        second.startService()
        self.addCleanup(second.stopService)
        a, b = first.getServiceNamed("api"), second.getServiceNamed("api")
        while not (a.running and b.running):
            yield task.deferLater(reactor, 0.01, lambda: None)
        table = {"allowed_hosts": ["127.0.0.1"], "list_urls": ["/list$"], "detail_urls": [r"/item/\d+$"],
                 "fields": {"title": "//h2/text()"}}
        before = b.node.config.rules.digest
        code, got = yield call(a, "PUT", "/api/sites/shop", table)
        self.assertEqual(code, 200, got)
        self.assertNotEqual(a.node.config.rules.digest, before)
        yield second.getServiceNamed("shared-sites").poll()  # (or its own turn took it already: it runs on the reactor)
        self.assertEqual(b.node.config.rules.digest, a.node.config.rules.digest)
        code, got = yield call(b, "GET", "/api/sites/shop")
        self.assertEqual((got["origin"], got["table"]["fields"]), ("api", {"title": "//h2/text()"}))
        code, got = yield call(b, "GET", "/api/sites/shop/history")
        self.assertEqual([(e["user"], e["action"]) for e in got["history"]], [("loopback", "put")])
        for n in (2, 3):
            yield self.shop.arrived[n]
            self.shop.release(n)
        yield first.getServiceNamed("crawler").finished

    @defer.inlineCallbacks
    def stored_history(self, api: Any, name: str) -> Any:
        """The rules versions of the changes of ``name`` the fleet keeps (its list in Redis)."""
        link = api.node.sites._shared._link
        lines = yield link.execute("LRANGE", f"{self.namespace}spiderd:{self.sites_key}:history:{name}", 0, -1)
        return [json.loads(line)["rules"] for line in lines]

    sites_key = "sites"  # the shared sites' keys: <prefix>sites:overlay ...

    def _delete_keys(self) -> Any:
        return services.delete_redis_keys(self.redis_url, self.namespace + "*")


class ClusterLiveSitesTests(ClusterCase, RedisLiveSitesTests):
    """The same on a Redis Cluster pool (three masters of this class's own): the fleet's sites under one hash tag."""

    sites_key = "{sites}"

    def pool_section(self) -> dict[str, Any]:
        return {"backend": "redis", "redis_url": self.cluster.url, "redis_prefix": self.namespace + "spiderd:",
                "redis_namespace": self.namespace}

    def _delete_keys(self) -> Any:
        return None  # (the class's cluster is stopped and removed after its tests)


class PollTurnTests(unittest.SynchronousTestCase):
    """The fleet's sites are read one turn at a time."""

    def test_a_poll_during_a_turn_fires_once_that_turn_took_the_fleets_sites(self) -> None:
        """The periodic turn read a new version and is taking the overlay; a poll asked for meanwhile fires only once
        that is taken (it used to find the version seen and fire at once, the sites not yet in force)."""
        shared = sharedsites.SharedSites("redis://127.0.0.1:1/0", "p:", task.Clock())
        answers = {"GET": b"1", "HGETALL": [b"shop", b'{"fields": {}}']}

        class Link:
            def execute(self, command: str, *args: Any) -> Any:
                return defer.succeed(answers[command])

        shared._link = Link()  # type: ignore[assignment]
        taking: defer.Deferred[None] = defer.Deferred()
        shared.take = lambda overlay: taking
        first = shared.poll()
        second = shared.poll()
        self.assertNoResult(first)
        self.assertNoResult(second)
        taking.callback(None)
        self.successResultOf(first)
        self.successResultOf(second)
