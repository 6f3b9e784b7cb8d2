"""robots.txt: fetched once per origin, parsed with protego, cached with a TTL.

The parsed rules of the origins used last stay in memory (``max_entries``); every answer is also kept in a
:mod:`~spiderd.fetch.robotstore` until it expires, so an origin that left the memory table is parsed again
from there, not fetched again: one request per origin per TTL at any number of origins.  Origins whose files
have the same rules (``Sitemap:`` lines aside: the files of a platform's sites, a CMS's default) share one
parse (:class:`Parses`): an origin in the table costs its entry (about 270 bytes), not a parse (1.7 KB for
a file of two rules, more for longer ones).

Rules (RFC 9309 where it is clear, Scrapy where it is kinder): a 2xx body is
parsed; 4xx means everything is allowed; a 5xx or a network error also allows
everything, but is cached for ten minutes only, so the file is asked for again
soon.  A Crawl-delay, when given (at most 300 s is honoured), raises the host's
delay in the pool and in the worker's per-host slots.  Each time an origin's
robots.txt is read (whatever the answer), the sitemap listeners hear of it with
the file's ``Sitemap:`` URLs (none unless a 2xx names some).
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Protocol
from urllib.parse import urljoin, urlsplit
from weakref import WeakValueDictionary

from protego import Protego
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core.urls import host_of
from spiderd.fetch.robotstore import Kept, MemoryStore, RobotsStore

if TYPE_CHECKING:
    from spiderd.fetch.fetcher import FetchResult

log = Logger()

MAX_ROBOTS_SIZE = 512 * 1024
TTL = 24 * 3600.0
ERROR_TTL = 600.0
ROBOTS_REDIRECTS = 5  # RFC 9309 2.3.1.2: follow at least five consecutive redirects
MAX_SITEMAPS = 1000  # Sitemap: lines of one robots.txt passed on (the readers cap the files they read)
MAX_CRAWL_DELAY = 300.0  # as Heritrix's respectCrawlDelayUpToSeconds: a hostile Crawl-delay cannot park a host
SITEMAP_LINE = re.compile(r"[ \t]*sitemap[ \t]*:", re.IGNORECASE)  # a line protego reads as Sitemap: for sure


class _Entry:
    __slots__ = ("parser", "expires", "waiters", "answer")

    def __init__(self) -> None:
        self.parser: Protego | None = None
        self.expires = 0.0
        self.waiters: list[Deferred[None]] | None = []
        self.answer: FetchResult | None = None  # the fetch of robots.txt, until a page's fetch takes it


class FetchRaw(Protocol):
    """How robots.txt is fetched: ``Fetcher.fetch_raw`` (its redirects bound) or a test's stand-in."""

    def __call__(self, url: str, max_size: int, *, truncate: bool = ...) -> Deferred[FetchResult]: ...


