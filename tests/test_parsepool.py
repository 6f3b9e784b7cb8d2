"""Tests for spiderd.fetch.parsepool and spiderd.fetch.parseworker: framing, dispatch, crashes, restarts and shutdown.

Dispatch, backoff and deadlines run against a fake process reactor (a Clock whose children answer in memory);
the rest spawns real children on the global reactor, because real processes need a real reactor.
"""

from __future__ import annotations

import io
import lzma
import marshal
import os
import signal
import subprocess
import sys
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase

from spiderd.core.itemline import json_line
from spiderd.fetch.extract import MAX_LINKS, Extracted, extract
from spiderd.fetch.parsepool import ParsePool, ParsePoolUnavailable, ParseWorkerDied
from .helpers import ClockedReactor, needs_affinity, pinned_to_one_cpu, rules_of
from spiderd.fetch.parseworker import (FrameDecoder, FrameError, Input, answer, extracted_from, frame, init_message,
                                       message_from, request_frame, rules_from, serve)

RAW = {
    "sites": [
        {
            "name": "shop",
            "allowed_hosts": ["shop.example.com"],
            "list_urls": [r"/c/"],
            "detail_urls": [r"/p/\d+$"],
            "fields": {"title": "css:h1::text", "tags": {"css": "li.tag::text", "all": True}},
        }
    ]
}


def page(i: int, links: int = 30) -> tuple[str, bytes, str]:
    """A small list or detail page (url, body, kind) with some links, a title and tags."""
    detail = i % 3 == 0
    url = f"https://shop.example.com/p/{i}" if detail else f"https://shop.example.com/c/{i}"
    anchors = "".join(f'<a href="/{"p" if j % 2 else "c"}/{i * 100 + j}">x</a>' for j in range(links))
    tags = "".join(f'<li class="tag">t{j}</li>' for j in range(3))
    body = f"<html><body><h1>Title {i}</h1><ul>{tags}</ul>{anchors}<a href='https://off.example/'>o</a></body></html>"
    return url, body.encode(), "detail" if detail else "list"


def parse(pool: ParsePool, i: int) -> defer.Deferred[Extracted]:
    """Parse page ``i`` through the pool."""
    url, body, kind = page(i)
    return pool.parse(url, body, "text/html", kind, 1000.0 + i, 200)


def expected(pool: ParsePool, i: int) -> Extracted:
    """What a child gives for page ``i``: what inline extract gives, and its item's JSON line."""
    url, body, kind = page(i)
    result = extract(url, body, "text/html", kind, 1000.0 + i, 200, pool.rules)
    result.line = json_line(result.item) if result.item is not None else None
    return result


# -- the worker side, in memory --------------------------------------------------------------------------------


