"""Fetching one URL without blocking: timeouts, size limits, gzip/deflate/br, redirects, robots.txt.

Built on Twisted's ``Agent`` over one ``HTTPConnectionPool`` (one per source
address when addresses rotate).  treq is not used on this path: its
``ContentDecoderAgent`` inflates gzip without a bound (a gzip bomb would
allocate about 1000 times the bytes read) and it costs half as much CPU again
per response; the body protocol here inflates at most ``max_body_size``
bytes and aborts the transfer past it.  ``br`` is asked for and inflated the same way, bounded, when a Brotli
package that bounds its output is installed (:mod:`spiderd.fetch.brotli_body`).

Connections are pooled as :mod:`spiderd.fetch.connections` says: a connection the
server closed is never a failed fetch.

``fetch`` never fails: every outcome, network errors included, is a
:class:`FetchResult` whose ``status`` is an HTTP code or one of
:mod:`spiderd.core.status`'s negative codes.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from twisted.internet import defer, error
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import client
from twisted.web.http_headers import Headers
from twisted.web.iweb import IPolicyForHTTPS, IResponse

from spiderd.config.sections import FetchSection
from spiderd.core import status as st
from spiderd.core.conditional import NOT_MODIFIED, Validators, from_headers
from spiderd.core.reactors import ITCPClock
from spiderd.core.throttle import parse_retry_after, throttled
from spiderd.core.urls import BadURL, canonicalize
from spiderd.fetch.agent import Agent
from spiderd.fetch.body import BodyReader, Discard, TooLarge, Truncated, accept_encoding
from spiderd.fetch.connections import CachedEndpoints, ConnectionPool, pool_hosts
from spiderd.fetch import framing
from spiderd.fetch.dns import caching_reactor
from spiderd.fetch.robots import ROBOTS_REDIRECTS, Robots, robots_url
from spiderd.fetch.robotstore import robots_store
from spiderd.fetch.proxy import Proxies, ProxyUnsupported
from spiderd.fetch.siteopts import SiteOptions
from spiderd.fetch.tunnel import TunnelError, TunnelTimeout

log = Logger()
T = TypeVar("T")

REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
MAX_AGENT_HEADERS = 64  # per-request user agents whose headers are kept built
AddressListener = Callable[[str, str], object]  # (host, its address): per-IP politeness' set_host_group / set_group


@dataclass(slots=True)
class FetchResult:
    """What fetching a URL gave."""

    url: str
    status: int
    final_url: str
    body: bytes = b""
    content_type: str | None = None
    redirects: list[str] = field(default_factory=list)
    wire_bytes: int = 0
    elapsed: float = 0.0
    error: str | None = None
    reason: str | None = None  # why it failed, when the status says less (spiderd.core.status.reason); for the pool
    robots_tag: str | None = None  # the response's X-Robots-Tag headers, one per line (page directives)
    retry_after: float | None = None  # a 429/503's Retry-After, in seconds from the answer (None: absent or bad)
    validators: Validators | None = None  # a 200's or 304's ETag and Last-Modified (spiderd.core.conditional)
    # the answer as it came (WARC records, spiderd.feed.warc): None when there was no HTTP answer
    headers: list[tuple[str, str]] | None = None  # the response's headers (latin-1), in Twisted's capitalization
    http_version: str = "HTTP/1.1"
    phrase: str = ""  # the status line's reason phrase
    request_headers: list[tuple[str, str]] = field(default_factory=list)  # what fetch() sent (besides Host)
    fetched_at: float = 0.0  # clock time the answer was in (0: unknown)
    rendered: bytes | None = None  # the DOM a headless browser rendered of ``body`` (spiderd.engine.render)
    # with keep_answers (WARC output): the HTTP answers fetched on the way, in order: the robots.txt answers
    # fetched for this URL (and its redirects' hosts) and each redirect followed (3xx)
    previous: list[FetchResult] = field(default_factory=list)
    previous_fetch: float | None = None  # a recrawl's previous fetch: a 304's WARC revisit record refers to it
    parsed: Any = None  # the page's Extracted when a fetch worker parsed it where it fetched it (body then empty)

    @property
    def page(self) -> bytes:
        """What the page is parsed and stored as: the rendered DOM, else the body as fetched."""
        return self.body if self.rendered is None else self.rendered


@dataclass(frozen=True, slots=True)
class FetchConfig:
    """The fetcher's knobs (taken from the settings)."""

    user_agent: str = "spiderd"
    connect_timeout: float = 10.0
    timeout: float = 30.0
    max_body_size: int = 10 * 1024 * 1024
    max_redirects: int = 5
    per_host_connections: int = 8
    keepalive_timeout: float = 10.0
    max_idle_connections: int = 1000  # idle keep-alive connections of all hosts together, per pool (0: no cap)
    dns_cache_ttl: float = 300.0
    source_addresses: tuple[str, ...] = ()
    robots: bool = False  # obey robots.txt: the fetcher checks every URL against its own Robots
    robots_store: str = ""  # where its answers wait out their TTL (a LevelDB, emptied at the start); "": memory
    sites: tuple[Any, ...] = ()  # the [[sites]] (spiderd.core.rules.Site): their request headers and proxies, by host
    tell_addresses: bool = False  # per-IP politeness: each lookup's first address goes to the address listeners


