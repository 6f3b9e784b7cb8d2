"""Link-hop limits end to end: a whole node crawls a real twisted.web site on 127.0.0.1 whose list pages form a
chain (seed -> a -> b -> c -> d), each with a detail page; with ``[pool] max_hops = 2`` c and b's detail page
are never fetched, in the crawler's own fetches and with the all role's local worker, and the links past the
limit are counted (``links_max_hops`` and the pool's ``rejected``, in ``GET /api/status``); on the LevelDB pool
and on Redis."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.trial import unittest
from twisted.web import resource, server

from spiderd.config import settings as cfg
from spiderd.fetch.fetcher import FetchConfig, Fetcher
from spiderd.ops.web import Node

from .test_crawl import node_settings, run_crawl, run_with_worker
from .test_pool_contract import RedisKeys
from .webnode import start_api

SITES = [{"name": "chain", "allowed_hosts": ["127.0.0.1"], "list_urls": [r"/[a-z]$"], "detail_urls": [r"/p/"],
          "fields": {"title": "//h1/text()"}}]
CHAIN = ["", "a", "b", "c", "d"]  # "" is the seed, /


def page(step: int) -> bytes:
    """List page ``step`` of the chain: a link to the next one and to its own detail page."""
    following = f'<a href="/{CHAIN[step + 1]}">next</a>' if step + 1 < len(CHAIN) else ""
    return f'<html><body>{following} <a href="/p/{step}">detail</a></body></html>'.encode()


class ChainSite(resource.Resource):
    """The chain's list pages and their detail pages; records every path asked for (but robots.txt)."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.requested: list[str] = []

    def render_GET(self, request: Any) -> bytes:
        path = request.path.decode()
        if path != "/robots.txt":
            self.requested.append(path)
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        if path.startswith("/p/"):
            return f"<html><body><h1>detail {path[3:]}</h1></body></html>".encode()
        if path[1:] in CHAIN:
            return page(CHAIN.index(path[1:]))
        request.setResponseCode(404)
        return b"no"


class HopLimitTests(unittest.TestCase):
    timeout = 60
    pool_class = "KVPool"

    def setUp(self) -> None:
        self.site = ChainSite()
        self.port = reactor.listenTCP(0, server.Site(self.site), interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.root = f"http://127.0.0.1:{self.port.getHost().port}/"
        self.data = Path(tempfile.mkdtemp(prefix="spiderd-hops-"))
        self.addCleanup(shutil.rmtree, self.data, True)

    def settings(self, sites: list[dict[str, Any]] = SITES, **sections: Any) -> cfg.Settings:
        sections["pool"] = {**self.pool_section(), **sections.get("pool", {})}
        return node_settings(str(self.data), self.root, sites=sites, **sections)

    def pool_section(self) -> dict[str, Any]:
        return {}

    @defer.inlineCallbacks
    def test_no_limit_by_default(self) -> Any:
        """Without a limit the whole chain is fetched."""
        crawler, stats = yield run_crawl(self.settings())
        self.assertEqual(sorted(set(self.site.requested)), ["/", "/a", "/b", "/c", "/d", "/p/0", "/p/1", "/p/2",
                                                            "/p/3", "/p/4"])
        self.assertEqual((stats["rejected"], crawler.stats.counts["links_max_hops"]), ({}, 0))

    @defer.inlineCallbacks
    def test_max_hops(self) -> Any:
        """max_hops 2: the seed (hop 0), a and the seed's detail page (1), b and a's detail page (2) are fetched; c
        and b's detail page (3) never are; the two links are counted in /api/status."""
        crawler, stats = yield run_crawl(self.settings(pool={"max_hops": 2}))
        self.assertEqual(type(crawler.pool).__name__, self.pool_class)
        self.assertEqual(sorted(set(self.site.requested)), ["/", "/a", "/b", "/p/0", "/p/1"])
        self.assertEqual((stats["done"], stats["waiting"], stats["failed"]), (5, 0, 0))
        self.assertEqual(stats["rejected"], {"max-hops": 2})
        status = yield self.status(crawler)
        self.assertEqual(status["counts"]["links_max_hops"], 2)
        self.assertEqual(status["pool"]["rejected"], {"max-hops": 2})

    @defer.inlineCallbacks
    def test_site_max_hops(self) -> Any:
        """A site's own max_hops (1) wins over the pool's (none here)."""
        crawler, stats = yield run_crawl(self.settings(sites=[{**SITES[0], "max_hops": 1}]))
        self.assertEqual(sorted(set(self.site.requested)), ["/", "/a", "/p/0"])
        self.assertEqual(crawler.stats.counts["links_max_hops"], 2)

    @defer.inlineCallbacks
    def test_max_hops_with_the_local_worker(self) -> Any:
        """The all role with its own worker: detail links past the limit never reach a batch; those within it are
        fetched by the worker's jobs."""
        feeds = self.data / "shipped"
        settings = self.settings(pool={"max_hops": 2}, batch={"targets": ["local"], "size": 20},
                                 worker={"feed_template": f"file://{feeds}/%(batch)s_%(name)s_%(time)s.jl"})
        crawler, batcher, worker = yield run_with_worker(settings)
        self.assertEqual(sorted(set(self.site.requested)), ["/", "/a", "/b", "/p/0", "/p/1"])
        items = [json.loads(line)["url"] for p in feeds.glob("*.jl") for line in p.open()]
        self.assertEqual(sorted(items), [self.root + "p/0", self.root + "p/1"])
        self.assertEqual(crawler.stats.counts["links_max_hops"], 2)

    @defer.inlineCallbacks
    def status(self, crawler: Any) -> Any:
        """GET /api/status of a node holding the crawl's stats and pool (reopened: the crawl's is closed)."""
        clock = Clock()
        service = start_api(reactor, Node("all", clock, stats=crawler.stats, pool=_Stats(crawler.pool.rejected)),
                            clock)
        self.addCleanup(service.stopService)
        fetcher = Fetcher(reactor, FetchConfig(timeout=10))
        self.addCleanup(fetcher.close)
        answer = yield fetcher.fetch(service.url + "api/status")
        return json.loads(answer.body)


class RedisHopLimitTests(RedisKeys, HopLimitTests):
    """The same crawls on the Redis pool (a key space of its own on the test Redis; skipped without one)."""

    pool_class = "RedisPool"

    def pool_section(self) -> dict[str, Any]:
        return {"backend": "redis", "redis_url": self.redis_url, "redis_prefix": self.prefix,
                "redis_namespace": self.namespace}


class _Stats:
    """A closed pool's last rejection counts, as ``stats()`` gives them."""

    def __init__(self, rejected: Any) -> None:
        self.rejected = dict(rejected)

    def stats(self) -> defer.Deferred[dict[str, Any]]:
        return defer.succeed({"rejected": self.rejected})
