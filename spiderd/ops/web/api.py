"""The HTTP API's endpoints: routing, auth, method checks, JSON answers and JSON errors.

Every answer is JSON (``{"status": "ok", ...}``) but the status page (``/``),
the metrics (``/metrics``) and the export (JSON lines).  Errors are
``{"status": "error", "message": ...}`` with a 4xx code: 400 for a bad or
missing field, 401 for wrong or missing credentials, 404 for an unknown path
(or one this role has not: the worker role has no pool; or one this pool has not: why, hosts, export and
import need a backend with the admin interface, IURLPoolAdmin), 405 for a wrong
method, 413 for a body over the cap, 414 or 431 for a request line or header
line over 16 KiB; 503 while stopping, 500 for a bug.
"""

from __future__ import annotations

import json
from typing import IO, Any, Callable, Iterator, cast

from twisted.internet import task
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.server import NOT_DONE_YET, Request

from spiderd.config.convert import MAX_SECONDS, finite_number
from spiderd.contracts.pool import HOSTS_MOST, IURLPoolAdmin, IURLQueue, PoolUnavailable
from spiderd.core import jsontext
from spiderd.core.net.guard import foreign_request
from spiderd.core.urls import BadURL, canonicalize
from spiderd.ops.web import node as nodes
from spiderd.core.net.auth import Auth
from spiderd.core.net.resource import JsonResource, send
from spiderd.core.net.serving import ApiError
from spiderd.ops.lag import ReactorLag
from spiderd.ops.web.history import History
from spiderd.ops.web.sitesapi import SitesApi
from spiderd.ops.web.metrics import CONTENT_TYPE as METRICS_TYPE, Metrics
from spiderd.ops.web.streams import ExportStream, import_lines

log = Logger()

MAX_JSON_BODY = 1024 * 1024  # bytes, for the JSON endpoints (the import's cap is the site's)
MAX_URLS = 10_000  # per request
ADD_CHUNK = 500  # URLs checked and added per turn of the reactor (about 5 ms of work)
_NO_POOL = "not available in the {role} role: this node has no URL pool"
_NO_ADMIN = "not available for this pool: its backend has no admin interface (why, hosts, export, import)"


class Raw:
    """A non-JSON answer."""

    def __init__(self, body: bytes, content_type: bytes) -> None:
        self.body = body
        self.content_type = content_type


