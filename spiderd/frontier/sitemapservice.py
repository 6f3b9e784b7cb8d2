"""Sitemaps into the pool: a host's sitemaps are read when its robots.txt is first read, then every ``refresh``.

The trigger is robots.txt (:meth:`spiderd.fetch.robots.Robots.add_sitemap_listener`): the first time a host of
the ``[[sites]]`` has its robots.txt read, the sitemaps it names (``[sitemaps] from_robots``) and the configured
``paths`` of that host (``/sitemap.xml``) are fetched, one file after the other (``per_host_delay`` apart, or
the host's ``[fetch.hosts]`` delay), at most ``max_files`` of them, a sitemap index's sitemaps included: an
index listed by an index is not read (one level of nesting, as the protocol allows), nor is any file twice, so
an index that lists itself ends there.  A host with nothing to read (no ``Sitemap:`` line, no ``paths``) is
neither claimed, nor timed, nor remembered: it costs the reader no memory.  At most HOSTS_AT_ONCE hosts are
read at a time (a file is held whole, up to ``max_size``, while it is parsed).  Each file is parsed and filtered on a lane of its own
(:func:`spiderd.fetch.sitemaps.read`: a 50 MB file takes about a second), and its URLs are queued in chunks
of ADD_CHUNK, cooperatively: list URLs into the pool, detail URLs where the crawler sends them (the batcher,
or the pool's detail queue).

Again: every ``refresh`` seconds after a read ends (0: never), the host's sitemaps are read again (those its
robots.txt named when last read).  With ``lastmod``, a URL whose ``<lastmod>`` is later than the start of the
previous read is queued with ``always`` (fetched again even if done: it changed since the sitemap was last
seen, so most likely since it was fetched); the others are queued as any link (a known URL is left as it
is).  The first read of a run has no previous read, so it only adds URLs the pool does not know.  Nodes that
share a pool read a host's sitemaps once per ``refresh`` between them (``claim_once``).

While a read is under way the crawl is not over (:meth:`busy`), and listeners (the crawler's ``kick``) are
told whenever URLs were queued and when a read ends.
"""

from __future__ import annotations

import functools
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any, Callable, Iterator

from twisted.application.service import Service
from twisted.internet import defer, task
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.config.sections import FetchSection, PoolSection, SitemapsSection
from spiderd.contracts.pool import ISitemapPool
from spiderd.core.blocking import Lane
from spiderd.core.lifecycle import InFlight
from spiderd.core.stats import CrawlStats
from spiderd.core.rules import Site
from spiderd.core.urls import BadURL, canonicalize, host_of
from spiderd.fetch import sitemaps
from spiderd.fetch.extract import Rules

if TYPE_CHECKING:
    from spiderd.fetch.fetcher import Fetcher
    from spiderd.fetch.robots import Robots

log = Logger()

MAX_DEPTH = 1  # an index's sitemaps are read; an index among them is not
HOSTS_AT_ONCE = 2
ADD_CHUNK = 1000
MAX_HOSTS = 20000  # idle hosts remembered (their last read, their robots.txt's sitemaps); the oldest ones go
REDIRECTS = 5
ONCE_TTL = 86400.0  # refresh = 0: how long nodes sharing a pool leave a host's sitemaps to the node that read them


class _Host:
    __slots__ = ("named", "read_at", "reading", "call")

    def __init__(self) -> None:
        self.named: list[str] = []  # the sitemaps its robots.txt named when last read
        self.read_at: float | None = None  # when its last read started
        self.reading = False
        self.call: IDelayedCall | None = None  # the refresh


