"""The fetch pool (spiderd.fetch.fetchpool, spiderd.fetch.fetchworker): real fetch children against a twisted.web site
on 127.0.0.1: pages fetched, parsed and compressed in a child; robots.txt and redirects kept in the main process; a
child that dies, a cancel, a stop; lookups told.  The watchdog runs on a Clock with a child in memory."""

from __future__ import annotations

import lzma
import os
import signal
import sys
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web import resource, server

from spiderd.core import status as st
from spiderd.fetch.extract import extract
from spiderd.fetch.fetcher import FetchConfig, Fetcher, FetchResult
from spiderd.fetch.fetchpool import GRACE, FetchChild, FetchPool
from spiderd.fetch.fetchworker import result_fields, result_from

from .helpers import rules_of

RAW = {"sites": [{"name": "shop", "allowed_hosts": ["127.0.0.1", "localhost"], "list_urls": ["/c/"],
                  "detail_urls": [r"/p/\d+$"], "fields": {"title": "css:h1::text"}}]}


def body_of(path: str) -> bytes:
    return (f"<html><head><title>t</title></head><body><h1>Page {path}</h1><a href='/p/77'>d</a>"
            f"<a href='/c/5'>l</a></body></html>").encode()


SCRIPTED = b"<html><head><script>document.write('made here')</script></head><body></body></html>"


