"""The template tester behind ``POST /api/sites/NAME/try``: one page fetched as the crawl fetches it, and the report
of a site's rules on it (:mod:`spiderd.fetch.tryout`).

The body is ``{"url": "...", "site": {...}, "page": false, "html": "..."}``: the URL to fetch, a draft of the site's
table (optional; default: the site as it is in force), whether the answer includes the page's HTML (the editor shows
it), and the page's HTML as an earlier try gave it (optional: the editor tries each edit on the page it shows, without
fetching it again).  A draft
is validated with the whole configuration exactly as a ``PUT`` is, and is never used by the crawl.  The page is
fetched through the node's fetcher and engine (robots.txt, the site's headers and proxy, rendered when the site
renders), one try at a time.  The report is made in a child process killed after ``timeout`` seconds, so a costly
pattern or selector cannot hold the node.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IProcessTransport, IReactorTime
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure
from twisted.web import http

from spiderd.config import settings as cfg
from spiderd.core.net.serving import ApiError
from spiderd.core.reactors import IProcessClock
from spiderd.core.urls import BadURL, canonicalize
from spiderd.fetch.decode import page_text
from spiderd.fetch.parsechild import spawn_module
from spiderd.fetch.tryout import request_message
from spiderd.ops.liveconfig import LiveConfig

if TYPE_CHECKING:
    from spiderd.core.rules import Site
    from spiderd.engine.steps import PageSteps
    from spiderd.fetch.fetcher import Fetcher, FetchResult

MAX_PAGE = 2 * 1024 * 1024  # characters of the page's HTML an answer includes at most
KNOWN = {"url", "site", "page", "html"}
UNPROCESSABLE = 422  # the rules cannot be run on this page in time


class SiteTester:
    """Fetches a page and reports what a site's rules (or a draft of them) make of it."""

    def __init__(self, reactor: IProcessClock, live: LiveConfig, fetcher: Fetcher, steps: PageSteps,
                 timeout: float = 10.0, clock: IReactorTime | None = None) -> None:
        """``clock`` (default: the reactor) runs the report's deadline."""
        self._reactor = reactor
        self.clock = clock or reactor
        self._live = live
        self._fetcher = fetcher
        self._steps = steps
        self.timeout = timeout
        self._lock = defer.DeferredLock()  # one try at a time: an operator's tool, not a second crawler

    def try_site(self, name: str, body: Any) -> Deferred[Any]:
        """The report for ``body`` (see the module's docstring); ApiError for a bad request or draft."""
        url, draft, page, html = _request(body)
        table = draft if draft is not None else self._live.site_tables().get(name)
        if table is None:
            raise ApiError(f"no site named {name!r}: send its draft as \"site\"", http.NOT_FOUND)
        return self._tried(name, url, table, page, draft is not None, html)

    @defer.inlineCallbacks
    def _tried(self, name: str, url: str, table: dict[str, Any], page: bool, draft: bool, html: str | None) -> Any:
        site = yield self._live.lane.run(self._validate, name, table)
        if html is not None:
            answer = yield self._report(url, html.encode("utf-8"), "text/html; charset=utf-8", site)
            answer["fetch"] = {"status": 200, "final_url": url, "content_type": "text/html", "bytes": len(html),
                               "rendered": False, "reason": "the page given (not fetched again)"}
        else:
            answer = yield self._lock.run(self._try, url, site, page)
        return {"url": url, "site": name, "draft": draft, **answer}

    def _validate(self, name: str, table: dict[str, Any]) -> Site:
        """Thread: the draft as the site ``name``, validated with the whole configuration (never applied)."""
        running = self._live.settings
        overlay = {**running.overlay, name: {k: v for k, v in table.items() if k != "name"}}
        try:
            fresh = cfg.from_dict(running.raw, running.source, None, overlay)
        except cfg.ConfigError as e:
            raise ApiError(f"the draft is refused: {e}") from None
        return next(site for site in fresh.sites if site.name == name)

    @defer.inlineCallbacks
    def _try(self, url: str, site: Site, page: bool) -> Any:
        result: FetchResult = yield self._steps.fetch(self._fetcher, url)
        fetched = {"status": result.status, "final_url": result.final_url, "content_type": result.content_type,
                   "bytes": len(result.page), "rendered": result.rendered is not None,
                   "reason": result.reason or result.error}
        if result.status != 200:
            return {"fetch": fetched, "warnings": [f"the fetch gave no page: {result.reason or result.status}"]}
        report = yield self._report(result.final_url, result.page, result.content_type, site)
        if page:
            report["page"] = page_text(result.page, result.content_type)[:MAX_PAGE]
        return {"fetch": fetched, **report}


    def _report(self, url: str, body: bytes, content_type: str | None, site: Site) -> Deferred[dict[str, Any]]:
        """The report on a page, made in a child process (see the module's docstring)."""
        limits = self._live.rules
        message = request_message(url, body, content_type, site, limits.max_url_length, limits.max_path_depth)
        return _run_child(self._reactor, self.clock, message, self.timeout)