def fetch_config(fetch: FetchSection, sites: tuple[Any, ...] = (), robots_store: str = "") -> FetchConfig:
    """The FetchConfig of the ``[fetch]`` section and the ``[[sites]]`` (per-host connections are
    ``per_host_concurrency``); ``robots_store``: the directory of the robots.txt answers ("": in memory)."""
    return FetchConfig(
        user_agent=fetch.user_agent, connect_timeout=fetch.connect_timeout, timeout=fetch.timeout,
        max_body_size=fetch.max_body_size, max_redirects=fetch.max_redirects,
        per_host_connections=fetch.per_host_concurrency, keepalive_timeout=fetch.keepalive_timeout,
        max_idle_connections=fetch.max_idle_connections,
        dns_cache_ttl=fetch.dns_cache_ttl, source_addresses=fetch.source_addresses, robots=fetch.robots, sites=sites,
        tell_addresses=fetch.politeness == "ip", robots_store=robots_store,
    )


class Fetcher:
    """Fetches URLs over pooled connections; ``robots`` (optional) vetoes disallowed URLs."""

    def __init__(self, reactor: ITCPClock, config: FetchConfig, robots: Robots | None = None,
                 on_crawl_delay: Callable[[str, float], Any] | None = None,
                 tls: IPolicyForHTTPS | None = None, on_address: Callable[[str, str], Any] | None = None) -> None:
        """Without ``robots``, ``config.robots`` makes one that fetches robots.txt through this fetcher
        (following up to ROBOTS_REDIRECTS redirects) and tells ``on_crawl_delay(host, seconds)`` a Crawl-delay.
        ``tls``: the policy of https:// connections, direct or through a proxy (Twisted's browser-like one);
        ``on_address(host, address)``: each lookup of a host name's addresses, its first (per-IP politeness;
        ``host`` as the pool has it: ``name:port`` but for the ports 80 and 443), the first address listener;
        with ``config.tell_addresses`` others may be added (``add_address_listener``)."""
        self._reactor = reactor
        self._config = config
        self._closing: list[Callable[[], Any]] = []  # what close lets go of besides the connections
        self._tls = tls or client.BrowserLikePolicyForHTTPS()
        if robots is None and config.robots:
            fetch_robots = functools.partial(self.fetch_raw, redirects=ROBOTS_REDIRECTS)
            robots = Robots(fetch_robots, reactor, config.user_agent, on_delay=on_crawl_delay,
                            store=robots_store(config.robots_store))
            self._closing.append(robots.close)
        self.robots = robots
        self._keep_answers = False  # keep_answers(): the answers on the way go with each result (WARC output)
        self._pools: list[ConnectionPool] = []
        self._endpoints: list[CachedEndpoints] = []  # each agent's (the schemes a lookup served: _tell_address)
        self._address_listeners: list[AddressListener] = [] if on_address is None else [on_address]
        told = self._tell_address if on_address is not None or config.tell_addresses else None
        self._connecting = caching_reactor(reactor, config.dns_cache_ttl, told)  # endpoints resolve through it
        self.resolver = getattr(self._connecting, "nameResolver", None) if self._connecting is not reactor else None
        self._agents = [self._agent(address) for address in (config.source_addresses or (None,))]
        self._next_agent = itertools.cycle(self._agents).__next__
        self._headers = _headers(config.user_agent)  # Agent copies them for each request
        self._sent_pairs = _raw_pairs(self._headers)  # (each result's request_headers: one list, never changed)
        self._agent_headers: dict[str, Headers] = {}  # other user agents' (a worker job's USER_AGENT)
        proxies = Proxies(reactor, self._connecting, config, self._pools, self._tls)  # pools close with the fetcher's
        self._sites = SiteOptions(config.sites, proxies)  # each hop's site: its headers, proxy, cookies

    def set_sites(self, sites: tuple[Any, ...]) -> None:
        """Fetch with ``sites``' headers, proxies and cookies from now on (the configuration changed at run time)."""
        self._sites.replace(sites)

    def _agent(self, address: str | None) -> client.Agent:
        pool = ConnectionPool(self._reactor, self._config.per_host_connections, self._config.keepalive_timeout,
                              self._config.max_idle_connections)
        self._pools.append(pool)
        bind = (address, 0) if address else None
        endpoints = CachedEndpoints(self._connecting, self._config.connect_timeout, bind, tls=self._tls)
        self._endpoints.append(endpoints)
        agent: client.Agent = Agent.usingEndpointFactory(self._reactor, endpoints, pool=pool)  # (untyped)
        return agent

    def fetch(self, url: str, user_agent: str | None = None, robots: bool = True,
              validators: Validators | None = None, follow: bool = True) -> Deferred[FetchResult]:
        """Fetch ``url`` following redirects; fires with a FetchResult, never fails.

        ``user_agent``: this request's (and its robots.txt check's) instead of the configured one;
        ``robots=False``: no robots.txt check for this request; ``validators``: a conditional GET
        (If-None-Match, If-Modified-Since; on every hop of a redirect), a 304 if the page did not change;
        ``follow=False``: a redirect's answer is the result (a fetch child's: its parent follows it, with
        :meth:`follow_on`)."""
        return self._fetch(url, url, [], user_agent, robots, validators, follow)

    def follow_on(self, result: FetchResult, user_agent: str | None = None, robots: bool = True,
                  validators: Validators | None = None) -> Deferred[FetchResult]:
        """The fetch of ``result.url`` carried on past ``result``, a redirect's answer fetched with
        ``follow=False`` (by a fetch child): its target checked and followed as :meth:`fetch` would have; a
        result that is no redirect is given back as it is."""
        location = dict((name.lower(), value) for name, value in result.headers or ()).get("location")
        if result.status not in REDIRECT_CODES or location is None:
            return defer.succeed(result)
        redirects = list(result.redirects)
        target = self._next_hop(result.url, result.final_url, location.encode("latin-1"), redirects)
        if isinstance(target, FetchResult):
            return defer.succeed(target)
        d = self._fetch(result.url, target, redirects, user_agent, robots, validators, True)
        return d.addCallback(_took, result.elapsed)

    def _fetch(self, original: str, url: str, redirects: list[str], user_agent: str | None, robots: bool,
               validators: Validators | None, follow: bool) -> Deferred[FetchResult]:
        started = self._reactor.seconds()
        headers = self._headers if user_agent is None else self._headers_of(user_agent)
        if validators is not None:
            headers = headers.copy()
            for name, value in validators.headers():
                headers.setRawHeaders(name, [value])
        answers: list[FetchResult] | None = [] if self._keep_answers else None
        d = self._follow(original, url, redirects, started, headers, robots, user_agent, answers, follow)
        timer = self._reactor.callLater(self._config.timeout, d.cancel)
        d.addBoth(_stop_timer, timer)
        d.addErrback(self._failed, original, started)
        if answers is not None:
            d.addCallback(_with_previous, answers)
        return d.addCallback(_sent, headers, self._sent_pairs if headers is self._headers else None)

    @property
    def keeps_answers(self) -> bool:
        """Whether the answers on the way go with each result (:meth:`keep_answers`)."""
        return self._keep_answers

    @property
    def tells_addresses(self) -> bool:
        """Whether each lookup's address is told to listeners (per-IP politeness)."""
        return bool(self._address_listeners) or self._config.tell_addresses

    def keep_answers(self) -> None:
        """Hand on with each result the HTTP answers fetched on the way (``FetchResult.previous``: robots.txt,
        redirects), for WARC files that replay; the robots.txt answers are kept until a fetch takes them."""
        self._keep_answers = True
        if self.robots is not None:
            self.robots.keep_answers = True

    def fetch_raw(self, url: str, max_size: int, redirects: int = 0, truncate: bool = False) -> Deferred[FetchResult]:
        """A GET with no robots check (for robots.txt), following at most ``redirects`` redirects, even to
        other hosts (RFC 9309 asks for five); a loop or one redirect too many gives the redirect itself.

        ``truncate``: a body over ``max_size`` gives its first ``max_size`` bytes (``error`` is "truncated")
        instead of failing, as RFC 9309 asks of a robots.txt (parse at least the first 500 KiB)."""
        started = self._reactor.seconds()
        hops: list[str] = []
        d = self._raw(url, max_size, redirects, hops, truncate)
        timer = self._reactor.callLater(self._config.timeout, d.cancel)
        d.addBoth(_stop_timer, timer)
        d.addCallback(lambda got: _finish(got[0], url, got[1], hops, self._reactor.seconds() - started,
                                          self._reactor.seconds()))
        d.addErrback(self._failed, url, started)
        return d.addCallback(_sent, self._headers, self._sent_pairs)

    @defer.inlineCallbacks
    def _raw(self, url: str, max_size: int, redirects: int, hops: list[str], truncate: bool) -> Any:
        first = url
        while True:
            response, body = yield self._get(url, max_size, truncate)
            location = response.headers.getRawHeaders(b"location", [None])[0]
            target = _resolve(url, location) if response.code in REDIRECT_CODES and location is not None else None
            if target is None or len(hops) >= redirects or target == first or target in hops:
                return (response, body), url
            hops.append(target)
            url = target

    def _headers_of(self, user_agent: str) -> Headers:
        headers = self._agent_headers.get(user_agent)
        if headers is None:
            if len(self._agent_headers) >= MAX_AGENT_HEADERS:
                self._agent_headers.clear()
            headers = self._agent_headers[user_agent] = _headers(user_agent)
        return headers

    @defer.inlineCallbacks
    def _follow(self, original: str, url: str, redirects: list[str], started: float, headers: Headers,
                robots: bool, user_agent: str | None, answers: list[FetchResult] | None = None,
                follow: bool = True) -> Any:
        while True:
            if robots and self.robots is not None:
                allowed = yield self.robots.allowed(url, user_agent)
                if answers is not None:
                    answers.extend(self.robots.take_answer(url))
                if not allowed:
                    return robots_denied(original, url, redirects)
            response, body = yield self._get(url, self._config.max_body_size, headers=headers)
            location = response.headers.getRawHeaders(b"location", [None])[0]
            if response.code not in REDIRECT_CODES or location is None or not follow:
                return _finish((response, body), original, url, redirects, self._reactor.seconds() - started,
                               self._reactor.seconds())
            if answers is not None:  # the redirect itself, as an answer of its own (its WARC record)
                answers.append(_finish((response, body), url, url, [], 0.0, self._reactor.seconds()))
            target = self._next_hop(original, url, location, redirects)
            if isinstance(target, FetchResult):
                return target
            url = target

    def _next_hop(self, original: str, url: str, location: bytes, redirects: list[str]) -> str | FetchResult:
        """Where the fetch of ``original`` goes after ``url`` answered a redirect to ``location`` (appended to
        ``redirects``), or the result that ends it: a Location spiderd will not fetch, a loop, one hop too many."""
        target = _resolve(url, location)
        if target is None:
            return FetchResult(original, st.BAD_REDIRECT, url, redirects=redirects, error="bad-redirect",
                               reason=st.reason(st.BAD_REDIRECT,
                                                f"Location {location.decode('latin-1')[:100]!r} from {url}"))
        loop = target == original or target in redirects
        if len(redirects) >= self._config.max_redirects or loop:
            return FetchResult(original, st.TOO_MANY_REDIRECTS, url, redirects=redirects, error="redirects",
                               reason=self._redirect_reason(target, loop))
        redirects.append(target)
        return target

    def _redirect_reason(self, target: str, loop: bool) -> str:
        """``redirect loop: back to URL`` or ``too many redirects: more than N, the last to URL``."""
        if loop:
            return st.clean(f"redirect loop: back to {target}")
        return st.reason(st.TOO_MANY_REDIRECTS, f"more than {self._config.max_redirects}, the last to {target}")

    def _get(self, url: str, max_size: int, truncate: bool = False,
             headers: Headers | None = None) -> Deferred[tuple[IResponse, bytes]]:
        try:
            agent, sent = self._sites.route(url, headers or self._headers, self._next_agent)
        except ProxyUnsupported as e:
            return defer.fail(e)
        d = agent.request(b"GET", url.encode("ascii"), sent)
        return d.addCallback(self._read_body, max_size, truncate)

    def _read_body(self, response: IResponse, max_size: int, truncate: bool = False) -> Deferred[tuple[IResponse, bytes]]:
        encoding = (response.headers.getRawHeaders(b"content-encoding", [b""])[0] or b"").strip().lower()
        length = response.length
        if isinstance(length, int) and length > max_size and not encoding and not truncate:
            response.deliverBody(Discard())
            return defer.fail(TooLarge(f"Content-Length {length}, over the limit of {max_size} bytes"))
        reader = BodyReader(max_size, encoding, truncate)
        response.deliverBody(reader)
        d = reader.finished.addCallback(framing.checked, response)
        d.addErrback(lambda failure: framing.body_failure(failure, reader.received, response))
        return d.addCallback(lambda body: (response, body))

    def _failed(self, failure: Failure, url: str, started: float) -> FetchResult:
        return failed_result(failure, url, self._reactor.seconds() - started, self._config.timeout)

    def close(self) -> Deferred[Any]:
        """Close idle pooled connections (and the robots.txt store of the Robots this fetcher made)."""
        for close in self._closing:
            close()
        return defer.gatherResults([pool.closeCachedConnections() for pool in self._pools])

    def add_address_listener(self, listener: AddressListener) -> None:
        """Tell ``listener(host, address)`` each lookup's first address too (per-IP politeness: the pool and the
        all role's local worker both group hosts by address); told only with ``config.tell_addresses`` or an
        ``on_address``."""
        self._address_listeners.append(listener)

    def _tell_address(self, name: str, port: int, address: str) -> None:
        """Each listener, with the host as the pool keys it (spiderd.core.urls: the scheme's default port left
        out), for each scheme whose endpoint the lookup served; a failure of one (a pool over the network) is
        logged."""
        schemes = {scheme for endpoints in self._endpoints for scheme in endpoints.schemes(name, port)}
        for host in pool_hosts(name, port, schemes):
            self.tell(host, address)

    def tell(self, host: str, address: str) -> None:
        """Tell each address listener that ``host`` (as the pool keys it) was looked up at ``address`` (this
        fetcher's lookups, and those of the fetch children, :mod:`spiderd.fetch.fetchpool`)."""
        for listener in self._address_listeners:
            d = defer.maybeDeferred(listener, host, address)
            d.addErrback(_told_failure, host)


