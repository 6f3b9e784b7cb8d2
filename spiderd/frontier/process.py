"""Where a crawled URL's outcome goes: the pool's statuses, the links into the pool (within their hops), the item
with its statuses.

The steps from a fetched answer to its outcome are the engine's (:mod:`spiderd.engine.steps`); this module is
the frontier's port to them (a :class:`CrawlPort` per URL: a redirect's page claimed in the pool, the kind from
the hub flag and the rules, links into the pool or the batcher) and its ledger (:class:`Processor`).  A URL's
status is recorded only after its links and page are safely handed on, and with its item's line (the item writer
records it), so a crash in between hands the URL out again: nothing is counted done that was not done, and no
item is written twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, TypeVar

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from spiderd.core import conditional as cg
from spiderd.core import throttle as th
from spiderd.core.stats import CrawlStats
from spiderd.core.deferreds import apart
from spiderd.core.storage import retried
from spiderd.engine.steps import Outcome, PageSteps, Verdict
from spiderd.feed.items import ItemWriter, Status
from spiderd.fetch.fetcher import FetchResult
from spiderd.contracts.pool import ICrawlPool

if TYPE_CHECKING:
    from spiderd.feed.warcfiles import WarcWriter
    from spiderd.fetch.extract import Extracted, Rules

log = Logger()
T = TypeVar("T")


class Processor:
    """What a fetched answer means for the crawl; shared by every URL of the crawl."""

    def __init__(
        self,
        reactor: IReactorTime,
        pool: ICrawlPool,
        steps: PageSteps,
        rules: Rules,
        stats: CrawlStats,
        detail_sink: Callable[[list[str]], Deferred[Any]] | None,
        *,
        items: ItemWriter | None = None,
        archive: WarcWriter | None = None,
        linkbase: bool = False,
        conditional_get: bool = True,
    ) -> None:
        """``detail_sink``: where detail links go (the batcher), or None: the pool's detail queue."""
        self._reactor = reactor
        self.pool = pool
        self.steps = steps
        self.rules = rules
        self.stats = stats
        self._detail_sink = detail_sink or (lambda urls: pool.addmany(urls, detail=True))
        self.own_details = detail_sink is None  # detail links go to the pool's detail queue (with their hops)
        self._items = items
        self.archive = archive  # a WarcWriter: every HTTP answer's records, on disk before its URL's status
        self.linkbase = linkbase
        self._conditional = conditional_get  # a 200's validators go with its status

    def add_details(self, urls: list[str]) -> Deferred[Any]:
        """Send detail URLs where the crawl sends those it finds (the batcher, or the pool's detail queue)."""
        return self._detail_sink(urls)

    def process(self, result: FetchResult, hub: bool, sent: cg.Validators | None = None,
                wanted: Callable[[], bool] = lambda: True) -> Deferred[None]:
        """Take ``result`` through the engine's steps, then record what they gave (see :meth:`record`).

        A write its storage refuses (the page store's, the items file's, the pool's statuses) is made again once
        the storage gate tries again, while ``wanted()``; then the processing fails with StorageBlocked and the
        URL is left to its lease."""
        d = self.steps.process(result, CrawlPort(self, hub, wanted), sent)
        return apart(d.addCallback(self.record, sent, wanted))

    def gated(self, sink: str, write: Callable[[], Deferred[T]], wanted: Callable[[], bool]) -> Deferred[T]:
        """``write()``, made again while its storage refuses it (see :meth:`process`)."""
        return retried(self.steps.gate, sink, write, lambda: not wanted())

    def record(self, outcome: Outcome, sent: cg.Validators | None,
               wanted: Callable[[], bool] = lambda: True) -> Deferred[None]:
        """Record the outcome's statuses (and its redirect target's, when claimed, and its canonical URL's, when
        the page names one: that URL is then done too and not fetched again).

        With an item, the statuses are recorded by the item writer together with the item's line (see
        spiderd.feed.items): a URL is done only once its links, its page and its item are safe, and then exactly
        once.  A 200's validators go with its status; a 304 to a fetch conditional on ``sent`` is done with
        nothing else; a throttled URL goes back to its queue, its host blocked in the pool.  (Plain callbacks, not
        generators: a page's record costs fewer Deferreds; :meth:`process` gives its callers the chain
        :func:`~spiderd.core.deferreds.apart`.)"""
        result = outcome.result
        if outcome.verdict is Verdict.THROTTLED:
            return self.gated("pool", lambda: self._throttled(result, outcome.wait), wanted).addCallback(_none)
        if outcome.verdict is Verdict.NOT_MODIFIED:
            assert sent is not None  # (only a conditional fetch is NOT_MODIFIED)
            return self.gated("pool", lambda: self._not_modified(result, sent), wanted).addCallback(_none)
        statuses: list[Status] = [(result.url, result.status, result.reason)]  # reason: None for a page
        if result.validators is not None and self._conditional:
            statuses[0] = (result.url, result.status, result.reason, result.validators)
        if outcome.verdict is Verdict.PAGE:
            return self._settle_page(outcome).addCallback(self._record_page, outcome, statuses, wanted)
        if outcome.verdict is Verdict.DUPLICATE:
            self.stats.incr("redirect_duplicates")
        return self._set_statuses(statuses, wanted)

    def _record_page(self, extracted: Extracted, outcome: Outcome, statuses: list[Status],
                     wanted: Callable[[], bool]) -> Deferred[None]:
        """A page's links and stored copy are safe: its statuses, with its item's line when it makes one."""
        result = outcome.result
        if result.final_url != result.url:
            statuses.append((result.final_url, result.status))
        if extracted.canonical is not None and all(extracted.canonical != s[0] for s in statuses):
            statuses.append((extracted.canonical, result.status))
        item, items = outcome.item, self._items
        if item is not None and items is not None:
            d = self.gated("items", lambda: items.write(item, statuses, extracted.line), wanted)
            return d.addCallback(self._item_written, item)
        return self._set_statuses(statuses, wanted)

    def _set_statuses(self, statuses: list[Status], wanted: Callable[[], bool]) -> Deferred[None]:
        return self.gated("pool", lambda: self.pool.set_statuses(statuses), wanted).addCallback(_none)

    def _item_written(self, _: Any, item: dict[str, Any]) -> None:
        self.stats.incr("items")
        site = self.rules.site_for(item["url"])
        self.stats.item_made(site.name if site is not None else "", item)

    def _settle_page(self, outcome: Outcome) -> Deferred[Extracted]:
        """Count what the page gave and wait for its links and its stored copy; fires with its Extracted."""
        extracted = outcome.extracted
        assert extracted is not None  # (a PAGE has one)
        if extracted.error:
            self.stats.incr(f"parse_{extracted.error}")
        if extracted.noindex:
            self.stats.incr("noindex")
        elif outcome.duplicate_content:
            self.stats.incr("duplicate_content")
        waits: list[Deferred[Any]] = [d for d in (outcome.links, outcome.saved) if d is not None]
        if outcome.saved is not None:
            outcome.saved.addCallback(lambda _: self.stats.incr("stored"))
        self.stats.incr("links_list", len(extracted.lists))
        self.stats.incr("links_detail", len(extracted.details))
        if extracted.skipped:
            self.stats.incr("links_skipped", extracted.skipped)
        if not waits:
            return defer.succeed(extracted)
        return defer.gatherResults(waits, consumeErrors=True).addCallback(lambda _: extracted)

    def _not_modified(self, result: FetchResult, sent: cg.Validators) -> Deferred[None]:
        """A 304: the page did not change since the fetch whose validators were ``sent``. It is done again (a
        recrawled page goes back to its crawled set for the next interval) with them, as the 304 updated them;
        nothing is parsed, written or stored, and no link is added again."""
        self.stats.incr("not_modified")
        d: Deferred[None] = self.pool.set_statuses([(result.url, result.status, None, sent.updated(result.validators))])
        return d

    def _throttled(self, result: FetchResult, wait: float) -> Deferred[None]:
        """A 429 or 503: block the URL's host in the pool until its Retry-After, or for the back-off of its
        consecutive throttles; the URL goes back to its queue (see ICrawlPool.throttle)."""
        self.stats.errors["throttled"] += 1
        reason = th.reason(result.status, wait)
        log.info("{url}: {reason}", url=result.url, reason=reason)
        until = self._reactor.seconds() + wait
        d: Deferred[None] = self.pool.throttle(result.url, until, result.status, reason)
        return d