class SitemapService(Service):
    """Reads each site host's sitemaps (see the module docstring) and queues their URLs."""

    name = "sitemaps"  # type: ignore[assignment]  # Service declares it None

    def __init__(self, clock: IReactorTime, pool: ISitemapPool, robots: Robots,
                 fetch_raw: Callable[[str, int], Deferred[Any]], lane: Lane, rules: tuple[Rules, Rules],
                 config: SitemapsSection, stats: CrawlStats,
                 detail_sink: Callable[[list[str]], Deferred[Any]] | None = None,
                 cooperate: Callable[[Iterator[Any]], Any] = task.cooperate, *,
                 fetching: FetchSection = FetchSection()) -> None:
        """``fetch_raw(url, max_size)`` fetches a file; ``rules`` are two compiled copies of the site rules, one for
        the reactor thread and one for the lane; ``config`` is the ``[sitemaps]`` section; ``detail_sink`` takes
        detail URLs (else the pool's detail queue); two files of one host are fetched its ``[fetch]`` delay apart
        (``fetching``: per_host_delay, or its ``[fetch.hosts]`` table's)."""
        self._clock = clock
        self._pool = pool
        self._fetch_raw = fetch_raw
        self._lane = lane
        self._rules, self._lane_rules = rules
        self._config = config
        self._fetching = fetching
        self._stats = stats
        self._detail_sink = detail_sink
        self._cooperate = cooperate
        self._hosts: dict[str, _Host] = {}  # those being read, and the idle ones remembered
        self._idle: OrderedDict[str, None] = OrderedDict()  # the idle ones, the one used longest ago first
        self._at_once = defer.DeferredSemaphore(HOSTS_AT_ONCE)
        self._work = InFlight()
        self._listeners: list[Callable[[], Any]] = []
        self._reading = 0
        robots.add_sitemap_listener(self.robots_read)

    # -- service -------------------------------------------------------------------

    def set_sites(self, sites: tuple[Site, ...]) -> None:
        """Read the sitemaps of ``sites`` from now on (the configuration changed at run time); a file being read
        on the lane finishes with the rules it started with."""
        self._rules.replace(sites)
        self._lane_rules = self._rules.with_sites(sites)

    def configure(self, config: SitemapsSection, fetching: FetchSection) -> None:
        """Read by ``config`` (``[sitemaps]``) and pace a host's files by ``fetching`` from each host's next read on
        (the configuration changed at run time); a read under way ends as it started.  A new ``refresh`` moves the
        next reads: to the new interval after the end of the read before (at once if that is past; none with 0; a
        host read once so far, its interval from now)."""
        old, self._config, self._fetching = self._config.refresh, config, fetching
        if config.refresh == old:
            return
        now = self._clock.seconds()
        for origin, host in self._hosts.items():
            ended = now
            if host.call is not None and host.call.active():
                ended = host.call.getTime() - old
                host.call.cancel()
            host.call = None
            if self.running and config.refresh > 0 and not host.reading and host.read_at is not None:
                host.call = self._clock.callLater(max(0.0, ended + config.refresh - now), self._refresh, origin)

    def startService(self) -> None:
        super().startService()
        self._lane.start()

    def stopService(self) -> Deferred[None]:
        """Cancel the refreshes and the reads under way; fires once they are over."""
        super().stopService()
        for host in self._hosts.values():
            if host.call is not None and host.call.active():
                host.call.cancel()
        self._work.cancel_all()
        return self._work.wait().addBoth(lambda _: self._lane.stop())

    def add_listener(self, listener: Callable[[], Any]) -> None:
        """Call ``listener()`` whenever URLs were queued and whenever a host's read ends."""
        self._listeners.append(listener)

    def busy(self) -> bool:
        """True while some host's sitemaps are being read (the crawl is not over)."""
        return self._reading > 0

    def settled(self) -> Deferred[None]:
        """Fires once the reads under way are over."""
        return self._work.wait()

    # -- when robots.txt is read ----------------------------------------------------

    def robots_read(self, origin: str, named: list[str]) -> None:
        """A host's robots.txt was read and names ``named``: read the host's sitemaps if never read (this run).

        A host with no sitemap to read (its robots.txt names none, no ``paths``) is neither claimed nor timed
        nor remembered (and forgotten if it was): it costs no memory."""
        if not self.running or self._rules.site_for(origin + "/") is None:
            return
        named = named[: self._config.max_files] if self._config.from_robots else []
        host = self._hosts.get(origin)
        if not named and not self._config.paths:
            if host is not None and host.reading:
                host.named = []  # for its next refresh, if it comes before the next read of its robots.txt
            elif host is not None:
                self._forget(origin)
            return
        if host is None:
            host = self._hosts[origin] = _Host()
        if not host.reading:
            self._rest(origin)
        if self._config.from_robots:
            host.named = named
        if not host.reading and host.read_at is None:
            self._start(origin, host)

    def _rest(self, origin: str) -> None:
        """``origin`` is idle, the last used: the idle hosts used longest ago past MAX_HOSTS are forgotten (popped
        from the head of the idle order, O(1) each: a host being read is never among them, nor scanned)."""
        self._idle[origin] = None
        self._idle.move_to_end(origin)
        while len(self._idle) > MAX_HOSTS:
            self._forget(next(iter(self._idle)))

    def _forget(self, origin: str) -> None:
        """Forget the idle host ``origin``: its place in the idle order, its refresh."""
        self._idle.pop(origin, None)
        host = self._hosts.pop(origin)
        if host.call is not None and host.call.active():
            host.call.cancel()

    def _refresh(self, origin: str) -> None:
        host = self._hosts.get(origin)
        if host is not None and self.running and not host.reading:
            host.call = None
            self._start(origin, host)

    def _start(self, origin: str, host: _Host) -> None:
        host.reading = True
        self._idle.pop(origin, None)
        self._reading += 1
        started = self._clock.seconds()
        since = host.read_at if self._config.lastmod else None
        ttl = self._config.refresh or ONCE_TTL
        d = self._pool.claim_once(f"sitemaps:{origin}" + (f"@{ttl:g}" if ttl != ONCE_TTL else ""), ttl)  # a claim
        # per refresh: one made under another (a reload changed it) does not hold this read back
        d.addCallback(lambda won: self._at_once.run(self._read, origin, host, since) if won else None)
        d.addErrback(self._failed, origin)
        d.addBoth(self._ended, origin, host, started)
        self._work.track(d)

    def _failed(self, failure: Any, origin: str) -> None:
        if failure.check(defer.CancelledError) and not self.running:
            return
        self._stats.incr("sitemap_errors")
        log.failure("Reading the sitemaps of {origin} failed", failure, origin=origin)

    def _ended(self, _: Any, origin: str, host: _Host, started: float) -> None:
        host.reading = False
        host.read_at = started
        self._reading -= 1
        self._rest(origin)
        if self.running and self._config.refresh > 0:
            host.call = self._clock.callLater(self._config.refresh, self._refresh, origin)
        self._notify()

    def _notify(self) -> None:
        for listener in self._listeners:
            listener()

    # -- one host --------------------------------------------------------------------

    def _delay_of(self, host: str) -> float:
        """Seconds between two sitemap files of ``host``: its ``[fetch.hosts]`` delay, else ``per_host_delay``."""
        rule = self._fetching.hosts.get(host)
        return rule.delay if rule is not None else self._fetching.per_host_delay

    def _sitemap_urls(self, origin: str, host: _Host) -> list[str]:
        """The host's sitemap files to start from: its robots.txt's, then the configured paths, on site hosts."""
        urls = []
        named = host.named if self._config.from_robots else []
        for url in [*named, *(origin + path for path in self._config.paths)]:
            try:
                canonical = canonicalize(url, self._rules.max_url_length)
            except BadURL:
                continue
            if self._rules.site_for(canonical) is not None:
                urls.append(canonical)
            else:
                log.info("Sitemap {url} of {origin}: not on a [[sites]] host, not read", url=url, origin=origin)
        return list(dict.fromkeys(urls))

    @defer.inlineCallbacks
    def _read(self, origin: str, host: _Host, since: float | None) -> Any:
        origin_host = host_of(origin + "/")
        todo = deque((url, 0) for url in self._sitemap_urls(origin, host))
        seen: set[str] = set()
        files = urls = skipped = 0
        while todo:
            url, depth = todo.popleft()
            if url in seen:
                continue
            if files >= self._config.max_files:
                log.info("Sitemaps of {origin}: more than {max} files, the rest are not read", origin=origin,
                         max=self._config.max_files)
                break
            seen.add(url)
            if files and self._delay_of(origin_host) > 0:
                yield task.deferLater(self._clock, self._delay_of(origin_host), lambda: None)
            files += 1
            found = yield self._read_file(url, origin_host, since)
            if found is None:
                continue
            skipped += found.skipped
            if found.kind == "sitemapindex":
                if depth >= MAX_DEPTH:
                    log.info("Sitemap {url}: an index within an index, not read", url=url)
                    continue
                todo.extend((child, depth + 1) for child in found.sitemaps if child not in seen)
            elif found.urls:
                urls += yield self._add(found)
        self._stats.incr("sitemap_urls", urls)
        self._stats.incr("sitemap_skipped", skipped)
        if files:
            log.info("Sitemaps of {origin}: {files} files read, {urls} URLs queued, {skipped} skipped",
                     origin=origin, files=files, urls=urls, skipped=skipped)
        return urls

    @defer.inlineCallbacks
    def _read_file(self, url: str, origin_host: str, since: float | None) -> Any:
        """One file fetched and read on the lane: its Found, or None (a failed fetch, off the sites)."""
        result = yield self._fetch_raw(url, self._config.max_size)
        if not 200 <= result.status < 300:
            self._stats.incr("sitemap_errors")
            log.info("Sitemap {url}: {why}", url=url, why=result.reason or f"http {result.status}")
            return None
        final = result.final_url
        if final != url and self._rules.site_for(final) is None:
            log.info("Sitemap {url}: redirected off the sites, to {final}", url=url, final=final)
            return None
        found = yield self._lane.run(sitemaps.read, result.body, final, origin_host, self._lane_rules, since,
                                     self._config.max_urls, self._config.max_size)
        self._stats.incr("sitemaps")
        if found.error or found.kind is None:
            self._stats.incr("sitemap_errors")
            log.info("Sitemap {url}: {why}", url=url, why=_WHY.get(found.error or "", "not a sitemap"))
        return found

    def _add(self, found: sitemaps.Found) -> Deferred[int]:
        """Queue a file's URLs, ADD_CHUNK at a time, cooperatively; fires with the number queued."""
        added = [0]
        work = self._cooperate(self._chunks(found, added))
        d: Deferred[int] = Deferred(lambda _: _stop(work))  # a read cancelled at the stop queues nothing more

        def ended(result: Any) -> None:
            if not d.called:
                d.errback(result) if isinstance(result, Failure) else d.callback(added[0])

        work.whenDone().addBoth(ended)
        return d

    def _chunks(self, found: sitemaps.Found, added: list[int]) -> Iterator[Deferred[Any]]:
        for urls, always, detail in ((found.lists, False, False), (found.changed_lists, True, False),
                                     (found.details, False, True), (found.changed_details, True, True)):
            for start in range(0, len(urls), ADD_CHUNK):
                chunk = urls[start : start + ADD_CHUNK]
                if detail and self._detail_sink is not None:
                    d = self._detail_sink(chunk)
                else:
                    d = self._pool.addmany(chunk, always=always, detail=detail)
                yield d.addCallback(self._queued, added)

    def _queued(self, count: Any, added: list[int]) -> None:
        added[0] += count or 0
        self._notify()


