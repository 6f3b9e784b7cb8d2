"""How a URL is fetched: plain HTTP, or rendered in a headless browser, as its site's ``render`` asks.

Both roles fetch through :meth:`spiderd.engine.steps.PageSteps.fetch`, which hands a URL of a site with ``render =
"always"`` or ``"auto"`` to :class:`FetchModes`: the main document is fetched by the fetcher as any page is (robots.txt,
politeness, redirects, conditional GET), and a 200 HTML answer is rendered by the render pool
(:mod:`spiderd.engine.render`).  The answer goes on as a :class:`~spiderd.fetch.fetcher.FetchResult` whose
``rendered`` is the DOM: the engine's steps parse and store that, and archive the answer as fetched beside it.  A
page that cannot be rendered is a failure (``render``, final) with its reason; one whose sub-request was throttled
is a throttled answer (its host blocked, the URL fetched again after the wait).

``"auto"`` (:class:`AutoRender`) learns per host and path section (``host/first-segment``) whether rendering gives
more: a section's first pages are rendered and parsed both ways; once ``auto_probe`` pages in a row gave from their
raw HTML every link and field their render gave, the section is fetched plain, and one page in ``auto_recheck`` is
rendered again to check.  A section whose render gives more is rendered, and checked as often.  Its choices are kept
for ``auto_hosts`` sections at most (the least recently used is forgotten): O(1) per page.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core import status as st
from spiderd.core.rules import Site
from spiderd.core.urls import host_of
from spiderd.fetch.extract import ITEM_KEYS, gave_nothing

if TYPE_CHECKING:
    from spiderd.engine.render import Rendered, RenderPool
    from spiderd.engine.subrequests import HostTurns
    from spiderd.fetch.extract import Extracted, Rules
    from spiderd.fetch.fetcher import Fetcher, FetchResult
    from spiderd.fetch.parsepool import ParsePool

log = Logger()
MAX_HINTED = 1000  # hosts told the render hint


@dataclass(slots=True)
class Choice:
    """What "auto" knows of one host's path section."""

    render: bool = True  # its pages are rendered
    needed: bool = False  # the last check found that rendering gives more
    same: int = 0  # checks in a row whose raw HTML gave what the render gave
    since: int = 0  # pages since the last check
    rendered: int = 0
    plain: int = 0


class AutoRender:
    """Per host and path section: render or not, and when to check again (bounded, O(1) per page)."""

    def __init__(self, probe: int = 3, recheck: int = 50, max_keys: int = 10000) -> None:
        self.probe, self.recheck, self.max_keys = probe, recheck, max_keys
        self.choices: OrderedDict[str, Choice] = OrderedDict()

    def configure(self, probe: int, recheck: int, max_keys: int) -> None:
        """A reload's ``auto_*``: from each section's next page on (the choices made so far are kept)."""
        self.probe, self.recheck, self.max_keys = probe, recheck, max_keys
        while len(self.choices) > self.max_keys:
            self.choices.popitem(last=False)

    @staticmethod
    def key(url: str) -> str:
        """``host/first-segment`` of ``url``."""
        path = urlsplit(url).path.lstrip("/")
        return f"{host_of(url)}/{path.partition('/')[0] if '/' in path else ''}"

    def plan(self, url: str) -> tuple[bool, bool]:
        """(render it, compare its render with its raw HTML) for the next page of ``url``'s section."""
        key = self.key(url)
        choice = self.choices.pop(key, None) or Choice()
        self.choices[key] = choice
        if len(self.choices) > self.max_keys:
            self.choices.popitem(last=False)
        choice.since += 1
        due = choice.since >= self.recheck
        if choice.render:
            return True, not choice.needed or due
        return due, due

    def counted(self, url: str, rendered: bool) -> None:
        choice = self.choices.get(self.key(url))
        if choice is not None:
            if rendered:
                choice.rendered += 1
            else:
                choice.plain += 1

    def learn(self, url: str, gains: bool) -> None:
        """A check of ``url``'s section: its render gave more than its raw HTML (``gains``), or not."""
        choice = self.choices.get(self.key(url))
        if choice is None:
            return
        choice.since = 0
        if gains:
            choice.render, choice.needed, choice.same = True, True, 0
            return
        choice.needed = False
        choice.same += 1
        if choice.same >= self.probe and choice.render:
            choice.render = False
            log.info("{key}: its raw HTML gives what rendering gives: fetched plain from now on", key=self.key(url))

    def rows(self, limit: int = 100) -> list[dict[str, Any]]:
        """The sections most recently seen, for /api/hosts."""
        rows: list[dict[str, Any]] = []
        for key in reversed(self.choices):
            if len(rows) >= limit:
                break
            c = self.choices[key]
            rows.append({"host": key.partition("/")[0], "section": key, "render": c.render, "rendered": c.rendered,
                         "plain": c.plain})
        return rows


def gains(raw: Extracted, rendered: Extracted) -> bool:
    """True if the rendered page gave a link or a field value that the raw HTML did not."""
    if set(rendered.lists + rendered.details) - set(raw.lists + raw.details):
        return True
    fields = (rendered.item or {}).items()
    before = raw.item or {}
    return any(value not in (None, "", []) and before.get(name) in (None, "", []) for name, value in fields
               if name not in ITEM_KEYS)