class CrawlPort:
    """The engine's port for one crawled URL (see :class:`spiderd.engine.steps.Port`)."""

    def __init__(self, processor: Processor, hub: bool, wanted: Callable[[], bool] = lambda: True) -> None:
        self._p = processor
        self._hub = hub
        self.keep_waiting = wanted  # while a write its storage refused may be made again

    def throttled(self, result: FetchResult, wait: float) -> None:
        """Nothing at once: the pool blocks the host when the throttle is recorded."""

    def archive(self, result: FetchResult) -> Deferred[None] | None:
        archive = self._p.archive
        if archive is None:
            return None
        return archive.write(result).addCallback(lambda _: self._p.stats.incr("archived"))

    def is_new(self, result: FetchResult) -> Deferred[bool] | bool:
        """False if a redirect led to a page that is done or being fetched already (no duplicate item).

        The claim names the redirecting URL, so that URL's next fetch takes the target again if this processing
        dies; an unclaimed target's status is not this fetch's to record."""
        if result.final_url == result.url:
            return True
        claimed: Deferred[bool] = self._p.pool.claim(result.final_url, by=result.url)
        return claimed

    def rules(self) -> Rules | None:
        """None: the crawl parses with the node's rules as they are now."""
        return None

    def kind(self, result: FetchResult) -> str:
        return page_kind(self._p.rules, self._hub, result.final_url, result.url)

    def parsed(self, result: FetchResult, extracted: Extracted) -> Deferred[Any] | None:
        """Links one hop further than the leased URL (``result.url``, the pool's max_hops) into the pool, detail
        links to the batcher (the workers' pages end there, so they carry no hop count); the linkbase."""
        if not (extracted.lists or extracted.details):
            return None
        return self._links(result, extracted)

    @defer.inlineCallbacks
    def _links(self, result: FetchResult, extracted: Extracted) -> Any:
        """The links into the pool, details to the batcher: each made again while its storage refuses them."""
        p, pool = self._p, self._p.pool
        lists, details = extracted.lists, extracted.details
        within = set((yield p.gated("pool", lambda: pool.within_hops(result.url, lists + details), self.keep_waiting)))
        if len(within) < len(lists) + len(details):
            lists, details = [u for u in lists if u in within], [u for u in details if u in within]
            p.stats.incr("links_max_hops", len(extracted.lists) + len(extracted.details) - len(within))
        waits: list[Deferred[Any]] = [p.gated("pool", lambda: self._into_pool(result, extracted, lists, details),
                                              self.keep_waiting)]
        if details and not p.own_details:  # the batcher's spool (its seen set is the pool's)
            waits.append(p.gated("batches", lambda: p.add_details(details), self.keep_waiting))
        yield defer.gatherResults(waits, consumeErrors=True)

    def _into_pool(self, result: FetchResult, extracted: Extracted, lists: list[str],
                   details: list[str]) -> Deferred[Any]:
        """The list links (and details, when the pool has their queue) and the linkbase's entries, into the pool."""
        p, pool = self._p, self._p.pool
        waits: list[Deferred[Any]] = []
        if lists:
            waits.append(pool.addmany(lists, parent=result.url))
        if details and p.own_details:
            waits.append(pool.addmany(details, detail=True, parent=result.url))
        if p.linkbase:
            waits.append(pool.add_links(result.final_url, extracted.lists + extracted.details,
                                        extracted.list_anchors + extracted.detail_anchors,
                                        extracted.list_xpaths + extracted.detail_xpaths))
        return defer.gatherResults(waits, consumeErrors=True)

    def wanted(self) -> bool:
        """A fetched page is always processed to its end (a stop waits for it)."""
        return True

    def parse_failed(self, result: FetchResult) -> None:
        """Nothing to undo: the failure becomes the URL's processing error."""


def _none(_: Any) -> None:
    """What a recorded outcome fires with."""


def page_kind(rules: Rules, hub: bool, *urls: str) -> str:
    """How a crawled page is parsed: a hub is a list; else the kind of the first of ``urls`` (the page's, then the
    URL that redirected to it) its site classifies, or a list."""
    if hub:
        return "list"
    for url in urls:
        kind = rules.classify(url)
        if kind:
            return kind
    return "list"