class Site(resource.Resource):
    """Pages by path; every request logged; /slow held until released; robots.txt disallows /private."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[str] = []
        self.held: list[Any] = []

    def render_GET(self, request: Any) -> Any:
        path = request.path.decode()
        self.requests.append(path)
        if path == "/robots.txt":
            return b"User-agent: *\nDisallow: /private\n"
        if path == "/slow":
            self.held.append(request)
            return server.NOT_DONE_YET
        if path.startswith("/moved"):
            request.setResponseCode(301)
            request.setHeader(b"location", b"/private/x" if path == "/moved-private" else b"/p/9")
            return b""
        if path == "/scripted":
            request.setHeader(b"content-type", b"text/html")
            return SCRIPTED
        if path.startswith(("/p/", "/c/")):
            request.setHeader(b"content-type", b"text/html; charset=utf-8")
            return body_of(path)
        request.setResponseCode(404)
        return b"no"

    def release(self) -> None:
        for request in self.held:
            request.setHeader(b"content-type", b"text/html")
            request.write(body_of("/slow"))
            request.finish()
        self.held.clear()


class FetchPoolTests(TestCase):
    timeout = 30

    def setUp(self) -> None:
        self.site = Site()
        factory = server.Site(self.site)
        factory.noisy = False
        self.port = reactor.listenTCP(0, factory, interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.base = f"http://127.0.0.1:{self.port.getHost().port}"
        self.told: list[tuple[str, str]] = []

    def start(self, robots: bool = True, workers: int = 1) -> defer.Deferred[None]:
        self.config = FetchConfig(robots=robots, timeout=20)
        self.fetcher = Fetcher(reactor, self.config, on_address=lambda host, address: self.told.append((host, address)))
        self.rules = rules_of(RAW)
        self.pool = FetchPool(reactor, self.fetcher, self.config, self.rules, workers)
        self.pool.startService()
        self.addCleanup(self.fetcher.close)
        self.addCleanup(lambda: self.pool.stopService() if self.pool.running else None)
        return self.pool.ready()

    @defer.inlineCallbacks
    def test_a_page_is_fetched_parsed_and_compressed_in_a_child(self) -> Any:
        """A detail page's Extracted comes back parsed as the main process would parse it, compressed with the preset
        given; its body is not sent back; a list page is parsed as a list; no kind: the body comes back unparsed."""
        yield self.start()
        self.assertTrue(self.pool.usable(self.fetcher))
        detail = yield self.pool.fetch(self.base + "/p/1", kind="detail", preset=1)
        self.assertEqual((detail.status, detail.final_url, detail.body), (200, self.base + "/p/1", b""))
        here = extract(self.base + "/p/1", body_of("/p/1"), "text/html", "detail", 0.0, 200, self.rules)
        got = detail.parsed
        self.assertEqual((got.details, got.lists, got.item["title"], got.digest),
                         (here.details, here.lists, here.item["title"], here.digest))
        self.assertEqual(lzma.decompress(got.compressed), body_of("/p/1"))
        self.assertTrue(got.line.startswith('{"title":"Page /p/1",'), got.line)  # the item's JSON line
        listed = yield self.pool.fetch(self.base + "/c/1", kind="list")
        self.assertEqual((listed.parsed.lists, listed.parsed.details, listed.parsed.compressed),
                         ([self.base + "/c/5"], [self.base + "/p/77"], None))
        nothing = yield self.pool.fetch(self.base + "/scripted", kind="detail", preset=1)  # (no links, no fields:
        self.assertEqual((nothing.body, nothing.parsed.details), (SCRIPTED, []))  # its body for the JavaScript hint)
        raw = yield self.pool.fetch(self.base + "/c/2")
        self.assertEqual((raw.parsed, raw.body), (None, body_of("/c/2")))
        self.assertEqual(self.pool.answered_count, 4)
        self.assertEqual(self.told, [])
        port = self.port.getHost().port
        named = yield self.pool.fetch(f"http://localhost:{port}/p/4", kind="detail")
        self.assertEqual(named.status, 200)
        # the lookups of the main process (for robots.txt) and of the child (for the page), each told (per-IP)
        self.assertEqual(self.told, [(f"localhost:{port}", "127.0.0.1")] * 2)

    @defer.inlineCallbacks
    def test_a_page_is_parsed_with_the_version_of_the_rules_asked_for(self) -> Any:
        """A worker job's own rules (another version) parse its pages; the next fetch without them, the pool's."""
        yield self.start(robots=False)
        other = self.rules.with_sites(rules_of({"sites": [dict(RAW["sites"][0], fields={"heading": "css:h1::text"})]})
                                      .sites)
        job = yield self.pool.fetch(self.base + "/p/6", kind="detail", rules=other)
        node = yield self.pool.fetch(self.base + "/p/6", kind="detail")
        self.assertEqual((job.parsed.item.get("heading"), job.parsed.item.get("title")), ("Page /p/6", None))
        self.assertEqual((node.parsed.item.get("heading"), node.parsed.item.get("title")), (None, "Page /p/6"))

    @defer.inlineCallbacks
    def test_robots_txt_and_redirects_stay_in_the_main_process(self) -> Any:
        """A URL robots.txt disallows never reaches a child or the site; a redirect comes back unfollowed and the
        main process follows it, checking its target's robots.txt; each URL is requested once."""
        yield self.start()
        denied = yield self.pool.fetch(self.base + "/private/a", kind="detail")
        self.assertEqual(denied.status, st.ROBOTS_DENIED)
        moved = yield self.pool.fetch(self.base + "/moved", kind="detail")
        self.assertEqual((moved.status, moved.url, moved.final_url, moved.redirects),
                         (200, self.base + "/moved", self.base + "/p/9", [self.base + "/p/9"]))
        self.assertEqual((moved.parsed, moved.body), (None, body_of("/p/9")))  # parsed by the caller, as a redirect
        to_private = yield self.pool.fetch(self.base + "/moved-private", kind="detail")
        self.assertEqual((to_private.status, to_private.final_url), (st.ROBOTS_DENIED, self.base + "/private/x"))
        self.assertEqual(sorted(self.site.requests), ["/moved", "/moved-private", "/p/9", "/robots.txt"])

    @defer.inlineCallbacks
    def test_a_child_that_dies_fails_what_it_held_and_another_takes_its_place(self) -> Any:
        """A fetch held by a child that is killed fires as a network error naming the child (the pool retries it);
        a new child starts and fetches."""
        yield self.start(robots=False)
        held = self.pool.fetch(self.base + "/slow", kind="detail")
        yield self.until(lambda: self.site.held)
        self.assertEqual(self.pool.status(), {"processes": 1, "up": 1, "in_flight": 1, "answered": 0, "exited": 0})
        os.kill(self.pool.pids()[0], signal.SIGKILL)
        result = yield held
        self.assertEqual((result.status, result.url), (st.NETWORK_ERROR, self.base + "/slow"))
        self.assertIn("fetch worker 0 exited before answering", result.reason)
        yield self.until(lambda: self.pool.usable(self.fetcher))
        after = yield self.pool.fetch(self.base + "/p/2", kind="detail")
        self.assertEqual((after.status, after.parsed.item["title"]), (200, "Page /p/2"))
        self.assertEqual(self.pool.status(), {"processes": 1, "up": 1, "in_flight": 0, "answered": 1, "exited": 1})

    @defer.inlineCallbacks
    def test_a_child_that_never_starts_leaves_its_fetches_to_the_main_process(self) -> Any:
        """A child that exits before it is ready (a broken install) took no request: the main process fetches what
        was sent to it (parsed there later), and nothing is failed for it."""
        config = FetchConfig(robots=False)
        fetcher = Fetcher(reactor, config)
        self.addCleanup(fetcher.close)

        def broken(reactor_: Any, child: FetchChild) -> None:
            reactor_.spawnProcess(child, sys.executable, [sys.executable, "-c", "import sys; sys.exit(3)"])

        made: list[defer.Deferred[FetchResult]] = []
        fetch = fetcher.fetch
        fetcher.fetch = lambda *a, **k: made.append(fetch(*a, **k)) or made[-1]  # type: ignore[method-assign]
        pool = FetchPool(reactor, fetcher, config, rules_of(RAW), 1, spawn=broken, restart_delay=60)
        pool.startService()
        self.addCleanup(pool.stopService)
        fetching = pool.fetch(self.base + "/p/5", kind="detail")
        held = pool.fetch(self.base + "/slow", kind="detail")  # (fetched here too; cancelled while it is)
        result = yield fetching
        self.assertEqual((result.status, result.parsed, result.body), (200, None, body_of("/p/5")))
        yield self.until(lambda: self.site.held)
        self.assertEqual(sorted(self.site.requests), ["/p/5", "/slow"])
        held.cancel()
        self.assertEqual((yield held).status, st.TIMEOUT)
        self.site.release()  # its answer comes, and goes nowhere
        yield self.until(lambda: made[-1].called)
        ended: list[Any] = []
        made[-1].addBoth(ended.append)
        self.assertEqual(ended, [None])  # (not an AlreadyCalledError: the cancelled fetch ends quietly)

    @defer.inlineCallbacks
    def test_a_cancelled_fetch_gives_its_result_and_the_child_goes_on(self) -> Any:
        """Cancelling a fetch (a halted job, a stop) fires it as a timeout, as the fetcher's own cancel does; the
        child cancels its request and answers the next."""
        yield self.start(robots=False)
        held = self.pool.fetch(self.base + "/slow", kind="detail")
        yield self.until(lambda: self.site.held)
        held.cancel()
        result = yield held
        self.assertEqual(result.status, st.TIMEOUT)
        self.assertEqual(self.pool.in_flight, 0)
        after = yield self.pool.fetch(self.base + "/p/3", kind="detail")
        self.assertEqual(after.status, 200)

    @defer.inlineCallbacks
    def test_a_stop_lets_the_children_answer_what_they_hold(self) -> Any:
        """stopService closes the children's input: a fetch in flight is still answered, then they exit."""
        yield self.start(robots=False, workers=2)
        held = self.pool.fetch(self.base + "/slow", kind="detail")
        yield self.until(lambda: self.site.held)
        pids = self.pool.pids()
        stopped = self.pool.stopService()
        self.assertFalse(stopped.called)
        self.assertFalse(self.pool.usable(self.fetcher))
        self.site.release()
        result = yield held
        self.assertEqual((result.status, result.parsed.item["title"]), (200, "Page /slow"))
        yield stopped
        for pid in pids:
            self.assertRaises(ProcessLookupError, os.kill, pid, 0)

    def until(self, condition: Any) -> defer.Deferred[None]:
        """Fires once ``condition()`` holds (polled on the reactor's turns: real processes, real sockets)."""
        d: defer.Deferred[None] = defer.Deferred()

        def check() -> None:
            if condition():
                d.callback(None)
            else:
                reactor.callLater(0.01, check)

        check()
        return d


