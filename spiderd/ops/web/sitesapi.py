"""The sites endpoints of the node's API: read, change and try the sites' rules while the node runs.

=====================================  ==============================================================================
``GET /api/sites``                     every site: its table, where it comes from (``file`` or ``api``), its items
                                       and empty fields so far, and the rules' version in force
``GET /api/sites/NAME``                one site's table
``PUT /api/sites/NAME``                the site's whole table (JSON, as one ``[[sites]]`` table of the file): replaces
                                       or adds it, validated with the whole configuration as the file is
``DELETE /api/sites/NAME``             removes the site
``GET /api/sites/NAME/history``        the site's changes: time, user, action, keys, rules version
``GET /api/csrf``                      the token the writes of a browser carry (``X-CSRF-Token``)
=====================================  ==============================================================================

The writes need what the API's other writes need (its credentials, or a loopback client when it has none), and,
unless they carry the bearer token (which a browser never sends by itself), the header ``X-CSRF-Token`` with the
token of ``GET /api/csrf``: a page of another origin cannot read that token, so it cannot make a browser that holds
the API's basic credentials (or runs on the node) change a site.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.server import Request

from spiderd.config.convert import ConfigError
from spiderd.core.net.auth import Auth
from spiderd.core.net.serving import ApiError
from spiderd.ops.sitebook import SiteBook, SiteError

PREFIX = b"/api/sites"
CSRF_HEADER = b"x-csrf-token"
Handler = Callable[[Request], Any]
Body = Callable[[Request], Any]  # the request's JSON body (the API's reader: its size cap and errors)


class SitesApi:
    """Routes ``/api/sites...`` to its handlers (see the module's docstring)."""

    def __init__(self, book: SiteBook, auth: Auth, body: Body, tester: Any = None,
                 figures: dict[str, dict[str, Any]] | None = None) -> None:
        """``figures``: each site's items and empty fields so far (:meth:`~spiderd.core.stats.CrawlStats.item_made`)."""
        self._figures = figures if figures is not None else {}
        self._book = book
        self._auth = auth
        self._body = body
        self.tester = tester  # POST /api/sites/NAME/try (spiderd.ops.sitetry), when the node can fetch
        self.csrf = secrets.token_urlsafe(24)

    @staticmethod
    def owns(path: bytes) -> bool:
        """True for the paths these endpoints answer."""
        return path == PREFIX or path.startswith(PREFIX + b"/") or path == b"/api/csrf"

    def route(self, request: Request, path: bytes) -> Handler:
        """The handler of ``request``; ApiError for an unknown path or a wrong method."""
        method = b"GET" if request.method == b"HEAD" else request.method
        if path == b"/api/csrf":
            return self._only(method, b"GET", lambda r: {"token": self.csrf})
        if path == PREFIX:
            return self._only(method, b"GET", self.all)
        parts = path[len(PREFIX) + 1:].decode("utf-8", "replace").split("/")
        name = parts[0]
        if len(parts) == 1:
            handlers = {b"GET": lambda r: self.get(name), b"PUT": lambda r: self.put(r, name),
                        b"DELETE": lambda r: self.delete(r, name)}
            if method not in handlers:
                raise ApiError(f"{method.decode()} not allowed on {path.decode()}: use GET, PUT or DELETE",
                               http.NOT_ALLOWED)
            return handlers[method]
        if parts[1:] == ["history"]:
            return self._only(method, b"GET", lambda r: self.history(name))
        if parts[1:] == ["try"] and self.tester is not None:
            return self._only(method, b"POST", lambda r: self.try_(r, name))
        raise ApiError(f"no such endpoint: {path.decode('utf-8', 'replace')}", http.NOT_FOUND)

    def _only(self, method: bytes, allowed: bytes, handler: Handler) -> Handler:
        if method != allowed:
            raise ApiError(f"{method.decode()} not allowed here: use {allowed.decode()}", http.NOT_ALLOWED)
        return handler

    # -- the endpoints ------------------------------------------------------------------------------------

    def all(self, request: Request) -> dict[str, Any]:
        tables = self._book.tables()
        return {"rules": self._book.rules_digest, "sites": [
            {"name": name, "origin": self._book.origin(name), "table": table, "figures": self._site_figures(name, table)}
            for name, table in tables.items()]}

    def _site_figures(self, name: str, table: dict[str, Any]) -> dict[str, Any]:
        """The site's items so far and, per field of its table, how many came out empty."""
        figures = self._figures.get(name, {})
        empty = figures.get("empty", {})
        fields = table.get("fields", {})
        return {"items": figures.get("items", 0),
                "empty": {f: empty.get(f, 0) for f in (fields if isinstance(fields, dict) else {})}}

    def get(self, name: str) -> dict[str, Any]:
        table = self._book.tables().get(name)
        if table is None:
            raise ApiError(f"no site named {name!r}", http.NOT_FOUND)
        return {"name": name, "origin": self._book.origin(name), "rules": self._book.rules_digest, "table": table}

    def put(self, request: Request, name: str) -> Deferred[dict[str, Any]]:
        self._check_csrf(request)
        table = self._body(request)
        return self._changed(lambda: self._book.put(name, table, self._auth.user_of(request)), name)

    def delete(self, request: Request, name: str) -> Deferred[dict[str, Any]]:
        self._check_csrf(request)
        if name not in self._book.tables():
            raise ApiError(f"no site named {name!r}", http.NOT_FOUND)
        return self._changed(lambda: self._book.delete(name, self._auth.user_of(request)), name)

    def history(self, name: str) -> Deferred[dict[str, Any]]:
        return self._book.history(name).addCallback(lambda entries: {"name": name, "history": entries})

    def try_(self, request: Request, name: str) -> Any:
        self._check_csrf(request)
        return self.tester.try_site(name, self._body(request))

    # -- helpers --------------------------------------------------------------------------------------------

    def _changed(self, change: Callable[[], Deferred[list[str]]], name: str) -> Deferred[dict[str, Any]]:
        try:
            d = change()
        except SiteError as e:
            raise ApiError(str(e)) from None
        d.addCallback(lambda keys: {"name": name, "changed": keys, "rules": self._book.rules_digest,
                                    "restart_needed": [k for k in keys if k in self._book.restart_needed()]})
        return d.addErrback(_refused)

    def _check_csrf(self, request: Request) -> None:
        if self._auth.bearer(request):
            return
        given = request.getHeader(CSRF_HEADER) or b""
        if not hmac.compare_digest(given, self.csrf.encode()):
            raise ApiError("a change of the sites from a browser needs the X-CSRF-Token header "
                           "(the token of GET /api/csrf), or the bearer token", http.FORBIDDEN)


def _refused(failure: Failure) -> Any:
    """A change the validator refused: 400, with its error (nothing changed)."""
    failure.trap(ConfigError)
    raise ApiError(f"refused, nothing changed: {failure.getErrorMessage()}")
