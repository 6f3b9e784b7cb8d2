"""One fetched answer to its outcome, the same steps for every role.

The steps, in order: a throttling answer (429, 503) gives the host's wait (Retry-After, else the back-off of its
consecutive throttles) and is told to the role at once, before anything yields, so a role that paces its own
hosts blocks the host before the fetch's slot frees; every HTTP answer is archived (WARC) before anything is
recorded of it; a 304 to a conditional fetch is unchanged; another non-200 is a failure; a 200 whose URL a
redirect or an earlier fetch gave already is a duplicate; the rest is parsed, its links go where the role sends
them, and a page that is not ``noindex`` and whose content no other URL gave first (``claim_content``) is
stored: the outcome carries the store's Deferred, so a role may wait for the commit or chain the item on it.

What a role does differently is its :class:`Port`, one per URL: where the answer is archived, whether a
redirect's page is new, the kind of the page, where its links go, whether it still wants the page.  What the outcome
means (a pool status, a job's items file, a retry) is the role's.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from spiderd.core import conditional as cg
from spiderd.core import throttle as th
from spiderd.core.deferreds import apart
from spiderd.core.storage import StorageGate, retried
from spiderd.core.urls import fingerprint, host_of
from spiderd.feed.schema import FIXED
from spiderd.store.base import ItemRow
from spiderd.store.interfaces import IPageStore

if TYPE_CHECKING:
    from spiderd.engine.fetchmode import FetchModes
    from spiderd.engine.subrequests import HostTurns
    from spiderd.fetch.extract import Extracted, Rules
    from spiderd.fetch.fetcher import Fetcher, FetchResult
    from spiderd.fetch.fetchpool import FetchPool
    from spiderd.fetch.parsepool import ParsePool

ClaimContent = Callable[[str, str], "Deferred[bool]"]  # a pool's claim_content(digest, url)
ITEM_COLUMNS = frozenset(name for name, _ in FIXED)  # an item's own columns: in crawler_item's and crawler_html's


class Verdict(enum.Enum):
    """What became of a fetched answer."""

    THROTTLED = "throttled"  # 429/503: the host waits ``Outcome.wait`` seconds; the URL goes again then
    NOT_MODIFIED = "not_modified"  # a 304 to a fetch conditional on the validators sent
    FAILED = "failed"  # any other answer than a 200 (an HTTP code, a network error, robots.txt)
    DUPLICATE = "duplicate"  # a 200 whose page a redirect (or an earlier fetch) gave already: nothing more
    PAGE = "page"  # parsed; its links handed on; stored (``saved``) unless noindex or duplicate content
    ABANDONED = "abandoned"  # the role stopped wanting it while it was parsed (a halted job)


@dataclass(slots=True)
class Outcome:
    """A fetched answer's outcome: its verdict, the throttle's wait, and for a page what it gave."""

    result: FetchResult
    verdict: Verdict
    wait: float = 0.0
    kind: str = ""  # "list" or "detail", for a page
    extracted: Extracted | None = None
    duplicate_content: bool = False  # another URL gave this content first: no item, not stored
    saved: Deferred[None] | None = None  # the page's commit in the store (None: not stored)
    links: Deferred[Any] | None = None  # the links handed on (None: none)

    @property
    def item(self) -> dict[str, Any] | None:
        """The page's item, if it makes one (not noindex, not duplicate content)."""
        if self.extracted is None or self.extracted.noindex or self.duplicate_content:
            return None
        return self.extracted.item


class Port(Protocol):
    """What a role tells the engine about one URL."""

    def throttled(self, result: FetchResult, wait: float) -> None:
        """The host asked to be left alone ``wait`` seconds (called before anything yields)."""

    def archive(self, result: FetchResult) -> Deferred[None] | None:
        """Archive an HTTP answer (WARC); a Deferred to wait for, or None."""

    def is_new(self, result: FetchResult) -> Deferred[bool] | bool:
        """Whether the 200's page (``result.final_url``) is this URL's to make: False for a duplicate."""

    def kind(self, result: FetchResult) -> str:
        """"list" or "detail": how the page is parsed."""

    def rules(self) -> Rules | None:
        """The version of the site rules the page is parsed with (a worker job's own), or None: the node's now."""

    def parsed(self, result: FetchResult, extracted: Extracted) -> Deferred[Any] | None:
        """The page is parsed: hand its links on; a Deferred for when they are safe, or None."""

    def wanted(self) -> bool:
        """False once the role no longer wants this URL's page (nothing more is stored or claimed)."""

    def keep_waiting(self) -> bool:
        """Whether a save its storage refused (a full disk) may still be tried again (else it fails with
        StorageBlocked)."""

    def parse_failed(self, result: FetchResult) -> None:
        """The parse failed (the failure goes on to the caller): undo what ``is_new`` took."""


