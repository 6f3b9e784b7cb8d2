"""The URL pool's contracts, one per need: a consumer types against the narrow one it uses.

=====================  =======================================================  ===================================
contract               methods                                                  used by
=====================  =======================================================  ===================================
:class:`IURLQueue`     add, addmany, within_hops, set_site_hops, size, empty,   the API, the demo, the status page,
                       stats                                                    a reload
:class:`ISeedLists`    (a queue) set_seeds, set_hubs, seed_urls                 the seeds service
:class:`IRecrawl`      (a queue) recrawl, recrawl_batched, batched_fetched,     the recrawler, the local worker,
                       set_recrawl                                              a reload
:class:`ILeases`       pop, claim, fetched, validators, next_due, set_status,   the crawler (statuses and pops)
                       throttle, set_statuses
:class:`ICheckpoints`  set_statuses with a checkpoint, checkpoint,              the items writer
                       drop_checkpoint
:class:`IBatchLedger`  seen_filter, seen_add, next_batch                        the batcher
:class:`IClaims`       claim_once, claim_content                                the seed timer, sitemaps, the engine
:class:`ILinkbase`     add_links                                                the crawler
:class:`IHostPolicy`   set_host_delay, set_host_group, set_politeness           robots.txt, the fetcher's lookups,
                                                                                a reload
:class:`IURLPoolAdmin` why, hosts, export, import_states                        the admin API (a backend may lack it)
=====================  =======================================================  ===================================

Two consumers need two of them: the seed timer (:class:`ISeedTimerPool`: seed lists and claims) and the sitemap
service (:class:`ISitemapPool`: a queue and claims).  :class:`IURLPool` is all of them and ``close``: what a
backend provides and what the composition root (spiderd.tap) holds.

Every method returns a Deferred: the LevelDB backend answers at once, the Redis backend over the network.  Bad
URLs are rejected with a logged reason and counted in ``stats()["rejected"]``; no method raises on them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol, Sequence

from zope.interface import Attribute, Interface

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from spiderd.core.conditional import Validators
    from spiderd.core.recrawls import Recrawl
    from spiderd.core.rules import PoliteRules

HOSTS_MOST = 200  # hosts one IURLPoolAdmin.hosts() answer holds at most


class PoolUnavailable(Exception):
    """The pool's storage cannot be reached or answered with an error now (a shared pool's server); retry later."""


class ExportReader(Protocol):
    """A pool's export (``IURLPoolAdmin.export``), read chunk by chunk."""

    def next(self) -> Deferred[list[dict[str, Any]] | None]:
        """Fires with the next entries (perhaps none yet), or None once everything was read."""


class IURLQueue(Interface):
    """Adding URLs to the pool, and its counts (seed 000's ``size`` and ``empty``, ``stats``)."""

    def add(url: str, always: bool = False, detail: bool = False) -> Deferred[bool]:
        """Queue ``url`` unless it is known; fires with True if it was queued.

        With ``always`` a known URL is queued too: a done or failed one at once,
        its failures forgotten; a waiting one is left as it is (False).  A pending
        (leased) one is queued when its lease ends, whatever the outcome of the
        fetch in flight (True the first time, False while it is so marked): seed
        000 queues it at once, but then a pop could hand it out while it is
        being fetched, and a URL is never handed out twice at once."""

    def addmany(
        urls: Iterable[str], always: bool = False, detail: bool = False, parent: str | None = None
    ) -> Deferred[int]:
        """Queue many URLs; fires with the number queued.

        ``parent``: the leased page the URLs are links of; with a link-hop limit
        (``max_hops``, see spiderd.frontier.pool.hops) they are one hop further
        from a seed than it, and those past their limit are not queued (counted
        in ``stats()["rejected"]["max-hops"]``).  Without one, they are at hop 0."""

    def within_hops(parent: str, urls: Sequence[str]) -> Deferred[list[str]]:
        """The links ``urls`` of ``parent`` that are within their hop limit (all, when no limit is set), for
        links that go elsewhere than the pool (the batcher); the others are counted as ``addmany`` counts them."""

    def set_site_hops(by_domain: Mapping[str, int]) -> Deferred[None]:
        """The sites' own hop limits (``[[sites]] max_hops`` by registered domain; 0: the pool's), changed at run
        time: links found from now on are held to them.  A URL queued while no limit was set counts as hop 0."""

    def size() -> Deferred[int]:
        """Fires with the number of waiting URLs."""

    def empty() -> Deferred[bool]:
        """Fires with True when no URL is waiting."""

    def stats() -> Deferred[dict[str, Any]]:
        """Fires with a dict: waiting, pending, done, failed, hosts, max_host, rejected."""