class Transport:
    """A child's transport in memory."""

    pid = 4242

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.signals: list[str] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def signalProcess(self, name: str) -> None:
        self.signals.append(name)

    def closeStdin(self) -> None:
        pass


class WatchdogTests(SynchronousTestCase):
    def test_a_child_holding_a_fetch_past_its_timeout_and_the_grace_is_killed(self) -> None:
        """The child's own fetcher gives up at the timeout; a child still holding a fetch GRACE seconds later is
        stuck: it is killed (what it held then fails as a network error)."""
        clock = Clock()
        children: list[FetchChild] = []

        def spawn(_: Any, child: FetchChild) -> None:
            child.transport = Transport()  # type: ignore[assignment]
            children.append(child)
            child.connectionMade()

        config = FetchConfig(timeout=30)
        pool = FetchPool(clock, Fetcher(clock, config), config, rules_of(RAW), 1, spawn=spawn)  # type: ignore[arg-type]
        pool.startService()
        child = children[0]
        child.message(("ready", 4242))
        pool.fetch("http://127.0.0.1:9/p/1", kind="detail")
        clock.advance(30 + GRACE - 1)
        self.assertEqual(child.transport.signals, [])  # type: ignore[attr-defined]
        clock.advance(2)
        self.assertEqual(child.transport.signals, ["KILL"])  # type: ignore[attr-defined]