class ApiResource(JsonResource):
    """Every endpoint as one leaf resource."""

    isLeaf = True

    def __init__(self, node: nodes.Node, history: History, metrics: Metrics, auth: Auth, cooperator: task.Cooperator,
                 page: bytes, lag: ReactorLag | None = None, sites: SitesApi | None = None,
                 sites_page: bytes = b"") -> None:
        super().__init__()
        self.sites = sites  # /api/sites...: where the node's configuration can change
        self._sites_page = sites_page
        self._node = node
        self._lag = lag
        self._history = history
        self._metrics = metrics
        self._auth = auth
        self._cooperator = cooperator
        self._page = page
        self.routes = {
            b"/": (b"GET", self.page),
            b"/sites": (b"GET", self.sites_editor),
            b"/metrics": (b"GET", self.metrics),
            b"/api/status": (b"GET", self.status),
            b"/api/history": (b"GET", self.history),
            b"/api/why": (b"GET", self.why),
            b"/api/export": (b"GET", self.export),
            b"/api/import": (b"POST", self.import_),
            b"/api/seeds": (b"POST", self.seeds),
            b"/api/hubs": (b"POST", self.hubs),
            b"/api/urls": (b"POST", self.urls),
            b"/api/jobs": (b"GET", self.jobs),
            b"/api/failures": (b"GET", self.failures),
            b"/api/hosts": (b"GET", self.hosts),
            b"/api/pause": (b"POST", self.pause),
            b"/api/resume": (b"POST", self.resume),
        }
        self._needs_pool = {b"/api/why", b"/api/hosts", b"/api/export", b"/api/import", b"/api/seeds", b"/api/hubs",
                            b"/api/urls", b"/api/pause", b"/api/resume"}
        self._needs_admin = {b"/api/why", b"/api/hosts", b"/api/export", b"/api/import"}  # IURLPoolAdmin, which a pool may lack

    @property
    def _pool(self) -> IURLQueue:
        """The node's pool (``admit`` refused a request that needs one in a role without it)."""
        assert self._node.pool is not None
        return self._node.pool

    @property
    def _admin(self) -> IURLPoolAdmin:
        """The pool's admin interface (``admit`` refused a request that needs it of a pool without it)."""
        return cast(IURLPoolAdmin, self._pool)

    # -- dispatch ---------------------------------------------------------------------------------

    def render(self, request: Request) -> bytes | int:
        path = self.path_of(request)
        if self.sites is None or not self.sites.owns(path):
            return super().render(request)
        refused = self.admit(request)
        if refused is not None:
            return refused
        try:
            handler = self.sites.route(request, path)
        except ApiError as e:
            return self.error(request, e.message, e.code or http.BAD_REQUEST)
        return self.call(request, handler)

    def admit(self, request: Request) -> bytes | None:
        refused = foreign_request(request, self._auth.required)
        if refused is not None:
            return self.error(request, refused, http.FORBIDDEN)
        path = self.path_of(request)
        allowed = self._auth.allows_page(request) if path in (b"/", b"/sites") else self._auth.allows(request)
        if not allowed:
            request.setHeader(b"WWW-Authenticate", self._auth.challenge(request))
            return self.error(request, "wrong or missing credentials (api.token or api.username)", http.UNAUTHORIZED)
        if path in self._needs_pool and self._node.pool is None:
            return self.error(request, f"{path.decode()}: {_NO_POOL.format(role=self._node.role)}", http.NOT_FOUND)
        if path in self._needs_admin and not IURLPoolAdmin.providedBy(self._node.pool):
            return self.error(request, f"{path.decode()}: {_NO_ADMIN}", http.NOT_FOUND)
        return None

    def ok(self, request: Request, data: Any) -> bytes | int:
        if isinstance(data, int):  # NOT_DONE_YET: the handler writes the answer itself
            return data
        if isinstance(data, Raw):
            return send(request, http.OK, data.content_type, data.body)
        return self._json(request, {"status": "ok", **data}, http.OK)

    def unexpected(self, failure: Failure, request: Request) -> bytes:
        crawler = self._node.crawler
        if (crawler is not None and not crawler.running) or failure.check(RuntimeError, PoolUnavailable):
            log.warn("API: {path}: {error}", path=request.path.decode("latin-1"), error=failure.getErrorMessage())
            return self.error(request, f"unavailable: {failure.getErrorMessage()}", http.SERVICE_UNAVAILABLE)
        return super().unexpected(failure, request)

    def error(self, request: Request, message: str, code: int) -> bytes:
        return self._json(request, {"status": "error", "message": message}, code)

    def _json(self, request: Request, data: dict[str, Any], code: int) -> bytes:
        try:
            body = json.dumps(data, ensure_ascii=False).encode("utf-8") + b"\n"
        except UnicodeEncodeError:  # a lone surrogate (from a client's JSON): \u escapes stay valid UTF-8
            body = json.dumps(data).encode("ascii") + b"\n"
        return send(request, code, b"application/json; charset=utf-8", body)

    # -- reading ------------------------------------------------------------------------------------

    def page(self, request: Request) -> Raw:
        """The status page: static HTML and JS that polls /api/status and /api/history."""
        return _page(request, self._page)

    def sites_editor(self, request: Request) -> Raw:
        """The sites page: the sites with their figures, and the template editor (the page it tries is shown in
        a sandboxed frame that runs no script and, under this policy, loads nothing)."""
        if self.sites is None or not self._sites_page:
            raise ApiError("no sites page on this node", http.NOT_FOUND)
        request.setHeader(b"X-Frame-Options", b"DENY")
        return _page(request, self._sites_page)

    def metrics(self, request: Request) -> Deferred[Raw]:
        return self._metrics.render().addCallback(lambda text: Raw(text, METRICS_TYPE))

    def status(self, request: Request) -> Deferred[dict[str, Any]]:
        d = nodes.status(self._node, self._history)
        lag = self._lag
        if lag is not None:
            d.addCallback(lambda out: {**out, "reactor": {"lag": lag.summary()}})
        return d

    def jobs(self, request: Request) -> dict[str, Any]:
        """``GET /api/jobs?limit=50``: the worker's jobs, running, then pending, then ended (newest first)."""
        worker = self._node.worker
        if worker is None or not hasattr(worker, "jobs_table"):
            raise ApiError(f"not available in the {self._node.role} role: this node runs no worker", http.NOT_FOUND)
        return {"jobs": worker.jobs_table(_limit(request))}

    def failures(self, request: Request) -> dict[str, Any]:
        """``GET /api/failures?limit=20``: the last URLs this node recorded as failed for good, with the reason."""
        recent = getattr(self._node.pool, "recent_failures", None)
        if recent is None:
            raise ApiError(_NO_POOL.format(role=self._node.role), http.NOT_FOUND)
        return {"failures": recent.latest(_limit(request, default=20))}

    def hosts(self, request: Request) -> Deferred[dict[str, Any]]:
        """``GET /api/hosts?limit=50``: the hosts to look at first (throttled, then the most waiting URLs); with
        sites that render, ``render``: each host section's choice (rendered or plain, and its page counts)."""
        limit = _limit(request, default=50, most=HOSTS_MOST)
        d = self._admin.hosts(limit)
        return d.addCallback(lambda rows: _with_render({"hosts": rows}, nodes.render_rows(self._node, limit)))

    def history(self, request: Request) -> dict[str, Any]:
        return self._history.series()

    def why(self, request: Request) -> Deferred[dict[str, Any]]:
        url = _query(request, "url")
        if not url:
            raise ApiError("the 'url' query parameter is required: GET /api/why?url=...")
        return nodes.why(self._node, url)

    def export(self, request: Request) -> int:
        ExportStream(self._admin.export(1000), request, self._cooperator).start()
        log.info("API: exporting the pool")
        return NOT_DONE_YET

    def import_(self, request: Request) -> Deferred[dict[str, Any]]:
        d = import_lines(self._admin, _content(request), self._cooperator)
        return d.addCallback(_log_import)

    # -- changing -----------------------------------------------------------------------------------

    def seeds(self, request: Request) -> Deferred[dict[str, Any]]:
        """``{"urls": [...], "recrawl": false}``: list URLs into the pool (known ones only with recrawl)."""
        body = _body(request, {"urls", "recrawl"})
        recrawl = _flag(body, "recrawl")
        return self._add(body, lambda urls: self._pool.addmany(urls, always=recrawl), "seeds")

    def hubs(self, request: Request) -> Deferred[dict[str, Any]]:
        """``{"urls": [...], "refresh_span": 600}``: hubs beside the configured ones, kept across restarts."""
        body = _body(request, {"urls", "refresh_span"})
        good, rejected = self._urls(body)
        span = _seconds(body, "refresh_span")
        seeds = self._node.seeds
        if seeds is None:
            raise ApiError(_NO_POOL.format(role=self._node.role), http.NOT_FOUND)
        d = seeds.add_hubs(good, float(span) if span is not None else None)
        return d.addCallback(_added, good, rejected, "hubs")

    def urls(self, request: Request) -> Deferred[dict[str, Any]]:
        """``{"urls": [...], "kind": "list" | "detail", "recrawl": false}``: details go where the crawler sends them."""
        body = _body(request, {"urls", "kind", "recrawl"})
        kind = body.get("kind", "list")
        if kind not in ("list", "detail"):
            raise ApiError(f"'kind' must be \"list\" or \"detail\", got {kind!r}")
        recrawl = _flag(body, "recrawl")
        pool, crawler = self._pool, self._node.crawler
        add: Callable[[list[str]], Deferred[int]]
        if kind == "list":
            add = lambda urls: pool.addmany(urls, always=recrawl)
        elif recrawl and self._node.batcher is not None:
            raise ApiError("'recrawl' is not possible for detail URLs sent in batches: a batched URL stays final")
        elif recrawl or crawler is None:
            add = lambda urls: pool.addmany(urls, always=recrawl, detail=True)
        else:
            add = crawler.add_details
        d = self._add(body, add, f"{kind} URLs")
        return d.addCallback(lambda a: {**a, "kind": kind})

    def pause(self, request: Request) -> dict[str, Any]:
        return self._pause(True)

    def resume(self, request: Request) -> dict[str, Any]:
        return self._pause(False)

    def _pause(self, paused: bool) -> dict[str, Any]:
        crawler = self._node.crawler
        if crawler is None:
            raise ApiError(f"not available in the {self._node.role} role: no crawler here", http.NOT_FOUND)
        if crawler.paused != paused:
            crawler.pause() if paused else crawler.resume()
            log.info("API: the crawl is {state}", state="paused" if paused else "resumed")
        return {"paused": crawler.paused}

    def _urls(self, body: dict[str, Any]) -> tuple[list[str], list[dict[str, str]]]:
        """The canonical forms of ``body["urls"]`` (no repeats), and the rejected ones with their reason."""
        good: dict[str, None] = {}
        rejected: list[dict[str, str]] = []
        self._check(_url_list(body), good, rejected)
        return list(good), rejected

    def _check(self, urls: list[Any], good: dict[str, None], rejected: list[dict[str, str]]) -> list[str]:
        """Canonicalize ``urls`` into ``good`` (no repeats) and ``rejected``; the new good ones, in order."""
        new = []
        for url in urls:
            try:
                canonical = canonicalize(url, self._node.max_url_length)
            except BadURL as e:
                rejected.append({"url": e.url[:200], "reason": e.reason})
                continue
            if canonical not in good:
                good[canonical] = None
                new.append(canonical)
        return new

    def _add(self, body: dict[str, Any], add: Callable[[list[str]], Deferred[int]], what: str) -> Deferred[Any]:
        """Check and add ``body["urls"]`` ADD_CHUNK at a time, through the cooperator: a request of 10,000
        URLs never holds the reactor for more than one chunk's canonicalization and pool write."""
        urls = _url_list(body)
        good: dict[str, None] = {}
        rejected: list[dict[str, str]] = []
        added = [0]

        def chunks() -> Iterator[Deferred[None]]:
            for start in range(0, len(urls), ADD_CHUNK):
                new = self._check(urls[start:start + ADD_CHUNK], good, rejected)
                if new:
                    yield add(new).addCallback(lambda n: added.__setitem__(0, added[0] + n))

        d = self._cooperator.coiterate(chunks())
        return d.addCallback(lambda _: _added(added[0], list(good), rejected, what))


