"""The render pool's supervision (spiderd.engine.render), on a Clock with stand-in browser children (no browser
is started): a hung browser is killed and its pages rendered again once, then failed with the reason; a browser
past max_pages or max_rss_mb is replaced without losing a page; the pool's bound holds pages back."""

from __future__ import annotations

import marshal
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from spiderd.config.sections import RenderSection
from spiderd.core.rules import Site
from spiderd.engine.browser import BrowserChild
from spiderd.engine.politeness import Politeness
from spiderd.engine.render import HANG_GRACE, MEMORY_EVERY, RenderFailed, Rendered, RenderPool
from spiderd.engine.subrequests import HostTurns, SubRequests
from spiderd.fetch.fetcher import FetchResult
from spiderd.fetch.parseworker import FrameDecoder

SITE = Site("shop", ("shop.example",), render="always")


class Transport:
    """What the pool writes to a stand-in child, and the signals it sends; its pid is above Linux's largest
    (2**22), so no real process is ever signalled."""

    def __init__(self, child: BrowserChild, pid: int) -> None:
        self.pid = pid
        self.child, self.frames, self.signals, self.closed = child, FrameDecoder(), [], False
        self.ended = False
        self.sent: list[tuple[Any, ...]] = []

    def write(self, data: bytes) -> None:
        self.sent.extend(marshal.loads(p) for p in self.frames.feed(data))

    def closeStdin(self) -> None:
        self.closed = True

    def signalProcess(self, name: str) -> None:
        self.signals.append(name)
        self.child.processEnded(Failure(ProcessTerminated(signal=9)))


