"""Sites changed while a node crawls (SIGHUP, the sites API): the next pages use the new rules, nothing in flight is
lost, and a bad change changes nothing and says why."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.logger import capturedLogs, formatEvent
from twisted.trial import unittest
from twisted.web import resource, server

from spiderd import tap
from spiderd.config import settings as cfg
from spiderd.ops.reload import ReloadService

from . import services

ITEMS = 3
PAGE = ("<html><body><h1>Title {n}</h1><h2>Subtitle {n}</h2><p class='price'>{n} EUR</p>"
        "<a href='/list'>home</a></body></html>")


class Shop(resource.Resource):
    """``/list`` links to ``/item/1`` .. ``/item/3``; items 2 and 3 are answered only when the test releases them."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.arrived = {n: defer.Deferred() for n in (2, 3)}  # fires when item n is asked for (its fetch in flight)
        self.held: dict[int, server.Request] = {}

    def render_GET(self, request: server.Request) -> bytes | int:
        path = request.path.decode()
        if path == "/list":
            links = "".join(f"<a href='/item/{n}'>item {n}</a>" for n in range(1, ITEMS + 1))
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


def toml(data_dir: str, root: str, title: str, pool: dict[str, Any], extra_site: str = "",
         api_port: int = 0) -> str:
    pool_lines = "".join(f"{k} = {json.dumps(v)}\n" for k, v in pool.items())
    return f"""
[spiderd]
data_dir = "{data_dir}"
log_interval = 3600
[pool]
seeds = ["{root}list"]
failure_threshold = 1
pending_threshold = 60
{pool_lines}
[fetch]
robots = false
timeout = 10
[parse]
workers = 1
[batch]
targets = []
[store]
url = "none"
[api]
port = {api_port}
[[sites]]
name = "shop"
allowed_hosts = ["127.0.0.1"]
list_urls = ["/list$"]
detail_urls = ["/item/\\\\d+$"]
fields = {{title = "{title}", price = {{css = "p.price::text"}}}}
{extra_site}
"""


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

    def write(self, title: str, extra_site: str = "") -> None:
        self.file.write_text(toml(str(self.data), self.root, title, self.pool_section(), extra_site))

    def start(self) -> tuple[Any, list[dict[str, Any]], dict[int, defer.Deferred[None]]]:
        """Build and start the node; its items as written, and a Deferred per item number firing at its item."""
        settings = cfg.with_overlay(cfg.load(str(self.file)))
        top = tap.build(settings, reactor)
        items: list[dict[str, Any]] = []
        written = {n: defer.Deferred() for n in range(1, ITEMS + 1)}
        writer = top.getServiceNamed("items")
        write = writer.write

        def spy(item: dict[str, Any], statuses: Any = ()) -> Any:
            items.append(item)
            n = int(item["url"].rpartition("/")[2])
            d = write(item, statuses)
            reactor.callLater(0, written[n].callback, None)
            return d

        writer.write = spy
        top.startService()
        self.addCleanup(top.stopService)
        return top, items, written

    @defer.inlineCallbacks
    def test_sighup_changes_a_field_and_adds_a_site_while_fetches_are_in_flight(self) -> Any:
        """Item 1 with the file's rules; a reload while item 2 is fetched: item 2 takes the new selector."""
        self.write("//h1/text()")
        top, items, written = self.start()
        reload = ReloadService(reactor, top.getServiceNamed("api").node.config, install=False)
        reload.startService()
        self.addCleanup(reload.stopService)
        yield written[1]
        yield self.shop.arrived[2]
        self.write("//h2/text()", '[[sites]]\nname = "blog"\nallowed_hosts = ["blog.example"]\n')
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
        self.shop.release(3)
        yield written[3]
        crawler = top.getServiceNamed("crawler")
        yield crawler.finished
        stats = yield crawler.pool.stats()
        titles = {item["url"].rpartition("/")[2]: item["title"] for item in items}
        self.assertEqual(titles, {"1": "Title 1", "2": "Subtitle 2", "3": "Subtitle 3"})
        self.assertEqual((stats["waiting"], stats["pending"], stats["failed"], stats["done"]), (0, 0, 0, 4))
        self.assertEqual([s.name for s in config.settings.sites], ["shop", "blog"])

    @defer.inlineCallbacks
    def test_a_restart_key_is_named_and_not_applied(self) -> Any:
        """A changed listening port is logged as needing a restart and shown in the status."""
        self.write("//h1/text()")
        top, items, written = self.start()
        live = top.getServiceNamed("api").node.config
        reload = ReloadService(reactor, live, install=False)
        reload.startService()
        self.addCleanup(reload.stopService)
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
    def _delete_keys(self) -> Any:
        from spiderd.frontier.pool.redis.link import RedisLink, parse_redis_url

        admin = RedisLink(parse_redis_url(self.redis_url))
        try:
            cursor, found = "0", set()
            while True:
                cursor, batch = yield admin.execute("SCAN", cursor, "MATCH", self.namespace + "*", "COUNT", "1000")
                found.update(batch)
                if cursor == "0":
                    break
            if found:
                yield admin.execute("DEL", *found)
        finally:
            yield admin.close()