def _page(request: Request, html: bytes) -> Raw:
    """A page of the API, under a policy that lets it run its own inline script and talk to this API only."""
    request.setHeader(b"Content-Security-Policy",
                      b"default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                      b"connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'")
    request.setHeader(b"Referrer-Policy", b"no-referrer")
    return Raw(html, b"text/html; charset=utf-8")


def _url_list(body: dict[str, Any]) -> list[Any]:
    """``body["urls"]``: a non-empty list of at most MAX_URLS."""
    urls = body.get("urls")
    if not isinstance(urls, list) or not urls:
        raise ApiError("'urls' is required: a non-empty list of URL strings")
    if len(urls) > MAX_URLS:
        raise ApiError(f"at most {MAX_URLS} URLs per request, got {len(urls)}: send them in several requests")
    return urls


def _added(added: int, good: list[str], rejected: list[dict[str, str]], what: str) -> dict[str, Any]:
    if added:
        log.info("API: {added} {what} added ({known} known, {rejected} rejected)", added=added, what=what,
                 known=len(good) - added, rejected=len(rejected))
    return {"added": added, "known": len(good) - added, "rejected": rejected}


def _log_import(totals: dict[str, Any]) -> dict[str, Any]:
    log.info("API: import of {lines} lines: {queued} URLs queued, {restored} finished entries restored, "
             "{known} known, {rejected} rejected", lines=totals["lines"], queued=totals["queued"],
             restored=totals["restored"], known=totals["known"], rejected=totals["rejected_count"])
    return totals


def _with_render(answer: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    if rows:
        answer["render"] = rows
    return answer


def _limit(request: Request, default: int = 50, most: int = 1000) -> int:
    """The ``limit`` query parameter: 1..most (default ``default``)."""
    raw = _query(request, "limit")
    if raw is None:
        return default
    if not raw.isdigit() or not 1 <= int(raw) <= most:
        raise ApiError(f"'limit' must be a whole number from 1 to {most}, got {raw[:40]!r}")
    return int(raw)


def _query(request: Request, name: str) -> str | None:
    args: dict[bytes, list[bytes]] = request.args or {}
    values = args.get(name.encode())
    if not values:
        return None
    try:
        return values[0].decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(f"the {name!r} query parameter is not UTF-8") from None


def json_body(request: Request) -> Any:
    """The JSON value in the request body (at most MAX_JSON_BODY bytes); None for an empty body."""
    raw = _content(request).read(MAX_JSON_BODY + 1)
    if len(raw) > MAX_JSON_BODY:
        raise ApiError(f"request body too large: the limit is {MAX_JSON_BODY} bytes", http.REQUEST_ENTITY_TOO_LARGE)
    try:
        return jsontext.loads(raw) if raw.strip() else None
    except ValueError as e:
        raise ApiError(f"the body is not valid JSON: {e}") from None


def _body(request: Request, known: set[str]) -> dict[str, Any]:
    """The JSON object in the request body (at most MAX_JSON_BODY bytes), with only ``known`` fields."""
    data = json_body(request)
    if not isinstance(data, dict):
        raise ApiError(f"the body must be a JSON object with the fields {', '.join(sorted(known))}")
    unknown = sorted(set(data) - known)
    if unknown:
        raise ApiError(f"unknown field {unknown[0]!r} (known: {', '.join(sorted(known))})")
    return data


def _content(request: Request) -> IO[bytes]:
    """The request body (Twisted keeps it in memory or, when large, in a temporary file), from its start."""
    body = request.content
    assert body is not None
    body.seek(0)
    return body


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise ApiError(f"{name!r} must be true or false, got {value!r}")
    return value


def _seconds(body: dict[str, Any], key: str) -> float | None:
    """``body[key]`` as a number of seconds (more than 0, finite, at most MAX_SECONDS), or None when absent."""
    value = body.get(key)
    if value is None:
        return None
    try:
        seconds = finite_number(value)
    except (TypeError, ValueError):
        seconds = 0.0
    if not seconds > 0:
        raise ApiError(f"{key!r} must be a number of seconds, more than 0 and at most {MAX_SECONDS:.0e}, "
                       f"got {value!r}")
    return seconds