def robots_denied(original: str, url: str, redirects: list[str] | None = None) -> FetchResult:
    """The result of fetching ``original`` when robots.txt disallows ``url`` (it, or a redirect's target)."""
    return FetchResult(original, st.ROBOTS_DENIED, url, redirects=redirects or [], error="robots",
                       reason=st.reason(st.ROBOTS_DENIED, f"disallowed by {robots_url(url)}"))


def failed_result(failure: Failure, url: str, elapsed: float, timeout: float) -> FetchResult:
    """The result of a fetch of ``url`` that failed with ``failure`` (a network error, a cancel) after ``elapsed``
    seconds; ``timeout``: the fetch's, for the words of a cancel."""
    code, kind = classify_failure(failure)
    if code == st.NETWORK_ERROR:
        log.failure("Unexpected error fetching {url}", failure, url=url)
    return FetchResult(url, code, url, elapsed=elapsed, error=kind,
                       reason=st.reason(code, failure_detail(failure, timeout)))


def _took(result: FetchResult, before: float) -> FetchResult:
    """``result`` with the ``before`` seconds its first hop took (fetched apart, by a fetch child) counted in."""
    result.elapsed += before
    return result


def _told_failure(failure: Failure, host: str) -> None:
    log.failure("Telling the address of {host}", failure, host=host)