class WorkerTests(SynchronousTestCase):
    """The child's loop and the framing, without processes."""

    def test_frames_split_anywhere(self) -> None:
        """Frames fed one byte at a time come out whole and in order."""
        data = frame(("a", 1)) + frame((b"x" * 1000, None)) + frame([])
        decoder = FrameDecoder()
        out = [marshal.loads(p) for i in range(len(data)) for p in decoder.feed(data[i : i + 1])]
        self.assertEqual(out, [("a", 1), (b"x" * 1000, None), []])

    def test_oversized_frame_rejected(self) -> None:
        """A frame longer than the limit raises instead of buffering it."""
        with self.assertRaises(FrameError):
            FrameDecoder(max_length=10).feed(frame(b"x" * 100))

    def test_serve_answers_in_order_and_exits_at_eof(self) -> None:
        """serve() says ready, answers each request like extract, and returns at end of input."""
        pool = ParsePool(Clock(), rules_of(RAW), 0)
        requests = [(i, *page(i)[:2], "text/html", page(i)[2], 1000.0 + i, 200, None, None) for i in range(5)]
        requests[3] = requests[3][:-2] + (1, None)  # a request asking for the page compressed
        read_end, write_end = os.pipe()
        self.addCleanup(os.close, read_end)
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(frame(init_message(pool.rules)) + b"".join(b"".join(request_frame(*r)) for r in requests))
        stdout = io.BytesIO()
        self.assertEqual(serve(Input(read_end), stdout), 0)
        messages = [marshal.loads(p) for p in FrameDecoder().feed(stdout.getvalue())]
        self.assertEqual(messages[0], ("ready", os.getpid()))
        self.assertEqual([m[0] for m in messages[1:]], list(range(5)))
        self.assertEqual(Extracted(*messages[2][1:]), expected(pool, 1))
        self.assertEqual(lzma.decompress(Extracted(*messages[4][1:]).compressed or b""), requests[3][2])

    def test_answer_carries_the_items_line(self) -> None:
        """A detail page's answer carries its item's JSON line (the bytes its items file gets); a list page's, none."""
        rules = rules_of(RAW)
        url, body, kind = page(3)
        detail = extracted_from(answer(rules, MAX_LINKS, (7, url, body, "text/html", kind, 1003.0, 200, None, None)))
        self.assertIsNotNone(detail.item)
        self.assertEqual(detail.line, json_line(detail.item or {}))
        url, body, kind = page(1)
        listing = extracted_from(answer(rules, MAX_LINKS, (8, url, body, "text/html", kind, 1001.0, 200, None, None)))
        self.assertEqual((listing.item, listing.line), (None, None))

    def test_child_starts_without_twisted_or_urllib_request(self) -> None:
        """A child's imports leave out Twisted and urllib.request (w3lib's URL module, imported on the first URL off
        the canonical fast path): its first page, the crawl's first, waits for its start."""
        code = "import sys, spiderd.fetch.parseworker; print(sorted({'twisted', 'urllib.request'} & set(sys.modules)))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        self.assertEqual(out.split(), ["[]"])

    def test_a_request_frame_carries_its_body_after_its_payload(self) -> None:
        """A page request's frame is its marshal payload and then its body, the very object given (not copied into
        the payload); decoded, it is the request; a control message decodes as it was sent."""
        body = b"<html>" + b"x" * 50_000
        request = (7, "https://shop.example.com/p/1", body, "text/html", "detail", 1000.0, 200, None, None)
        parts = request_frame(*request)
        self.assertIs(parts[2], body)
        self.assertLess(len(parts[1]), 200)
        data = b"".join(parts) + frame(("use", "abc")) + b"".join(request_frame(8, "https://a/", b"", None, "list",
                                                                                  1.0, 200, None, None))
        self.assertEqual([message_from(p) for p in FrameDecoder().feed(data)],
                         [request, ("use", "abc"), (8, "https://a/", b"", None, "list", 1.0, 200, None, None)])

    def test_input_knows_what_is_waiting(self) -> None:
        """Input.waiting() is true while a request is buffered or readable, false when the pipe is empty."""
        read_end, write_end = os.pipe()
        self.addCleanup(os.close, read_end)
        self.addCleanup(os.close, write_end)
        stdin = Input(read_end)
        self.assertFalse(stdin.waiting())
        os.write(write_end, frame(1) + frame(2))
        self.assertTrue(stdin.waiting())
        self.assertEqual(stdin.next(), 1)
        self.assertTrue(stdin.waiting())
        self.assertEqual(stdin.next(), 2)
        self.assertFalse(stdin.waiting())


# -- dispatch, backoff and deadlines on a fake process reactor ---------------------------------------------------