class PageSteps:
    """The steps of every fetched answer (see the module's docstring); one per node, shared by its roles."""

    def __init__(self, clock: IReactorTime, parser: ParsePool, store: IPageStore | None = None,
                 claim_content: ClaimContent | None = None, max_retry_after: float = th.MAX_RETRY_AFTER,
                 gate: StorageGate | None = None, modes: FetchModes | None = None,
                 fetchers: FetchPool | None = None) -> None:
        """``store``: where detail pages go (None: nowhere); ``claim_content``: the pool's, with ``[items]
        skip_duplicate_content`` (a detail page whose content digest another URL gave first is not stored and
        makes no item); ``gate``: the node's storage gate (a save its storage refuses is saved again once the gate
        tries again, see :mod:`spiderd.core.storage`); ``modes``: how each site's pages are fetched (plain, or
        rendered: :mod:`spiderd.engine.fetchmode`; None: plain); ``fetchers``: the fetch children, where a page
        whose kind is known before its fetch is fetched, parsed and compressed (``[fetch] processes``)."""
        self._clock = clock
        self.modes = modes
        self.fetchers = fetchers
        self._parser = parser
        self.store = store
        self.gate = gate
        self._claim_content = claim_content
        self.throttles = th.HostThrottles(max_retry_after)  # consecutive 429/503 per host: the back-off

    def fetch(self, fetcher: Fetcher, url: str, validators: cg.Validators | None = None,
              turns: HostTurns | None = None, kind: str | None = None, rules: Rules | None = None,
              **options: Any) -> Deferred[FetchResult]:
        """``url`` fetched as its site asks (plain HTTP, or rendered in a headless browser); never fails.
        ``validators``: a conditional GET; ``turns``: the role's politeness, where a rendered page's sub-requests
        take their turns; ``options``: the fetcher's (``user_agent``, ``robots``); ``kind`` and ``rules``: how the
        page will be parsed (its port's ``kind`` and ``rules``), known before the fetch: then a fetch child may
        fetch it and parse it where it fetched it (``FetchResult.parsed``)."""
        children = self.fetchers
        if (children is not None and kind is not None and children.takes(fetcher, url)
                and (self.modes is None or not self.modes.renders(url))):
            preset = self.store.preset if kind == "detail" and self.store is not None else None
            return children.fetch(url, validators, kind=kind, rules=rules, preset=preset, **options)
        if self.modes is not None:
            return self.modes.fetch(fetcher, url, validators, turns, **options)
        if validators is None:
            return fetcher.fetch(url, **options)
        return fetcher.fetch(url, validators=validators, **options)

    def process(self, result: FetchResult, port: Port, sent: cg.Validators | None = None) -> Deferred[Outcome]:
        """The outcome of ``result``; ``sent``: the validators the fetch was made conditional on.  A save its
        storage refuses is tried again while ``port.keep_waiting()`` (then it fails with StorageBlocked)."""
        wait = None
        if th.throttled(result.status):
            wait = self.throttles.wait(host_of(result.url), result.retry_after)
            port.throttled(result, wait)
        elif result.status > 0:
            self.throttles.answered(host_of(result.url))
        return apart(self._process(result, port, sent, wait))

    def _process(self, result: FetchResult, port: Port, sent: cg.Validators | None,
                 wait: float | None) -> Deferred[Outcome]:
        """Archive the answer, then judge it (plain calls and callbacks: this runs for every page)."""
        try:
            if result.headers is not None or result.previous:  # (answers fetched on the way: robots.txt, redirects)
                archived = port.archive(result)
                if archived is not None:
                    return archived.addCallback(lambda _: self._judge(result, port, sent, wait))
            return self._judge(result, port, sent, wait)
        except Exception:
            return defer.fail()

    def _judge(self, result: FetchResult, port: Port, sent: cg.Validators | None,
               wait: float | None) -> Deferred[Outcome]:
        if wait is not None:
            return defer.succeed(Outcome(result, Verdict.THROTTLED, wait))
        if result.status == cg.NOT_MODIFIED and sent is not None:
            return defer.succeed(Outcome(result, Verdict.NOT_MODIFIED))
        if result.status != 200:
            return defer.succeed(Outcome(result, Verdict.FAILED))
        new = port.is_new(result)
        if isinstance(new, Deferred):
            return new.addCallback(self._if_new, result, port)
        return self._if_new(new, result, port)

    def _if_new(self, new: bool, result: FetchResult, port: Port) -> Deferred[Outcome]:
        if not new:
            return defer.succeed(Outcome(result, Verdict.DUPLICATE))
        return self._page(result, port).addErrback(_parse_failed, result, port)

    def _page(self, result: FetchResult, port: Port) -> Deferred[Outcome]:
        """Parse, hand the links on, claim the content, store."""
        try:
            kind = port.kind(result)
            url = result.final_url
            if result.parsed is not None:  # (a fetch child parsed it as the port's kind: no redirect, same URL)
                return defer.succeed(result.parsed).addCallback(self._parsed, result, port, kind, url)
            preset = self.store.preset if kind == "detail" and self.store is not None else None
            parsing = self._parser.parse(url, result.page, result.content_type, kind, self._clock.seconds(),
                                         result.status, compress=preset, robots_tag=result.robots_tag,
                                         rules=port.rules())
        except Exception:
            return defer.fail()
        return parsing.addCallback(self._parsed, result, port, kind, url)

    def _parsed(self, extracted: Extracted, result: FetchResult, port: Port, kind: str,
                url: str) -> Outcome | Deferred[Outcome]:
        if self.modes is not None:
            self.modes.mark(result, extracted)
        outcome = Outcome(result, Verdict.PAGE, kind=kind, extracted=extracted)
        if not port.wanted():
            outcome.verdict = Verdict.ABANDONED
            return outcome
        outcome.links = port.parsed(result, extracted)
        if extracted.noindex or kind != "detail":
            return outcome
        if self._claim_content is None or extracted.digest is None:
            return self._save(outcome, url, port)
        return self._duplicate(extracted, url).addCallback(self._claimed, outcome, url, port)

    def _claimed(self, duplicate: bool, outcome: Outcome, url: str, port: Port) -> Outcome:
        if duplicate:
            outcome.duplicate_content = True
            return outcome
        return self._save(outcome, url, port)

    def _save(self, outcome: Outcome, url: str, port: Port) -> Outcome:
        if not port.wanted():
            outcome.verdict = Verdict.ABANDONED
            return outcome
        assert outcome.extracted is not None
        outcome.saved = self._store(url, outcome.result.page, outcome.extracted, port)
        return outcome

    def _duplicate(self, extracted: Extracted, url: str) -> Deferred[bool]:
        """True when another URL gave this detail page's content first (``claim_content``)."""
        if self._claim_content is None or extracted.digest is None:
            return defer.succeed(False)
        d = self._claim_content(extracted.digest, extracted.canonical or url)
        return d.addCallback(lambda holds: not holds)

    def _item_row(self, url: str, extracted: Extracted) -> ItemRow | None:
        """The page's item as ``crawler_item`` keeps it: its site, the site's fields (JSON), its fetch time."""
        item = extracted.item
        if item is None:
            return None
        site = self._parser.rules.site_for(url)
        fields = {name: value for name, value in item.items() if name not in ITEM_COLUMNS}
        return ItemRow(site.name if site is not None else "", json.dumps(fields, ensure_ascii=False),
                       float(item.get("fetched_at") or self._clock.seconds()))

    def _store(self, url: str, body: bytes, extracted: Extracted, port: Port) -> Deferred[None] | None:
        """The page into the store, under its canonical URL when it names one (the item's url); saved again
        while its storage refuses it (a full disk) and the port may still wait."""
        store = self.store
        if store is None:
            return None
        key = extracted.canonical or url
        item = self._item_row(key, extracted) if getattr(store, "item_table", False) else None

        def save() -> Deferred[None]:
            if item is None:  # (only a store with the item table is given one)
                saved: Deferred[None] = store.save(key, fingerprint(key), body, compressed=extracted.compressed,
                                                   digest=extracted.digest)
            else:
                saved = store.save(key, fingerprint(key), body, compressed=extracted.compressed,
                                   digest=extracted.digest, item=item)
            return saved

        return retried(self.gate, "store", save, lambda: not port.keep_waiting())


def _parse_failed(failure: Failure, result: FetchResult, port: Port) -> Failure:
    """The parse (or what came after it) failed: the port undoes what ``is_new`` took; the failure goes on."""
    if failure.check(Exception):
        port.parse_failed(result)
    return failure