def _headers(user_agent: str) -> Headers:
    return Headers({
        b"User-Agent": [user_agent.encode()],
        b"Accept": [b"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"],
        b"Accept-Encoding": [accept_encoding()],
    })


def _with_previous(result: FetchResult, answers: list[FetchResult]) -> FetchResult:
    result.previous = answers
    return result


def _finish(got: tuple[IResponse, bytes], original: str, url: str, redirects: list[str], elapsed: float,
            now: float | None = None) -> FetchResult:
    """The FetchResult of an answer; given ``now`` (clock time), a throttling answer's Retry-After is read; a 200's
    or 304's validators are."""
    response, body = got
    headers = response.headers
    content_type = headers.getRawHeaders(b"content-type", [None])[0]
    retry_after = validators = None
    if now is not None and throttled(response.code):
        retry_after = parse_retry_after(headers.getRawHeaders(b"retry-after", [None])[0], now)
    if response.code in (200, NOT_MODIFIED):
        validators = from_headers(headers.getRawHeaders(b"etag", [None])[0],
                                  headers.getRawHeaders(b"last-modified", [None])[0])
    return FetchResult(
        original,
        response.code,
        url,
        body,
        content_type.decode("latin-1") if content_type else None,
        redirects,
        len(body),
        elapsed,
        "truncated" if isinstance(body, Truncated) else None,
        robots_tag=_robots_tag(headers),
        retry_after=retry_after,
        validators=validators,
        headers=_raw_pairs(headers),
        http_version=_version(response.version),
        phrase=(response.phrase or b"").decode("latin-1"),
        fetched_at=now or 0.0,
    )