class FakeTransport:
    """The parts of IProcessTransport the pool uses, recording what it is asked to do."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.data = b""
        self.stdin_closed = False
        self.signals: list[str] = []

    def write(self, data: bytes) -> None:
        self.data += data

    def closeStdin(self) -> None:
        self.stdin_closed = True

    def signalProcess(self, name: str) -> None:
        self.signals.append(name)


class FakeProcessReactor(Clock):
    """A Clock whose spawnProcess makes in-memory children; ``answer`` runs the real worker logic."""

    def __init__(self) -> None:
        super().__init__()
        self.children: list[Any] = []
        self.state: dict[Any, dict[str, Any]] = {}

    def spawnProcess(self, protocol: Any, executable: str, args: list[str], env: Any = None, **kw: Any) -> Any:
        transport = FakeTransport(1000 + len(self.children))
        protocol.makeConnection(transport)
        self.children.append(protocol)
        return transport

    def answer(self, child: Any, count: int | None = None) -> int:
        """Let ``child`` read its input and answer up to ``count`` requests (all it gets by default)."""
        state = self.state.setdefault(child, {"inbox": [], "decoder": FrameDecoder()})
        done = 0
        while count is None or done < count:
            state["inbox"] += [message_from(p) for p in state["decoder"].feed(child.transport.data)]
            child.transport.data = b""
            if not state["inbox"]:
                break
            message = state["inbox"].pop(0)
            if message[0] == "init":
                state["rules"], state["max_links"] = rules_from(message)
                child.childDataReceived(1, frame(("ready", child.transport.pid)))
                continue
            child.childDataReceived(1, frame(answer(state["rules"], state["max_links"], message)))
            done += 1
        return done

    def end(self, child: Any, signal_number: int | None = 9) -> None:
        """The child exits (killed by a signal, or cleanly when None)."""
        reason = ProcessTerminated(signal=signal_number) if signal_number else ProcessDone(0)
        child.processEnded(Failure(reason))


def restart_delay(pool: ParsePool, fake: FakeProcessReactor) -> float:
    """The delay of the one scheduled restart."""
    (call,) = [c for c in fake.getDelayedCalls() if c.func == pool._spawn]
    return call.getTime() - fake.seconds()


class DispatchTests(SynchronousTestCase):
    """Queueing, failure handling, restarts and stop, with time and children under the test's control."""

    def make(self, workers: int = 1, **options: Any) -> tuple[ParsePool, FakeProcessReactor]:
        fake = FakeProcessReactor()
        pool = ParsePool(fake, rules_of(RAW), workers, **options)
        pool.startService()
        return pool, fake

    def test_answers_match_inline_extract(self) -> None:
        """A child's answers are exactly what extract gives inline."""
        pool, fake = self.make()
        d = parse(pool, 3)
        self.assertNoResult(d)
        fake.answer(fake.children[0])
        self.assertEqual(self.successResultOf(d), expected(pool, 3))
        self.successResultOf(pool.ready())

    def test_least_loaded_and_bounded_queues(self) -> None:
        """Requests go to the least-loaded child, at most queue_size each; the rest wait and drain in order."""
        pool, fake = self.make(workers=2, queue_size=2)
        ds = [parse(pool, i) for i in range(6)]
        a, b = fake.children
        self.assertEqual((len(a.pending), len(b.pending), pool.in_flight), (2, 2, 6))
        self.assertTrue(pool.needs_backout())
        fake.answer(a, 1)
        self.assertEqual(len(a.pending), 2)
        fake.answer(a), fake.answer(b), fake.answer(a)
        self.assertEqual([self.successResultOf(d) for d in ds], [expected(pool, i) for i in range(6)])
        self.assertEqual(pool.in_flight, 0)
        self.assertFalse(pool.needs_backout())

    def test_full_queue_fails_fast(self) -> None:
        """Beyond max_waiting, parse fails at once instead of queueing forever."""
        pool, fake = self.make(queue_size=1, max_waiting=1)
        parse(pool, 0), parse(pool, 1)
        self.failureResultOf(parse(pool, 2), ParsePoolUnavailable)

    def test_dead_child_fails_its_requests_and_restarts(self) -> None:
        """A killed child's requests fail with ParseWorkerDied; with no child left, requests fail fast until restart."""
        pool, fake = self.make(queue_size=1)
        held, waiting = parse(pool, 0), parse(pool, 1)
        fake.end(fake.children[0])
        failure = self.failureResultOf(held, ParseWorkerDied)
        self.assertIn("pid 1000", str(failure.value))
        self.failureResultOf(waiting, ParsePoolUnavailable)
        self.failureResultOf(parse(pool, 2), ParsePoolUnavailable)
        fake.advance(0.1)
        d = parse(pool, 3)
        fake.answer(fake.children[1])
        self.assertEqual(self.successResultOf(d), expected(pool, 3))

    def test_other_children_keep_working(self) -> None:
        """When one of two children dies, waiting requests go to the survivor."""
        pool, fake = self.make(workers=2, queue_size=1)
        ds = [parse(pool, i) for i in range(4)]
        fake.end(fake.children[0])
        self.failureResultOf(ds[0], ParseWorkerDied)
        fake.answer(fake.children[1])
        fake.answer(fake.children[1])
        self.assertEqual([self.successResultOf(d) for d in ds[1:]], [expected(pool, i) for i in (1, 2, 3)])

    def test_crash_at_start_backs_off_with_a_cap(self) -> None:
        """A child dying at start is restarted after 0.1, 0.2, 0.4 ... seconds, capped; an answer resets that."""
        pool, fake = self.make(max_restart_delay=1.0)
        delays = []
        for _ in range(6):
            fake.end(fake.children[-1], signal_number=None)
            delays.append(round(restart_delay(pool, fake), 3))
            fake.advance(delays[-1])
        self.assertEqual(delays, [0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
        d = parse(pool, 1)
        fake.answer(fake.children[-1])
        self.successResultOf(d)
        fake.end(fake.children[-1])
        self.assertAlmostEqual(restart_delay(pool, fake), 0.1)
        self.successResultOf(pool.stopService())
        self.assertEqual(fake.getDelayedCalls(), [])

    def test_stop_finishes_in_flight_then_closes_stdin(self) -> None:
        """stopService refuses new pages, hands over waiting ones, closes stdin and fires when children exit."""
        pool, fake = self.make(queue_size=1)
        ds = [parse(pool, i) for i in range(3)]
        stopped = pool.stopService()
        child = fake.children[0]
        self.assertTrue(child.transport.stdin_closed)
        self.assertEqual(len(child.pending), 3)
        self.failureResultOf(parse(pool, 9), ParsePoolUnavailable)
        fake.answer(child)
        self.assertNoResult(stopped)
        fake.end(child, signal_number=None)
        self.successResultOf(stopped)
        self.assertEqual([self.successResultOf(d) for d in ds], [expected(pool, i) for i in range(3)])
        self.assertEqual(fake.getDelayedCalls(), [])

    def test_stop_deadline_kills_stuck_children(self) -> None:
        """A child still busy at the stop deadline is killed and its requests fail."""
        pool, fake = self.make(stop_timeout=5.0)
        d = parse(pool, 0)
        stopped = pool.stopService()
        fake.advance(4.9)
        self.assertEqual(fake.children[0].transport.signals, [])
        fake.advance(0.1)
        self.assertEqual(fake.children[0].transport.signals, ["KILL"])
        fake.end(fake.children[0])
        self.failureResultOf(d, ParseWorkerDied)
        self.successResultOf(stopped)
        self.assertEqual(fake.getDelayedCalls(), [])

    def test_watchdog_kills_a_child_that_stops_answering(self) -> None:
        """A child holding requests without answering for request_timeout is killed; its requests fail saying so."""
        pool, fake = self.make(request_timeout=10.0)
        fake.advance(30)
        self.assertEqual(fake.children[0].transport.signals, [])
        d = parse(pool, 1)
        fake.advance(9)
        self.assertEqual(fake.children[0].transport.signals, [])
        fake.advance(1)
        self.assertEqual(fake.children[0].transport.signals, ["KILL"])
        fake.end(fake.children[0])
        self.assertIn("no answer in 10.0s", str(self.failureResultOf(d, ParseWorkerDied).value))

    def test_a_child_over_its_memory_limit_is_replaced(self) -> None:
        """Past max_rss a child gets no new page: a new one takes its slot at once, the old one answers what it
        holds and exits, and nothing fails or restarts."""
        sizes = {1000: 600 * 2**20, 1001: 40 * 2**20}
        pool, fake = self.make(max_rss=512 * 2**20, rss=sizes.get, queue_size=8)
        old = fake.children[0]
        fake.answer(old)  # ready
        held = [parse(pool, i) for i in range(3)]
        fake.advance(1)  # the watchdog looks
        self.assertTrue(old.transport.stdin_closed)
        self.assertEqual((len(fake.children), pool.retired), (2, 1))
        new = fake.children[1]
        later = parse(pool, 3)
        fake.answer(new)
        self.assertEqual(self.successResultOf(later), expected(pool, 3))
        fake.answer(old)
        self.assertEqual([self.successResultOf(d) for d in held], [expected(pool, i) for i in range(3)])
        fake.end(old, None)
        self.assertEqual([c for c in fake.getDelayedCalls() if c.func == pool._spawn], [])
        self.assertEqual(pool.pids(), [1001])
        fake.advance(1)  # the new child is under the limit: it stays
        self.assertEqual((len(fake.children), new.transport.stdin_closed), (2, False))

    def test_answers_keep_the_watchdog_away(self) -> None:
        """A busy child that keeps answering is not killed, however long the queue stays non-empty."""
        pool, fake = self.make(request_timeout=10.0, queue_size=100)
        ds = [parse(pool, i) for i in range(20)]
        for _ in range(19):
            fake.advance(5)
            fake.answer(fake.children[0], 1)
        self.assertEqual(fake.children[0].transport.signals, [])
        fake.answer(fake.children[0])
        self.assertEqual(len([self.successResultOf(d) for d in ds]), 20)

    def test_ready_waiters_released_at_stop(self) -> None:
        """Waiting for workers that never come up ends when the pool stops."""
        pool, fake = self.make()
        ready = pool.ready()
        self.assertNoResult(ready)
        stopped = pool.stopService()
        self.failureResultOf(ready, ParsePoolUnavailable)
        fake.end(fake.children[0], signal_number=None)
        self.successResultOf(stopped)

    def test_protocol_error_kills_the_child(self) -> None:
        """An answer that matches no request, or garbage, makes the pool kill the child."""
        pool, fake = self.make()
        child = fake.children[0]
        child.childDataReceived(1, frame((42, [], [], None, 0, None, None)))
        child.childDataReceived(1, b"\xff\xff\xff\xff")
        self.assertEqual(child.transport.signals, ["KILL", "KILL"])

    def test_stderr_is_logged_not_parsed(self) -> None:
        """Output on the child's stderr goes to the log and does not disturb the frames."""
        from twisted.logger import capturedLogs, formatEvent

        pool, fake = self.make()
        d = parse(pool, 1)
        with capturedLogs() as events:
            fake.children[0].childDataReceived(2, b"Traceback: something\n")
        fake.answer(fake.children[0])
        self.successResultOf(d)
        self.assertEqual([formatEvent(e) for e in events], ["Parse worker 0 says: Traceback: something"])


class InlineTests(SynchronousTestCase):
    """workers=0: extract runs in the calling thread."""

    def test_inline_mode(self) -> None:
        """Results come back already fired, no process is started, and stop is immediate."""
        fake = FakeProcessReactor()
        pool = ParsePool(fake, rules_of(RAW), 0)
        self.failureResultOf(parse(pool, 1), ParsePoolUnavailable)
        pool.startService()
        self.assertEqual(self.successResultOf(parse(pool, 1)), expected(pool, 1))
        self.assertEqual(fake.children, [])
        self.successResultOf(pool.ready())
        self.successResultOf(pool.stopService())

    def test_workers_minus_one_is_cpu_count(self) -> None:
        """workers=-1 means one child per CPU this process may run on."""
        self.assertEqual(ParsePool(Clock(), rules_of(RAW), -1).workers, len(os.sched_getaffinity(0)))

    @needs_affinity
    def test_workers_minus_one_follows_the_affinity(self) -> None:
        """Pinned to one CPU (taskset -c 0), workers=-1 starts one child, not one per CPU of the machine."""
        with pinned_to_one_cpu():
            self.assertEqual(ParsePool(Clock(), rules_of(RAW), -1).workers, 1)


# -- real children ----------------------------------------------------------------------------------------------


class ProcessTests(TestCase):
    """The pool with real child processes on the global reactor."""

    timeout = 60

    def start(self, workers: int, **options: Any) -> ParsePool:
        pool = ParsePool(reactor, rules_of(RAW), workers, **options)
        pool.startService()
        self.addCleanup(pool.stopService)
        return pool

    @defer.inlineCallbacks
    def test_results_equal_inline_extract(self) -> Any:
        """Pages parsed by two children give exactly what extract gives inline."""
        pool = self.start(2)
        results = yield defer.gatherResults([parse(pool, i) for i in range(60)])
        self.assertEqual(results, [expected(pool, i) for i in range(60)])
        self.assertEqual(len(set(pool.pids())), 2)

    @defer.inlineCallbacks
    def test_many_concurrent_requests(self) -> Any:
        """A thousand concurrent requests through small queues all succeed, in order of their pages."""
        pool = self.start(2, queue_size=4)
        results = yield defer.gatherResults([parse(pool, i % 50) for i in range(1000)])
        self.assertEqual(results[:50], [expected(pool, i) for i in range(50)])
        self.assertEqual(results[950:], results[:50])
        self.assertEqual(pool.in_flight, 0)

    @defer.inlineCallbacks
    def test_sigkill_mid_work(self) -> Any:
        """A child killed with SIGKILL fails its pending requests clearly; after the restart, parsing works again."""
        pool = self.start(1, queue_size=2000, restart_delay=0.05)
        yield pool.ready()
        (pid,) = pool.pids()
        ds = [parse(pool, i % 50) for i in range(1500)]
        ds[0].addCallback(lambda r: (os.kill(pid, signal.SIGKILL), r)[1])
        results = yield defer.DeferredList(ds, consumeErrors=True)
        failed = [r for ok, r in results if not ok]
        self.assertTrue(failed)
        for failure in failed:
            self.assertTrue(failure.check(ParseWorkerDied), failure)
            self.assertIn(f"pid {pid}", str(failure.value))
        self.assertEqual(results[0][1], expected(pool, 0))
        self.failureResultOf(parse(pool, 1), ParsePoolUnavailable)
        yield pool.ready()
        self.assertNotEqual(pool.pids(), [pid])
        result = yield parse(pool, 7)
        self.assertEqual(result, expected(pool, 7))

    @defer.inlineCallbacks
    def test_a_child_over_its_memory_limit_is_replaced_without_a_lost_page(self) -> Any:
        """A real child over max_rss (1 byte here) is replaced while pages are in flight: every page is parsed,
        the old process exits, the new one parses on."""
        clock = Clock()
        pool = ParsePool(ClockedReactor(reactor, clock), rules_of(RAW), 1, max_rss=1, queue_size=100)
        pool.startService()
        self.addCleanup(pool.stopService)
        yield pool.ready()
        (old,) = pool.pids()
        ds = [parse(pool, i % 50) for i in range(200)]
        clock.advance(1)
        results = yield defer.gatherResults(ds)
        self.assertEqual(results[:50], [expected(pool, i) for i in range(50)])
        self.assertEqual(pool.retired, 1)
        yield pool.ready()
        self.assertNotIn(old, pool.pids())
        self.assertEqual((yield parse(pool, 7)), expected(pool, 7))
        yield pool.stopService()
        self.assertRaises(ProcessLookupError, os.kill, old, 0)

    @defer.inlineCallbacks
    def test_stop_waits_for_in_flight_and_children_exit(self) -> Any:
        """stopService lets every accepted page finish, then the children exit and are reaped."""
        pool = self.start(2, queue_size=2)
        yield pool.ready()
        pids = pool.pids()
        ds = [parse(pool, i) for i in range(40)]
        yield pool.stopService()
        self.assertEqual(pool.pids(), [])
        for pid in pids:
            self.assertRaises(ProcessLookupError, os.kill, pid, 0)
        results = [self.successResultOf(d) for d in ds]
        self.assertEqual(results, [expected(pool, i) for i in range(40)])
        self.failureResultOf(parse(pool, 1), ParsePoolUnavailable)

    @defer.inlineCallbacks
    def test_hostile_pages_come_back_as_results(self) -> Any:
        """Empty, random, non-HTML and mis-declared bodies give the same results as inline, and the child lives on."""
        pool = self.start(1)
        yield pool.ready()
        pids = pool.pids()
        junk = [
            (b"", "text/html"),
            (bytes(range(256)) * 40, None),
            (b"\x89PNG\r\n\x1a\n" + b"\x00" * 100, "image/png"),
            (b"<a href='/c/x'>\xff\xfe" * 20_000, "text/html; charset=utf-16"),
            (b"<div>" * 50_000, "text/html"),
        ]
        url = "https://shop.example.com/c/1"
        results = yield defer.gatherResults([pool.parse(url, b, ct, "list", 0.0, 200) for b, ct in junk])
        self.assertEqual(results, [extract(url, b, ct, "list", 0.0, 200, pool.rules) for b, ct in junk])
        self.assertEqual(results[0].error, "unparseable")
        self.assertEqual(results[2].error, "not-html")
        self.assertEqual((yield parse(pool, 4)), expected(pool, 4))
        self.assertEqual(pool.pids(), pids)