def _stop(work: Any) -> None:
    try:
        work.stop()
    except (task.TaskDone, task.TaskFailed):
        pass


_WHY = {
    "too-many": "more entries than [sitemaps] max_urls: the first are read",
    "too-large": "larger than [sitemaps] max_size uncompressed: the entries within it are read",
    "bad-gzip": "a damaged gzip stream: the entries before the damage are read",
    "doctype": "a DOCTYPE (refused: sitemaps have none, entity bombs need one)",
    "unparseable": "unparseable",
}


def sitemap_service(config: SitemapsSection, fetching: FetchSection, limits: PoolSection, sites: tuple[Site, ...],
                    clock: IReactorTime, pool: ISitemapPool, fetcher: Fetcher, lane: Lane, stats: CrawlStats,
                    detail_sink: Callable[[list[str]], Deferred[Any]] | None = None) -> SitemapService | None:
    """The sitemap reader of ``[sitemaps]`` (the URL limits of ``[pool]``, the ``[[sites]]``), or None when no
    sitemap is to be read (or robots.txt is not)."""
    if not (config.from_robots or config.paths):
        return None
    if fetcher.robots is None:
        log.info("Sitemaps are not read: they are found when robots.txt is read, and fetch.robots is false")
        return None
    def compiled() -> Rules:
        return Rules(sites, limits.max_url_length, limits.max_path_depth)

    fetch = functools.partial(fetcher.fetch_raw, redirects=REDIRECTS, truncate=True)
    return SitemapService(clock, pool, fetcher.robots, fetch, lane, (compiled(), compiled()), config, stats,
                          detail_sink=detail_sink, fetching=fetching)