def _raw_pairs(headers: Headers) -> list[tuple[str, str]]:
    return [(name.decode("latin-1"), value.decode("latin-1"))
            for name, values in headers.getAllRawHeaders() for value in values]


def _version(version: Any) -> str:
    """``HTTP/1.1`` of Twisted's ``(b"HTTP", 1, 1)``."""
    try:
        protocol, major, minor = version
        return f"{protocol.decode('ascii')}/{major}.{minor}"
    except (TypeError, ValueError, AttributeError):
        return "HTTP/1.1"


def _sent(result: FetchResult, headers: Headers, pairs: list[tuple[str, str]] | None = None) -> FetchResult:
    """``result`` with the request headers that were sent (for a WARC request record), and so the redirects it
    followed (``previous``; a robots.txt answer has its own); ``pairs``: those of ``headers``, read before."""
    sent = _raw_pairs(headers) if pairs is None else pairs
    for answer in (*result.previous, result):
        if answer.headers is not None and not answer.request_headers:
            answer.request_headers = sent
    return result


def _robots_tag(headers: Headers) -> str | None:
    """The X-Robots-Tag header values, one per line (a value names its agent for itself), or None."""
    values = headers.getRawHeaders(b"x-robots-tag")
    return "\n".join(v.decode("latin-1") for v in values) if values else None