class PoolTests(SynchronousTestCase):
    """Supervision without a browser."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.children: list[BrowserChild] = []
        self.memory: dict[int, int] = {}
        self.pool = self.make()

    def make(self, **config: Any) -> RenderPool:
        knobs = {"browsers": 1, "pages_per_browser": 2, "navigation_timeout": 5.0, "settle_timeout": 5.0, **config}
        subrequests = SubRequests(self.clock, None, HostTurns(self.clock, Politeness()))  # type: ignore[arg-type]  # (no fetch here)
        pool = RenderPool(self.clock, RenderSection(**knobs), subrequests, starter=self.start,
                          rss=lambda pid, tree: self.memory.get(pid))
        pool.startService()
        return pool

    def start(self, reactor: Any, child: BrowserChild) -> None:
        child.transport = Transport(child, 2**22 + 1 + len(self.children))  # type: ignore[assignment]
        child.pid = child.transport.pid
        self.children.append(child)
        child.ready = True

    def render(self, n: int) -> Deferred[Rendered]:
        result = FetchResult(f"http://shop.example/p/{n}", 200, f"http://shop.example/p/{n}", b"<html></html>",
                             "text/html", headers=[])
        return self.pool.render(result, SITE)

    def rendering(self, child: BrowserChild) -> list[int]:
        return [m[1] for m in child.transport.sent if m[0] == "render"]  # type: ignore[attr-defined]

    def answer(self, child: BrowserChild, rid: int) -> None:
        self.pool.browser_message(child, ("done", rid, b"<html>dom</html>", "u", [], 0, 0))

    def test_bound_holds_pages_back(self) -> None:
        """pages_per_browser pages go to the browser; the third waits until one is done."""
        self.pool.browser_ready(self.children[0])
        done = [self.render(n) for n in range(3)]
        child = self.children[0]
        self.assertEqual(self.rendering(child), [1, 2])
        self.answer(child, 1)
        self.assertEqual(self.successResultOf(done[0]).html, b"<html>dom</html>")
        self.assertEqual(self.rendering(child), [1, 2, 3])

    def test_hung_browser_killed_and_pages_rendered_again_once(self) -> None:
        """A browser holding a page past its deadline is killed; its pages go to the next browser; when that one
        hangs too, they fail naming why."""
        self.pool.browser_ready(self.children[0])
        page = self.render(1)
        self.clock.advance(5 + 5 + HANG_GRACE + 1)
        self.assertEqual(self.children[0].transport.signals, ["KILL"])  # type: ignore[attr-defined]
        self.clock.advance(0)  # the restart
        second = self.children[1]
        self.pool.browser_ready(second)
        self.assertEqual(self.rendering(second), [1])
        self.assertNoResult(page)
        self.clock.advance(5 + 5 + HANG_GRACE + 1)
        failure = self.failureResultOf(page, RenderFailed)
        self.assertIn("its browser died 2 times", failure.getErrorMessage())
        self.assertIn("the browser hung", failure.getErrorMessage())

    def test_replaced_past_max_pages_and_memory(self) -> None:
        """A browser that was given max_pages pages is replaced at once (it finishes its page, then its input
        closes); so is one whose processes hold more than max_rss_mb."""
        self.pool = self.make(max_pages=1)
        first, started = self.children[-1], len(self.children)
        self.pool.browser_ready(first)
        page = self.render(1)
        self.assertEqual(len(self.children), started + 1)  # the replacement, already started
        self.assertFalse(first.transport.closed)  # type: ignore[attr-defined]
        self.answer(first, 1)
        self.successResultOf(page)
        self.assertTrue(first.transport.closed)  # type: ignore[attr-defined]
        self.pool = self.make(max_rss_mb=100)
        big = self.children[-1]
        self.memory[big.pid] = 101 * 2**20  # type: ignore[index]
        self.clock.pump([1.0] * MEMORY_EVERY)
        self.assertTrue(big.retiring)
        self.assertEqual(self.pool.counts["replaced"], 1)

    def test_failures_and_restarts_counted_by_reason_in_status_and_metrics(self) -> None:
        """A page that broke its navigation bound, one whose browser hung twice, a browser past max_pages: the
        status counts failures and restarts by reason, and /metrics exposes them with the pages rendered."""
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.parser import text_string_to_metric_families

        from spiderd.engine.fetchmode import FetchModes
        from spiderd.fetch.extract import Rules
        from spiderd.ops.web.history import History
        from spiderd.ops.web.metrics import NodeCollector
        from spiderd.ops.web.node import Node, status

        self.pool = self.make(max_pages=3)
        first = self.children[-1]
        self.pool.browser_ready(first)
        slow, rendered, hung = self.render(1), self.render(2), self.render(3)
        self.pool.browser_message(first, ("failed", 1, "TimeoutError: Timeout 5000ms exceeded.", "navigation_timeout"))
        self.answer(first, 2)  # page 3 went to it as its third: it is replaced
        self.failureResultOf(slow, RenderFailed)
        self.successResultOf(rendered)
        self.pool.browser_ready(self.children[-1])
        for _ in range(2):  # page 3's browser hangs (killed: it was replaced already); so does the next one
            self.clock.advance(5 + 5 + HANG_GRACE + 1)
            self.clock.advance(0)
            self.pool.browser_ready(self.children[-1])
        self.failureResultOf(hung, RenderFailed)
        answer = self.pool.status()
        self.assertEqual(answer["failures"], {"navigation_timeout": 1, "browser_died": 1})
        self.assertEqual(answer["restarts"], {"max_pages": 1, "hung": 1})

        node = Node("all", self.clock, render=FetchModes(self.clock, Rules([]), self.pool))
        history = History(self.clock, node.pages, lambda: None)  # type: ignore[arg-type,return-value]
        self.assertEqual(self.successResultOf(status(node, history))["render"]["failures"], answer["failures"])
        registry = CollectorRegistry(auto_describe=False)
        registry.register(NodeCollector(node, history))
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples}
        self.assertEqual(samples[("spiderd_render_pages_total", ())], 1)
        self.assertEqual(samples[("spiderd_render_failures_total", (("reason", "navigation_timeout"),))], 1)
        self.assertEqual(samples[("spiderd_render_failures_total", (("reason", "browser_died"),))], 1)
        self.assertEqual(samples[("spiderd_render_browser_restarts_total", (("reason", "hung"),))], 1)
        self.assertEqual(samples[("spiderd_render_browser_restarts_total", (("reason", "max_pages"),))], 1)
        self.assertEqual(samples[("spiderd_render_browsers", ())], 1)

    def test_browsers_replaced_one_at_a_time(self) -> None:
        """Two browsers of two pages each, max_pages 8: the first is due after 4 pages, the second after 8, their
        successors after 8 each; and one is replaced at a time (a browser due while another finishes its pages
        beside its successor renders on until that one exited): never two replaced browsers' processes at once."""
        self.pool = self.make(browsers=2, pages_per_browser=2, max_pages=8)
        first, second = self.children[-2:]
        self.assertEqual([first.budget, second.budget], [4, 8])
        for n in range(12):  # four pages at a time, one after the other, then all answered
            pages = []
            for k in range(4):
                pages.append(self.render(4 * n + k))
                self.assertLessEqual(self.pool.status()["retiring"], 1)
            for child in [c for c in self.children if c.pages]:
                for rid in list(child.pages):
                    self.answer(child, rid)
                    self.assertLessEqual(self.pool.status()["retiring"], 1)
            for page in pages:
                self.successResultOf(page)
            for child in self.children:  # a closed child exits
                if child.transport.closed and not child.transport.ended:  # type: ignore[attr-defined]
                    child.transport.ended = True  # type: ignore[attr-defined]
                    child.processEnded(Failure(ProcessDone(0)))
        self.assertGreaterEqual(self.pool.restarts["max_pages"], 4)
        self.assertEqual([c.budget for c in self.children[-2:]], [8, 8])

    def test_a_due_browser_waits_while_another_is_replaced(self) -> None:
        """A browser that comes due while a replaced one still finishes its page renders on; it is replaced once
        that one exited."""
        self.pool = self.make(browsers=2, pages_per_browser=1, max_pages=2)
        old = self.children[-2]
        pages = [self.render(n) for n in range(4)]  # 0: the first browser's only page (due: replaced)
        self.assertTrue(old.retiring)
        successor = self.children[-1]
        self.answer(successor, next(iter(successor.pages)))  # page 3 goes to it, its second: due, but old holds on
        self.assertEqual(successor.rendered, 2)
        self.assertFalse(successor.retiring)
        self.assertEqual(self.pool.status()["retiring"], 1)
        self.answer(old, next(iter(old.pages)))
        old.processEnded(Failure(ProcessDone(0)))  # (its input closed once its page was answered)
        self.assertTrue(successor.retiring)
        self.assertEqual(self.pool.status()["retiring"], 1)
        for page in pages[:2]:
            self.successResultOf(page)

    def test_a_reload_replaces_the_browsers_one_at_a_time_with_the_new_bounds(self) -> None:
        """A reload's [render]: pages_per_browser at once; each browser replaced by one started with the new bounds,
        one at a time, a page it holds finished under its own (not taken for hung by the new, shorter ones);
        ``browsers`` stays the start's."""
        self.pool = self.make(browsers=2, pages_per_browser=1, max_pages=100)
        first, second = self.children[-2:]
        for child in (first, second):
            self.pool.browser_ready(child)
        held = self.render(1)
        self.assertEqual(len(first.pages) + len(second.pages), 1)
        holder = first if first.pages else second
        self.pool.reconfigure(RenderSection(browsers=5, pages_per_browser=3, max_pages=100, navigation_timeout=1.0,
                                            settle_timeout=1.0))
        self.assertEqual(len(self.pool.children), 2)
        self.assertEqual(self.pool.status()["retiring"], 1)  # one replaced, the other renders on meanwhile
        self.assertEqual(self.pool.restarts["reconfigured"], 1)
        fresh = self.children[-1]
        self.assertEqual(fresh.transport.sent[0][3:5], (1.0, 1.0))  # type: ignore[attr-defined]  # its init
        self.pool.browser_ready(fresh)
        self.clock.advance(1 + 1 + HANG_GRACE + 1)  # past the new deadline, within the old one (5 + 5)
        self.assertEqual(holder.transport.signals, [])  # type: ignore[attr-defined]
        self.answer(holder, next(iter(holder.pages)))
        self.successResultOf(held)
        for child in list(self.pool._retiring):
            child.transport.ended = True  # type: ignore[attr-defined]
            child.processEnded(Failure(ProcessDone(0)))
        pages = [self.render(n) for n in range(2, 5)]  # the next page replaces the other old browser
        self.assertEqual(self.pool.restarts["reconfigured"], 2)
        self.assertTrue(all(c.init == self.pool.children[0].init for c in self.pool.children if c is not None))
        self.assertEqual(len(self.children[-1].pages) + len(fresh.pages), 3)  # up to 3 pages a browser now
        for child in self.children:
            for rid in list(child.pages):
                self.answer(child, rid)
        for page in pages:
            self.successResultOf(page)