class ISeedLists(IURLQueue):
    """The configured seeds and hubs (the seeds service sets them, the seed timer injects the seeds)."""

    def set_hubs(urls: Iterable[str], refresh_span: float) -> Deferred[None]:
        """Replace the hub set; each hub is handed out at most once per span."""

    def set_seeds(urls: Iterable[str]) -> Deferred[int]:
        """Record the configured seeds (the seeds themselves are queued with ``addmany``); fires with how many
        the pool keeps.  Redis: added to seed 002's ``spider.seed.urls``, deleting nothing (other tools and
        nodes add to it too); LevelDB and memory: they replace the seeds given before."""

    def seed_urls() -> Deferred[Sequence[str]]:
        """Fires with the seeds the seed timer injects: on Redis every member of ``spider.seed.urls`` (whoever
        added it), on LevelDB and memory the seeds last given to ``set_seeds``."""


class IRecrawl(IURLQueue):
    """Queueing crawled pages again by age (seed 004's crawled sets): the recrawler."""

    def recrawl(cutoffs: Sequence[tuple[str, str, float]], limit: int) -> Deferred[int]:
        """Queue again, as add(always=True), up to ``limit`` done pages of the crawled sets ``(domain, kind,
        cut-off time)`` fetched at or before the cut-off; fires with the number queued."""

    def recrawl_batched(cutoffs: Sequence[tuple[str, str, float]], limit: int) -> Deferred[list[Recrawl]]:
        """Seed 004's ``mod_detail`` where detail pages go to workers: up to ``limit`` pages sent in batches (kept
        in crawled sets, see IBatchLedger.seen_add) of the sets ``(domain, "detail", cut-off time)`` last fetched
        (or sent) at or before the cut-off, oldest first; fires with each one's URL, previous fetch time and
        kept validators (spiderd.core.recrawls.Recrawl).  Each is scored as sent now, so a page goes out once per
        interval whether or not a worker tells its fetch (``batched_fetched``); done pages fetched by this node
        (``recrawl``) are left alone."""

    def batched_fetched(pages: Iterable[Recrawl]) -> Deferred[int]:
        """A worker fetched pages sent in batches: each ``Recrawl`` gives the URL, the fetch's time and the
        validators of its 200 or 304 (None: the 200 had none, which drops those kept).  A page kept in a crawled
        set is scored by that time and keeps those validators (with ``conditional_get``); any other is left
        alone.  Fires with the number recorded."""

    def set_recrawl(pairs: Sequence[tuple[str, str]]) -> Deferred[None]:
        """The (registered domain, kind) pairs whose done pages are kept in crawled sets, changed at run time (the
        sites' recrawl intervals): pages done from then on are kept by them (a page done before a pair was added
        is not in its set)."""


class IStatusWrites(Interface):
    """Recording outcomes, atomically with a writer's checkpoint: what :class:`ILeases` and :class:`ICheckpoints`
    share."""

    def set_statuses(statuses: Iterable[tuple[Any, ...]], checkpoint: tuple[str, int] | None = None) -> Deferred[None]:
        """Record ``(url, status_code)``, ``(url, status_code, reason)`` or ``(url, status_code, reason,
        validators)`` outcomes and, if given, ``checkpoint`` (a name, a count) in one atomic write: either all
        of them are recorded or none (a writer's commit point, see spiderd.feed.items).

        ``validators`` (spiderd.core.conditional.Validators, or None) are a done fetch's ETag and Last-Modified:
        with ``conditional_get``, the pool keeps them for the URLs it hands out again, hubs and pages of the
        kinds kept in crawled sets (``recrawl``), and for no other; a done status of such a URL without them
        drops those kept, as does its final failure.  A 304 (not modified) is done, as a 200."""


class ICheckpoints(IStatusWrites):
    """A writer's commit points, kept with the statuses they commit (``set_statuses(statuses, checkpoint)``):
    the items writer."""

    def checkpoint(name: str) -> Deferred[int | None]:
        """Fires with the count last recorded under ``name`` by ``set_statuses``, or None."""

    def drop_checkpoint(name: str) -> Deferred[None]:
        """Forget the checkpoint ``name``."""