def _resolve(base: str, location: bytes) -> str | None:
    from urllib.parse import urljoin

    try:
        return canonicalize(urljoin(base, location.decode("latin-1").strip()))
    except (BadURL, ValueError):
        return None


def _stop_timer(result: T, timer: IDelayedCall) -> T:
    if timer.active():
        timer.cancel()
    return result


_FAILURES: list[tuple[tuple[type, ...], int, str]] = [
    ((framing.Malformed,), st.MALFORMED, "malformed"),
    ((framing.CutShort,), st.CUT_SHORT, "cut-short"),
    ((framing.OutOfStep,), st.OUT_OF_STEP, "out-of-step"),
    ((framing.LostMidBody,), st.CONNECTION_LOST, "reset"),
    ((TooLarge,), st.TOO_LARGE, "too-large"),
    ((error.DNSLookupError,), st.DNS_ERROR, "dns"),
    ((TunnelTimeout,), st.TIMEOUT, "timeout"),
    ((ProxyUnsupported, TunnelError), st.CONNECT_ERROR, "proxy"),
    ((error.ConnectionRefusedError,), st.CONNECT_REFUSED, "refused"),
    ((CancelledError, error.TimeoutError, defer.TimeoutError, error.ConnectingCancelledError), st.TIMEOUT, "timeout"),
    ((error.ConnectError,), st.CONNECT_ERROR, "connect"),
    (
        (error.ConnectionLost, error.ConnectionDone, client.ResponseFailed, ValueError),
        st.CONNECTION_LOST,
        "reset",
    ),
]


