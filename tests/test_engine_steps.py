"""The page engine's steps (spiderd.engine.steps) with a fake parser and port: each verdict, and a parse that
fails, in a Deferred (never raised), with what ``is_new`` took undone."""

from __future__ import annotations

from typing import Any

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from spiderd.core.conditional import Validators
from spiderd.engine.steps import PageSteps, Verdict
from spiderd.fetch.extract import Extracted
from spiderd.fetch.fetcher import FetchResult
from spiderd.fetch.parsepool import ParseError

URL = "http://127.0.0.1/p/1"


class Parser:
    """Answers each parse with ``answer()``: an Extracted, a Deferred, or an exception raised at once."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls = 0

    def parse(self, url: str, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.answer()


class Port:
    """A role's port that records what the engine told it."""

    def __init__(self, new: Any = True) -> None:
        self.new = new
        self.told: list[str] = []

    def throttled(self, result: FetchResult, wait: float) -> None:
        self.told.append(f"throttled {wait:g}")

    def archive(self, result: FetchResult) -> Deferred[None] | None:
        self.told.append("archive")
        return None

    def is_new(self, result: FetchResult) -> Any:
        self.told.append("is_new")
        return self.new

    def kind(self, result: FetchResult) -> str:
        return "detail"

    def rules(self) -> Any:
        return None

    def parsed(self, result: FetchResult, extracted: Extracted) -> Deferred[Any] | None:
        self.told.append("parsed")
        return None

    def wanted(self) -> bool:
        return True

    def keep_waiting(self) -> bool:
        return True

    def parse_failed(self, result: FetchResult) -> None:
        self.told.append("parse_failed")


def page(status: int = 200, **kwargs: Any) -> FetchResult:
    return FetchResult(URL, status, URL, b"<html></html>", "text/html", headers=[], **kwargs)


class StepsTests(SynchronousTestCase):
    """Every verdict through the steps; a failing parse undoes ``is_new`` and fails the outcome's Deferred."""

    def steps(self, answer: Any) -> tuple[PageSteps, Parser]:
        parser = Parser(answer)
        return PageSteps(Clock(), parser), parser  # type: ignore[arg-type]  # (a fake parse pool)

    def test_verdicts(self) -> None:
        """A throttle, a 304 to a conditional fetch, a failure, a duplicate (also told in a Deferred) and a page."""
        steps, parser = self.steps(lambda: defer.succeed(Extracted(item={"url": URL})))
        sent = Validators(etag='"a"')
        cases = [(page(429, retry_after=2.0), Port(), None, Verdict.THROTTLED),
                 (page(304), Port(), sent, Verdict.NOT_MODIFIED), (page(404), Port(), None, Verdict.FAILED),
                 (page(), Port(False), None, Verdict.DUPLICATE),
                 (page(), Port(defer.succeed(False)), None, Verdict.DUPLICATE),
                 (page(), Port(), None, Verdict.PAGE), (page(), Port(defer.succeed(True)), None, Verdict.PAGE)]
        for result, port, validators, verdict in cases:
            outcome = self.successResultOf(steps.process(result, port, validators))
            self.assertIs(outcome.verdict, verdict)
        self.assertEqual(parser.calls, 2)

    def test_a_parse_that_fails_later(self) -> None:
        """The parser's failure fails the outcome, once the port has undone what ``is_new`` took."""
        waiting: Deferred[Extracted] = Deferred()
        steps, _ = self.steps(lambda: waiting)
        port = Port()
        d = steps.process(page(), port)
        self.assertNoResult(d)
        waiting.errback(ParseError("the child died"))
        self.failureResultOf(d, ParseError)
        self.assertEqual(port.told, ["archive", "is_new", "parse_failed"])

    def test_a_parse_that_raises_at_once(self) -> None:
        """A parser that raises (the inline parse of a pool of no workers) fails the Deferred; nothing is raised."""
        def boom() -> Any:
            raise ValueError("bad page")
        steps, _ = self.steps(boom)
        port = Port()
        self.failureResultOf(steps.process(page(), port), ValueError)
        self.assertEqual(port.told, ["archive", "is_new", "parse_failed"])

    def test_a_port_that_fails_after_the_parse(self) -> None:
        """An error of the port once the page is parsed (handing its links on) undoes ``is_new`` too."""
        steps, _ = self.steps(lambda: defer.succeed(Extracted(item={"url": URL})))
        port = Port()

        def parsed(result: FetchResult, extracted: Extracted) -> None:
            raise RuntimeError("links refused")
        port.parsed = parsed  # type: ignore[method-assign]
        self.failureResultOf(steps.process(page(), port), RuntimeError)
        self.assertEqual(port.told, ["archive", "is_new", "parse_failed"])

    def test_the_outcome_is_called_once_it_is_in(self) -> None:
        """The outcome's Deferred is ``called`` only once the outcome is in, not while the parse is awaited after
        an archive that answered at once; cancelling it cancels the parse."""
        waiting: Deferred[Extracted] = Deferred()
        steps, _ = self.steps(lambda: waiting)
        port = Port()
        port.archive = lambda result: defer.succeed(None)  # type: ignore[method-assign]
        d = steps.process(page(), port)
        self.assertFalse(d.called)
        d.cancel()
        self.failureResultOf(d, defer.CancelledError)
        self.assertTrue(waiting.called)


class Statuses:
    """A crawl pool's ``set_statuses`` whose answers wait until fired."""

    def __init__(self) -> None:
        self.pending: list[Deferred[None]] = []

    def set_statuses(self, statuses: Any) -> Deferred[None]:
        d: Deferred[None] = Deferred()
        self.pending.append(d)
        return d


class RecordTests(SynchronousTestCase):
    """The crawl's record of an outcome (spiderd.frontier.process.Processor): its Deferred fires with None once the
    statuses are in, is not ``called`` before (it was, paused, while ``record`` was a generator chained on it), and
    cancelling it cancels the write it waits on."""

    def processor(self) -> tuple[Any, Statuses]:
        from spiderd.core.stats import CrawlStats
        from spiderd.frontier.process import Processor

        pool = Statuses()
        steps = PageSteps(Clock(), Parser(lambda: Extracted()))  # type: ignore[arg-type]
        sink = lambda urls: defer.succeed(None)  # noqa: E731
        return Processor(Clock(), pool, steps, None, CrawlStats(Clock()), sink), pool  # type: ignore[arg-type]

    def test_fires_once_the_statuses_are_in(self) -> None:
        processor, pool = self.processor()
        d = processor.process(page(500), False)
        self.assertFalse(d.called)
        [write] = pool.pending
        write.callback(None)
        self.assertIsNone(self.successResultOf(d))

    def test_cancel_reaches_the_write(self) -> None:
        processor, pool = self.processor()
        d = processor.process(page(500), False)
        [write] = pool.pending
        d.cancel()
        self.failureResultOf(d, defer.CancelledError)
        self.assertTrue(write.called)