class ILeases(IStatusWrites):
    """Statuses and pops: handing URLs out (leases) and taking their outcomes; the crawler's."""

    failure_threshold = Attribute("Failures retried before a URL is final.")
    max_throttles = Attribute("Throttles of a URL (see throttle) that do not count as its failures.")
    conditional_get = Attribute("Whether validators are kept (set_statuses) and handed out (validators).")
    pending_threshold = Attribute("Seconds a popped URL stays leased.")

    def pop(count: int, hub_percent: int = 50) -> Deferred[dict[str, bool]]:
        """Lease up to ``count`` URLs that politeness allows now; fires with ``{url: is_hub}``.

        Due hubs take up to ``hub_percent`` of it (at least one); of the rest, the
        pool's ``list_ratio`` and ``detail_ratio`` are reserved for waiting list and
        detail URLs (see spiderd.frontier.pool.split), and what is left goes host by host."""

    def claim(url: str, by: str | None = None) -> Deferred[bool]:
        """Lease a URL that was not handed out (a redirect target) unless it is final or leased; fires True if leased.

        ``by`` is the URL whose fetch was redirected: a claim it holds already is
        taken again (its earlier processing died), and by no other URL."""

    def fetched(url: str, elapsed: float | None = None) -> Deferred[None]:
        """The request for a handed-out URL is over: its host slot is free, its lease stays until set_status.

        ``elapsed`` (optional) is the fetch's duration in seconds: with adaptive politeness (``delay_factor``),
        the host's next URL waits ``delay_factor x elapsed`` from now, within ``min_delay`` and ``max_delay``."""

    def set_status(url: str, status_code: int, reason: str | None = None) -> Deferred[None]:
        """Record a fetch outcome: done, final failure, or a retry.

        A failure's ``reason`` (short text, see spiderd.core.status.reason; without one, the code's words) is kept
        as the URL's last failure, shown by ``why`` and carried in the export, until the URL is done."""

    def throttle(url: str, until: float, status_code: int, reason: str | None = None) -> Deferred[None]:
        """A throttling answer (429, 503 with or without Retry-After) for a handed-out ``url``: its host is handed
        out by no node before ``until`` (clock time; a later block wins), and the URL is queued again without
        counting a failure, up to ``max_throttles`` throttles of that URL; the next one is recorded as
        ``set_status(url, status_code, reason)``.  ``reason`` is kept as its last failure (``why``)."""

    def validators(url: str) -> Deferred[Validators | None]:
        """Fires with the validators kept for ``url`` (see set_statuses), or None: the crawler makes the fetch of
        a handed-out URL conditional on them.  Redis answers those of a URL this node popped from the pop's
        own answer (no round trip)."""

    def next_due() -> Deferred[float | None]:
        """Fires with seconds until ``pop`` could hand out something, or None if nothing waits."""


class IBatchLedger(Interface):
    """The batcher's seen set and batch numbers."""

    def seen_filter(urls: Iterable[str]) -> Deferred[list[str]]:
        """Fires with the canonical forms of ``urls`` never seen in any state (no duplicates); marks nothing."""

    def seen_add(urls: Iterable[str]) -> Deferred[int]:
        """Records ``urls`` as sent in a batch (final); fires with the number newly recorded.  A detail URL of a
        domain whose detail pages are recrawled (the pool's ``recrawl`` pairs) is also kept in its crawled set,
        scored by now, for ``IRecrawl.recrawl_batched``."""

    def next_batch(count: int = 1) -> Deferred[int]:
        """Reserves ``count`` batch numbers, unique across restarts (and nodes); fires with the first."""


class IClaims(Interface):
    """Claims over every node sharing the pool: a cron firing's (one node runs it), a page content's (the first
    URL that gave it)."""

    def claim_once(name: str, ttl: float) -> Deferred[bool]:
        """Fires True for the first claim of ``name`` within ``ttl`` seconds over every node sharing the pool, else False."""

    def claim_content(digest: str, url: str) -> Deferred[bool]:
        """Record that ``url`` gave the page content of ``digest`` (spiderd.core.digest) unless another URL did
        first; fires True if ``url`` holds it (now or from before), False if another URL does (a duplicate).
        Kept for good, across restarts and nodes (see spiderd.frontier.pool.content)."""