class TakesTests(SynchronousTestCase):
    def test_urls_of_a_site_that_keeps_cookies_and_a_warc_fetcher_stay_in_the_main_process(self) -> None:
        """A site with ``cookies = true`` keeps one jar (the main process's); a fetcher that keeps its answers (WARC)
        archives what it fetches: neither goes to a child; another fetcher's fetches neither."""
        from spiderd.config.settings import from_dict

        raw = {"sites": [dict(RAW["sites"][0]), {"name": "jar", "allowed_hosts": ["jar.example"], "cookies": True}]}
        clock = Clock()
        config = FetchConfig(sites=from_dict(raw).sites)
        fetcher = Fetcher(clock, config)
        pool = FetchPool(clock, fetcher, config, rules_of(raw), 1,  # type: ignore[arg-type]
                         spawn=lambda _, child: setattr(child, "transport", Transport()))
        pool.startService()
        self.assertEqual((pool.takes(fetcher, "http://localhost/p/1"), pool.takes(fetcher, "http://jar.example/p/1")),
                         (True, False))
        self.assertFalse(pool.takes(Fetcher(clock, config), "http://localhost/p/1"))
        fetcher.keep_answers()
        self.assertFalse(pool.takes(fetcher, "http://localhost/p/1"))


class WireTests(SynchronousTestCase):
    def test_a_result_crosses_the_pipe_whole(self) -> None:
        from spiderd.core.conditional import Validators

        result = FetchResult("http://a/", 200, "http://a/b", b"body", "text/html", ["http://a/b"], 4, 0.5,
                             None, None, "noindex", 3.0, Validators("\"e\"", 7), [("Etag", "\"e\"")], "HTTP/1.0",
                             "OK", [("User-Agent", "x")], 12.5)
        self.assertEqual(result_from(result_fields(result)), result)