class Robots:
    """``allowed(url)`` for a user agent, fetching each origin's robots.txt at most once per TTL."""

    def __init__(
        self,
        fetch_raw: FetchRaw,
        clock: IReactorTime,
        user_agent: str,
        on_delay: Callable[[str, float], Any] | None = None,
        max_entries: int = 20000,
        store: RobotsStore | None = None,
    ) -> None:
        """``max_entries``: origins whose parsed rules stay in memory; ``store``: where every answer is kept
        until it expires (a :class:`~spiderd.fetch.robotstore.MemoryStore` if None)."""
        self._fetch_raw = fetch_raw
        self._clock = clock
        self._agent = agent_token(user_agent)
        self._on_delay: list[Callable[[str, float], Any]] = [on_delay] if on_delay is not None else []
        self._on_sitemaps: list[Callable[[str, list[str]], Any]] = []
        self._max = max_entries
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._parses = Parses()
        self._store: RobotsStore = store if store is not None else MemoryStore()
        self.keep_answers = False  # keep each robots.txt answer for the page fetch that takes it (WARC output)

    def add_delay_listener(self, listener: Callable[[str, float], Any]) -> None:
        """Call ``listener(host, seconds)`` too when a robots.txt gives a Crawl-delay."""
        self._on_delay.append(listener)

    def add_sitemap_listener(self, listener: Callable[[str, list[str]], Any]) -> None:
        """Call ``listener(origin, sitemap_urls)`` whenever an origin's robots.txt has been read (absolute URLs of
        its ``Sitemap:`` lines, at most MAX_SITEMAPS; none for a 4xx, a 5xx or a failed fetch)."""
        self._on_sitemaps.append(listener)

    def allowed(self, url: str, user_agent: str | None = None) -> Deferred[bool]:
        """Fires with True if ``url`` may be fetched (by ``user_agent``, if given, else the configured one)."""
        agent = self._agent if user_agent is None else agent_token(user_agent)
        origin = _origin(url)
        entry = self._known(origin)
        if entry is not None and entry.waiters is None:
            return defer.succeed(self._check(entry, url, agent))
        if entry is None:
            entry = self._start(origin)
            if entry.waiters is None:  # answered at once (a fetch_raw that answers synchronously)
                return defer.succeed(self._check(entry, url, agent))
        waiter: Deferred[None] = Deferred()
        assert entry.waiters is not None
        entry.waiters.append(waiter)
        return waiter.addCallback(lambda _: self._check(entry, url, agent))

    def take_answer(self, url: str) -> list[FetchResult]:
        """With ``keep_answers``: the fetch of ``url``'s robots.txt, once (to the first fetch that asks after it
        was fetched: archived with that page), else nothing."""
        entry = self._cache.get(_origin(url))
        if entry is None or entry.answer is None:
            return []
        answer, entry.answer = entry.answer, None
        return [answer]

    def cached(self, url: str) -> bool | None:
        """What the cache knows now, fetching nothing: True (allowed), False (disallowed), None (not known)."""
        entry = self._known(_origin(url))
        if entry is None or entry.waiters is not None:
            return None
        return self._check(entry, url, self._agent)

    def close(self) -> None:
        """Let go of the store."""
        self._store.close()

    def _known(self, origin: str) -> _Entry | None:
        """The origin's entry being fetched or still valid: from memory, else parsed again from the store."""
        entry = self._cache.get(origin)
        if entry is not None and (entry.waiters is not None or entry.expires > self._clock.seconds()):
            self._cache.move_to_end(origin)
            return entry
        kept = self._store.get(origin, self._clock.seconds())
        if kept is None:
            return None
        entry = self._remember(origin, _Entry())
        entry.waiters, entry.expires = None, kept.expires
        entry.parser, named = (None, []) if kept.body is None else self._parses.parse(kept.body, origin)
        self._tell_delay(origin, entry, again=True)  # a listener may have forgotten the host since
        if kept.earlier_run:  # kept across a restart: the sitemap readers hear of it once in this run, as fetched
            self._store.put(origin, Kept(kept.expires, kept.body), self._clock.seconds())
            self._sitemaps(origin, named)
        return entry

    def _remember(self, origin: str, entry: _Entry) -> _Entry:
        """``entry`` is ``origin``'s, the last used; the one used longest ago goes past ``max_entries``."""
        self._cache[origin] = entry
        self._cache.move_to_end(origin)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return entry

    def _check(self, entry: _Entry, url: str, agent: str) -> bool:
        return entry.parser is None or entry.parser.can_fetch(url, agent)

    def _start(self, origin: str) -> _Entry:
        entry = self._remember(origin, _Entry())
        fetched = self._fetch_raw(origin + "/robots.txt", MAX_ROBOTS_SIZE, truncate=True)
        d = fetched.addCallback(self._got, origin, entry).addErrback(_failed, origin)
        if self._on_sitemaps:
            d.addCallback(lambda named: self._sitemaps(origin, named))
        d.addBoth(lambda _: self._release(entry))
        return entry

    def _got(self, result: FetchResult, origin: str, entry: _Entry) -> list[str]:
        """The answer kept in ``entry`` and the store; the file's ``Sitemap:`` URLs (as written)."""
        now = self._clock.seconds()
        if self.keep_answers and result.headers is not None:
            entry.answer = result
        body, named = None, list[str]()
        if 200 <= result.status < 300:
            if result.error == "truncated":
                log.info("robots.txt of {origin} is larger than {size} KiB: its first {size} KiB are used (as "
                         "RFC 9309 and Google do)", origin=origin, size=MAX_ROBOTS_SIZE // 1024)
            body = _whole_lines(result.body) if result.error == "truncated" else result.body
            entry.parser, named = self._parses.parse(body, origin)
            entry.expires = now + TTL
            self._tell_delay(origin, entry)
        elif 400 <= result.status < 500:
            entry.expires = now + TTL
        else:
            entry.expires = now + ERROR_TTL
            log.info("robots.txt of {origin}: {why}, allowing all for {minutes:.0f} minutes", origin=origin,
                     why=_why(result), minutes=ERROR_TTL / 60)
        self._store.put(origin, Kept(entry.expires, body if entry.parser is not None else None), now)
        return named

    def _tell_delay(self, origin: str, entry: _Entry, again: bool = False) -> None:
        """The delay listeners hear of the Crawl-delay of ``entry``'s file, if it gives one."""
        delay = entry.parser.crawl_delay(self._agent) if entry.parser is not None else None
        if delay:
            self._delay(host_of(origin + "/"), float(delay), again)

    def _delay(self, host: str, delay: float, again: bool = False) -> None:
        if delay > MAX_CRAWL_DELAY and not again:
            log.info("robots.txt of {host}: Crawl-delay {delay} s, honoured as {cap} s", host=host, delay=delay,
                     cap=MAX_CRAWL_DELAY)
        delay = min(delay, MAX_CRAWL_DELAY)
        for listener in self._on_delay:
            listener(host, delay)

    def _sitemaps(self, origin: str, named: list[str]) -> None:
        """Tell the sitemap listeners what this robots.txt names (before its waiters go on: a crawl that waits
        for the sitemaps knows of them before the first page of the host is fetched)."""
        named = named[:MAX_SITEMAPS]
        urls = list(dict.fromkeys(urljoin(origin + "/robots.txt", u.strip()) for u in named if u.strip()))
        for listener in self._on_sitemaps:
            try:
                listener(origin, urls)
            except Exception:
                log.failure("Sitemap listener failed for {origin}", origin=origin)

    def _release(self, entry: _Entry) -> None:
        waiters, entry.waiters = entry.waiters or [], None
        for waiter in waiters:
            waiter.callback(None)


def _failed(failure: Failure, origin: str) -> list[str]:
    """A robots.txt fetch that failed in an unforeseen way (logged): it names no sitemap."""
    log.failure("robots.txt of {origin}", failure, origin=origin)
    return []


def agent_token(user_agent: str) -> str:
    """The name robots.txt groups are matched against: the user agent's product token (``spiderd`` of
    ``spiderd/1.0 (+https://...)``)."""
    return user_agent.split("/")[0]


class Parses:
    """Parsed robots.txt rules shared by the origins whose files have the same rules.

    A file's ``Sitemap:`` lines are site-wide and play no part in its groups (RFC 9309; protego reads them so),
    so the rest of its lines are parsed once for every origin that has them, and the ``Sitemap:`` lines apart.
    A parse stays while an origin in Robots' table holds it (a weak table)."""

    def __init__(self) -> None:
        self._by_rules: WeakValueDictionary[bytes, Protego] = WeakValueDictionary()

    def parse(self, body: bytes, origin: str) -> tuple[Protego | None, list[str]]:
        """The rules of ``body`` (None: unparseable) and its ``Sitemap:`` URLs as written."""
        lines = body.decode("utf-8", "replace").splitlines()  # protego's lines: a line is read on its own
        sitemap_lines = [line for line in lines if SITEMAP_LINE.match(line)]
        rules = "\n".join(line for line in lines if not SITEMAP_LINE.match(line))
        key = hashlib.blake2b(rules.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        parser = self._by_rules.get(key)
        if parser is None:
            parser = _parse_text(rules, origin)
            if parser is not None:
                self._by_rules[key] = parser
        named = _parse_text("\n".join(sitemap_lines), origin) if sitemap_lines else None
        return parser, list(named.sitemaps) if named is not None else []


def _parse(body: bytes, origin: str) -> Protego | None:
    """A whole file's rules (None: unparseable)."""
    return _parse_text(body.decode("utf-8", "replace"), origin)


def _parse_text(text: str, origin: str) -> Protego | None:
    try:
        return Protego.parse(text)
    except Exception:  # protego can raise on hostile input; treat it as no rules
        log.failure("Unparseable robots.txt of {origin}", origin=origin)
        return None


def _whole_lines(body: bytes) -> bytes:
    """A truncated body up to its last complete line (a rule cut in half is no rule)."""
    end = body.rfind(b"\n")
    return body[: end + 1] if end >= 0 else b""


def _why(result: FetchResult) -> str:
    """What went wrong with a robots.txt fetch, in words."""
    from spiderd.core import status as st

    if result.status >= 500:
        return f"the server answered {result.status}"
    return f"{result.error or st.name(result.status)} ({result.status})"


def robots_url(url: str) -> str:
    """The robots.txt that rules ``url`` (for messages: the API, the pool's failure reasons)."""
    return _origin(url) + "/robots.txt"


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
