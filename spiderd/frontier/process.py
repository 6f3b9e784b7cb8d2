"""One fetched answer through the frontier: throttling, a 304, a redirect's claim, the parse, the links into
the pool (within their hops), the page into the store, the item and the statuses.

The crawl loop (:mod:`.crawler`) fetches; a :class:`Processor` does the rest of a URL's way.  A URL's status is
recorded only after its links and page are safely handed on, and with its item's line (the item writer records
it), so a crash in between hands the URL out again: nothing is counted done that was not done, and no item is
written twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from spiderd.core import conditional as cg
from spiderd.core import throttle as th
from spiderd.core.stats import CrawlStats
from spiderd.core.urls import fingerprint, host_of
from spiderd.feed.items import ItemWriter, Status
from spiderd.fetch.fetcher import FetchResult
from spiderd.frontier.interfaces import IURLPool
from spiderd.store.interfaces import IPageStore

if TYPE_CHECKING:
    from spiderd.feed.warcfiles import WarcWriter
    from spiderd.fetch.extract import Rules
    from spiderd.fetch.parsepool import ParsePool

log = Logger()


class Processor:
    """What happens to a fetched answer; shared by every URL of the crawl."""

    def __init__(
        self,
        reactor: IReactorTime,
        pool: IURLPool,
        parser: ParsePool,
        rules: Rules,
        stats: CrawlStats,
        detail_sink: Callable[[list[str]], Deferred[Any]] | None,
        *,
        store: IPageStore | None = None,
        items: ItemWriter | None = None,
        archive: WarcWriter | None = None,
        linkbase: bool = False,
        max_retry_after: float = th.MAX_RETRY_AFTER,
        conditional_get: bool = True,
        skip_duplicate_content: bool = False,
    ) -> None:
        """``detail_sink``: where detail links go (the batcher), or None: the pool's detail queue."""
        self._reactor = reactor
        self.pool = pool
        self._parser = parser
        self._rules = rules
        self.stats = stats
        self._detail_sink = detail_sink or (lambda urls: pool.addmany(urls, detail=True))
        self._own_details = detail_sink is None  # detail links go to the pool's detail queue (with their hops)
        self._store = store
        self._items = items
        self._archive = archive  # a WarcWriter: every HTTP answer's records, on disk before its URL's status
        self._linkbase = linkbase
        self.throttles = th.HostThrottles(max_retry_after)  # consecutive 429/503 per host: the back-off
        self._conditional = conditional_get  # a 200's validators go with its status
        self._skip_duplicates = skip_duplicate_content  # a detail page another URL gave first: no item, not stored

    def add_details(self, urls: list[str]) -> Deferred[Any]:
        """Send detail URLs where the crawl sends those it finds (the batcher, or the pool's detail queue)."""
        return self._detail_sink(urls)

    @defer.inlineCallbacks
    def process(self, result: FetchResult, hub: bool, sent: cg.Validators | None = None) -> Any:
        """Handle the page, then record its status (and its redirect target's, when claimed, and its canonical
        URL's, when the page names one: that URL is then done too and not fetched again).

        With an item, the statuses are recorded by the item writer together
        with the item's line (see spiderd.feed.items): a URL is done only once its
        links, its page and its item are safe, and then exactly once.  A 200's
        validators go with its status; a 304 to a fetch conditional on ``sent``
        is done with nothing else.  With an ``archive``, every HTTP answer is archived first.
        """
        if self._archive is not None and result.headers is not None:
            yield self._archive.write(result)
            self.stats.incr("archived")
        if th.throttled(result.status):
            yield self._throttled(result)
            return
        if result.status > 0:
            self.throttles.answered(host_of(result.url))
        if result.status == cg.NOT_MODIFIED and sent is not None:
            yield self._not_modified(result, sent)
            return
        statuses: list[Status] = [(result.url, result.status, result.reason)]  # reason: None for a page
        if result.validators is not None and self._conditional:
            statuses[0] = (result.url, result.status, result.reason, result.validators)
        if result.status == 200 and (yield self._is_new(result)):
            if result.final_url != result.url:
                statuses.append((result.final_url, result.status))
            extracted = yield self._handle_page(result, hub)
            if extracted.canonical is not None and all(extracted.canonical != s[0] for s in statuses):
                statuses.append((extracted.canonical, result.status))
            item = extracted.item
            if item is not None and self._items is not None:
                yield self._items.write(item, statuses)
                self.stats.incr("items")
                return
        yield self.pool.set_statuses(statuses)

    def _not_modified(self, result: FetchResult, sent: cg.Validators) -> Deferred[None]:
        """A 304: the page did not change since the fetch whose validators were ``sent``. It is done again (a
        recrawled page goes back to its crawled set for the next interval) with them, as the 304 updated them;
        nothing is parsed, written or stored, and no link is added again."""
        self.stats.incr("not_modified")
        d: Deferred[None] = self.pool.set_statuses([(result.url, result.status, None, sent.updated(result.validators))])
        return d

    def _throttled(self, result: FetchResult) -> Deferred[None]:
        """A 429 or 503: block the URL's host in the pool until its Retry-After, or for the back-off of its
        consecutive throttles; the URL goes back to its queue (see IURLPool.throttle)."""
        wait = self.throttles.wait(host_of(result.url), result.retry_after)
        self.stats.errors["throttled"] += 1
        reason = th.reason(result.status, wait)
        log.info("{url}: {reason}", url=result.url, reason=reason)
        until = self._reactor.seconds() + wait
        d: Deferred[None] = self.pool.throttle(result.url, until, result.status, reason)
        return d

    @defer.inlineCallbacks
    def _is_new(self, result: FetchResult) -> Any:
        """False if a redirect led to a page that is done or being fetched already (no duplicate item).

        The claim names the redirecting URL, so that URL's next fetch takes the
        target again if this processing dies; an unclaimed target's status is
        not this fetch's to record.
        """
        if result.final_url == result.url:
            return True
        claimed = yield self.pool.claim(result.final_url, by=result.url)
        if not claimed:
            self.stats.incr("redirect_duplicates")
        return claimed

    def _duplicate(self, extracted: Any, url: str) -> Deferred[bool]:
        """With skip_duplicate_content, True when another URL gave this detail page's content first (the pool's
        claim_content): the page then gives no item and is not stored; its links are followed, the URL is done."""
        if not self._skip_duplicates or extracted.digest is None:
            return defer.succeed(False)
        d: Deferred[bool] = self.pool.claim_content(extracted.digest, extracted.canonical or url)
        return d.addCallback(lambda holds: not holds)

    @defer.inlineCallbacks
    def _handle_page(self, result: FetchResult, hub: bool) -> Any:
        """Links into the pool, the page into the store (not a ``noindex`` one; a page with a canonical URL
        under that URL, as its item); fires with the Extracted (its item to write, or None)."""
        url = result.final_url
        kind = "list" if hub else (self._rules.classify(url) or self._rules.classify(result.url) or "list")
        fetched_at = self._reactor.seconds()
        preset = self._store.preset if kind == "detail" and self._store is not None else None
        extracted = yield self._parser.parse(
            url, result.body, result.content_type, kind, fetched_at, result.status, compress=preset,
            robots_tag=result.robots_tag,
        )
        if extracted.error:
            self.stats.incr(f"parse_{extracted.error}")
        lists, details = extracted.lists, extracted.details
        if lists or details:  # links one hop further than the leased URL (result.url): the pool's max_hops
            within = set((yield self.pool.within_hops(result.url, lists + details)))
            if len(within) < len(lists) + len(details):
                lists, details = [u for u in lists if u in within], [u for u in details if u in within]
                self.stats.incr("links_max_hops", len(extracted.lists) + len(extracted.details) - len(within))
        waits: list[Deferred[Any]] = []
        if lists:
            waits.append(self.pool.addmany(lists, parent=result.url))
        if details and self._own_details:
            waits.append(self.pool.addmany(details, detail=True, parent=result.url))
        elif details:  # to the batcher: the workers' pages end there, so they carry no hop count
            waits.append(self._detail_sink(details))
        if self._linkbase and (extracted.lists or extracted.details):
            waits.append(self.pool.add_links(url, extracted.lists + extracted.details,
                                             extracted.list_anchors + extracted.detail_anchors,
                                             extracted.list_xpaths + extracted.detail_xpaths))
        if extracted.noindex:
            self.stats.incr("noindex")
        elif kind == "detail" and (yield self._duplicate(extracted, url)):
            extracted.item = None
            self.stats.incr("duplicate_content")
        elif kind == "detail" and self._store is not None:
            key = extracted.canonical or url
            saved = self._store.save(key, fingerprint(key), result.body, compressed=extracted.compressed,
                                     digest=extracted.digest)

            def stored(_: None) -> None:
                self.stats.incr("stored")

            waits.append(saved.addCallback(stored))
        self.stats.incr("links_list", len(extracted.lists))
        self.stats.incr("links_detail", len(extracted.details))
        if extracted.skipped:
            self.stats.incr("links_skipped", extracted.skipped)
        yield defer.gatherResults(waits, consumeErrors=True)
        return extracted