class ILinkbase(Interface):
    """Seed 004's linkbase: how each URL was first found."""

    def add_links(
        parent: str, urls: Sequence[str], anchors: Sequence[str] = (), xpaths: Sequence[str] = ()
    ) -> Deferred[int]:
        """Record that ``parent`` first linked ``urls`` (with ``anchors`` and the link elements' ``xpaths``, item
        for item); fires with the number recorded.  ``why`` shows parent, anchor and xpath."""


class IHostPolicy(Interface):
    """What fetching learns about hosts that the pool's politeness applies: robots.txt delays, addresses."""

    def set_host_delay(host: str, delay: float) -> Deferred[None]:
        """Raise a host's minimum delay (robots.txt Crawl-delay)."""

    def set_host_group(host: str, group: str) -> Deferred[None]:
        """Per-IP politeness: ``host`` shares one politeness slot (next-allowed time, requests in flight) with
        the other hosts of ``group`` (their address, as the fetch connected to it); ``group == host``: a slot
        of its own again.  A host is on its own until told a group."""

    def set_politeness(rules: PoliteRules) -> Deferred[None]:
        """Pace hosts by ``rules`` (``[fetch]``'s politeness keys, changed at run time) from their next request on:
        requests in flight and the next-allowed times already set are kept."""


class ISeedTimerPool(ISeedLists, IClaims):
    """What the seed timer uses: the seeds to inject, and a claim per firing (one node injects)."""


class ISitemapPool(IURLQueue, IClaims):
    """What the sitemap service uses: adding the URLs it reads, and a claim per site and round (one node reads)."""


class ICrawlPool(ILeases, IURLQueue, ILinkbase):
    """What the fetch loop uses: pops and leases, the statuses of what it fetched, its links added (within their
    hops) and linked (the linkbase)."""


class IURLPool(ICrawlPool, ICheckpoints, IBatchLedger, ISeedTimerPool, IRecrawl, ISitemapPool, IHostPolicy):
    """The whole URL pool of seed 000: every contract above, and closing; what a backend provides.

    Only the composition root (spiderd.tap), the pool service and the backends hold it; every other part takes
    the narrow contract it uses.  What only operators and tools use (why, hosts, export, import) is
    :class:`IURLPoolAdmin`, which a backend may lack."""

    def close() -> Deferred[None]:
        """Release the storage; fires when closed."""


class IURLPoolAdmin(Interface):
    """What operators and tools ask of a pool, beside its contracts (:class:`IURLPool`).

    ``GET /api/why`` (and spiderctl why), ``GET /api/hosts`` (spiderctl hosts), ``GET /api/export`` and ``POST
    /api/import`` (spiderctl export and import) are its only callers in the
    node: no part of the crawl needs it.  A backend may lack it; those
    endpoints then answer 404, "not available for this pool".  The LevelDB,
    memory and Redis pools provide it.  Like the others, every method but
    ``export`` returns a Deferred.
    """

    def why(url: str) -> Deferred[dict[str, Any]]:
        """Fires with a dict describing the URL's state, failures, lease and host; a URL that failed has
        ``last_failure``: ``{"reason": text, "at": time, "failures": n}``; one whose validators are kept has
        ``validators``: ``{"etag": text or None, "last_modified": Unix seconds or None}``."""

    def hosts(limit: int = 50) -> Deferred[list[dict[str, Any]]]:
        """Fires with at most ``limit`` (1-HOSTS_MOST) hosts to look at first: those a throttling answer blocks
        now (the latest block end first), then those with the most waiting URLs; each a dict: ``host``,
        ``waiting``, ``inflight``, ``concurrency``, ``next_in`` (seconds until it may be asked again), ``delay``,
        ``delay_why`` (``throttled``, ``adaptive``, ``crawl-delay``, ``configured`` or None), ``throttled_until``
        (or None) and ``errors`` (its failed fetches among the last 1000 this node recorded).  Cheap: no URL
        is read (the embedded pool passes once over its host table in memory; Redis reads 2 x ``limit`` hosts)."""

    def export(chunk: int = 1000) -> ExportReader:
        """A reader of every entry (spiderd.frontier.pool.records): its ``next()`` fires with a list, or None at the end."""

    def import_states(records: Iterable[Any]) -> Deferred[dict[str, Any]]:
        """Re-add exported URLs, restore unknown finished fingerprints; fires with queued/restored/known/rejected."""