def _request(body: Any) -> tuple[str, dict[str, Any] | None, bool, str | None]:
    if not isinstance(body, dict) or set(body) - KNOWN:
        raise ApiError(f"the body must be a JSON object with the fields {', '.join(sorted(KNOWN))} (url required)")
    url, draft, page = body.get("url"), body.get("site"), body.get("page", False)
    if not isinstance(url, str):
        raise ApiError("'url' is required: the URL of a page to try the rules on")
    try:
        url = canonicalize(url)
    except BadURL as e:
        raise ApiError(f"'url' is not a URL to fetch: {e.reason}") from None
    if draft is not None and not isinstance(draft, dict):
        raise ApiError("'site' must be the site's table (a JSON object), as PUT /api/sites/NAME takes it")
    if not isinstance(page, bool):
        raise ApiError("'page' must be true or false")
    html = body.get("html")
    if html is not None and not isinstance(html, str):
        raise ApiError("'html' must be the page's HTML as a string")
    return url, draft, page, html


class _Child(ProcessProtocol):
    """The report's child process: the request in, the JSON answer out, killed at the deadline."""

    transport: IProcessTransport  # set by spawnProcess, before anything here uses it

    def __init__(self, message: bytes) -> None:
        self.message = message
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        self.done: Deferred[dict[str, Any]] = Deferred()
        self.deadline: IDelayedCall | None = None
        self.killed = False

    def connectionMade(self) -> None:
        self.transport.write(self.message)
        self.transport.closeStdin()

    def outReceived(self, data: bytes) -> None:
        self.out.append(data)

    def errReceived(self, data: bytes) -> None:
        self.err.append(data)

    def kill(self) -> None:
        self.killed = True
        try:
            self.transport.signalProcess("KILL")
        except Exception:  # gone meanwhile: processEnded follows
            pass

    def processEnded(self, reason: Failure) -> None:
        if self.deadline is not None and self.deadline.active():
            self.deadline.cancel()
        try:
            answer = json.loads(b"".join(self.out)) if not self.killed else None
        except ValueError:
            answer = None
        if isinstance(answer, dict):
            self.done.callback(answer)
        elif self.killed:
            self.done.errback(ApiError("the rules took too long on this page and were stopped (a costly regular "
                                       "expression or selector?)", UNPROCESSABLE))
        else:
            error = b"".join(self.err).decode("utf-8", "replace").strip().splitlines()[-1:] or ["no answer"]
            self.done.errback(ApiError(f"the tester failed: {error[0]}", http.INTERNAL_SERVER_ERROR))


def _run_child(reactor: IProcessClock, clock: IReactorTime, message: bytes, timeout: float) -> Deferred[dict[str, Any]]:
    child = _Child(message)
    spawn_module(reactor, child, "spiderd.fetch.tryout")
    child.deadline = clock.callLater(timeout, child.kill)
    return child.done