class FetchModes:
    """Fetches a URL in its site's mode (see the module's docstring)."""

    def __init__(self, clock: IReactorTime, rules: Rules, pool: RenderPool | None, parser: ParsePool | None = None,
                 auto: AutoRender | None = None) -> None:
        self._clock = clock
        self.rules = rules
        self.pool = pool
        self._parser = parser
        self.auto = auto or AutoRender()
        self._hinted: set[str] = set()

    def fetch(self, fetcher: Fetcher, url: str, validators: Any = None, turns: HostTurns | None = None,
              **options: Any) -> Deferred[FetchResult]:
        """``url`` fetched, and rendered when its site asks; never fails (a FetchResult, as the fetcher's).
        ``turns``: the caller's politeness, where a rendered page's sub-requests take their turns."""
        d = fetcher.fetch(url, **options) if validators is None else fetcher.fetch(url, validators=validators,
                                                                                   **options)
        site = self.rules.site_for(url) if self.pool is not None else None
        if site is None or site.render == "never":
            return d
        started = self._clock.seconds()
        return d.addCallback(self._fetched, site, options, started, turns)

    def _fetched(self, result: FetchResult, site: Site, options: dict[str, Any], started: float,
                 turns: HostTurns | None) -> Any:
        if result.status != 200 or "html" not in (result.content_type or "text/html").lower():
            return result
        assert self.pool is not None
        (turns or self.pool.subrequests.turns).book(host_of(result.final_url), started)
        render, compare = (True, False) if site.render == "always" else self.auto.plan(result.final_url)
        if site.render == "auto":
            self.auto.counted(result.final_url, render)
        if not render:
            return result
        d = self.pool.render(result, site, options.get("user_agent"), options.get("robots", True), turns)
        d.addCallback(self._rendered, result, compare)
        return d.addErrback(self._failed, result)

    def _rendered(self, rendered: Rendered, result: FetchResult, compare: bool) -> Any:
        for note in rendered.notes:
            log.info("{url}: rendering: {note}", url=result.final_url, note=note)
        elapsed = result.elapsed + rendered.elapsed
        if rendered.throttle > 0:
            why = f"a sub-request was throttled: its host waits {rendered.throttle:g} s"
            return dataclasses.replace(result, status=429, retry_after=rendered.throttle, headers=None, body=b"",
                                       reason=why, elapsed=elapsed)
        page = dataclasses.replace(result, rendered=rendered.html, elapsed=elapsed)
        if not compare:
            return page
        d = self._compare(result, rendered.html)
        return d.addBoth(lambda _: page)

    @defer.inlineCallbacks
    def _compare(self, result: FetchResult, html: bytes) -> Any:
        """Parse the raw and the rendered page; "auto" learns whether rendering gave more."""
        if self._parser is None:
            return
        url, kind = result.final_url, self.rules.classify(result.final_url) or "list"
        now = self._clock.seconds()
        raw = yield self._parser.parse(url, result.body, result.content_type, kind, now, 200)
        dom = yield self._parser.parse(url, html, result.content_type, kind, now, 200)
        self.auto.learn(url, gains(raw, dom))

    def _failed(self, failure: Failure, result: FetchResult) -> FetchResult:
        from spiderd.engine.render import RenderFailed

        if not failure.check(RenderFailed):
            log.failure("Rendering {url}", failure, url=result.final_url)
        why = failure.getErrorMessage()
        log.info("{url}: render failed: {why}", url=result.final_url, why=why)
        return dataclasses.replace(result, status=st.RENDER_FAILED, error="render", headers=None, body=b"",
                                   reason=st.reason(st.RENDER_FAILED, why))

    def mark(self, result: FetchResult, extracted: Extracted) -> None:
        """The item of a page of a site that renders says whether it was rendered (``rendered``); a page fetched
        plain that gave nothing may get the hint."""
        if extracted.item is not None and (result.rendered is not None or self.renders(result.final_url)):
            extracted.item["rendered"] = result.rendered is not None
            extracted.line = None  # (the parse child's line is of the item before)
        if result.rendered is None:
            self.hint(result, extracted)

    def renders(self, url: str) -> bool:
        """Whether ``url``'s site renders its pages ("always" or "auto")."""
        site = self.rules.site_for(url) if self.pool is not None else None
        return site is not None and site.render != "never"

    def hint(self, result: FetchResult, extracted: Extracted) -> None:
        """Log once per host that a page rendered plain gave nothing and runs scripts: its content may be
        written by JavaScript (``[[sites]] render``)."""
        if result.rendered is not None or not gave_nothing(extracted.lists, extracted.details, extracted.item):
            return
        host = host_of(result.final_url)
        if host in self._hinted or len(self._hinted) >= MAX_HINTED or b"<script" not in result.body[:200_000].lower():
            return
        self._hinted.add(host)
        log.warn("{url} gave no links and no fields, and it runs scripts: its content may be written by "
                 "JavaScript; [[sites]] render = \"auto\" (or \"always\") renders it in a browser",
                 url=result.final_url)