def failure_detail(failure: Failure, timeout: float) -> str:
    """The exception behind a failed fetch, as ``Class: message`` (of a ``ResponseFailed``, its inner reason that
    names a framing fault, else its first); a fault of the answer's framing, a fetch cancelled by its ``timeout``
    and a close before any answer say so in words."""
    if isinstance(failure.value, (client.ResponseFailed, client.ResponseNeverReceived)):
        inner = list(getattr(failure.value, "reasons", []))
        never = isinstance(failure.value, client.ResponseNeverReceived)
        if inner:
            failure = next((reason for reason in inner if reason.check(framing.Framing)), inner[0])
        if never and failure.check(error.ConnectionDone):
            return "the server closed the connection before answering"
    if failure.check(TooLarge, ProxyUnsupported, TunnelError, framing.Framing):
        return failure.getErrorMessage()
    if failure.check(CancelledError):
        return f"no whole answer within {timeout:g} s"
    message = failure.getErrorMessage()
    return f"{failure.type.__name__}: {message}" if message else failure.type.__name__


def classify_failure(failure: Failure) -> tuple[int, str]:
    """The status code and kind of a fetch failure (the inner reasons of ``ResponseFailed`` count): the first kind
    of ``_FAILURES`` that any of its reasons is (a framing fault before the close that came with it)."""
    reasons = [failure]
    if isinstance(failure.value, (client.ResponseFailed, client.ResponseNeverReceived)):
        reasons = list(getattr(failure.value, "reasons", [])) + reasons
    for types, code, kind in _FAILURES:
        if any(reason.check(*types) for reason in reasons):
            return code, kind
    return st.NETWORK_ERROR, "network"

