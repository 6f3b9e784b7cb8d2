"""Who may use an API: a bearer token and/or HTTP basic auth, compared in constant time; secrets never logged.

The node's API takes either; the worker's Scrapyd API takes basic auth only (as Scrapyd).
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from twisted.web.server import Request


@dataclass(frozen=True)
class Auth:
    """``token`` (``Authorization: Bearer``), ``username``/``password`` (basic); neither set: open (loopback only)."""

    token: str = field(default="", repr=False)
    username: str = ""
    password: str = field(default="", repr=False)

    @property
    def required(self) -> bool:
        return bool(self.token or self.username)

    def allows(self, request: Request) -> bool:
        """True if the request's ``Authorization`` header carries valid credentials (or none are needed)."""
        if not self.required:
            return True
        header = _authorization(request).strip()
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and self.token:
            return _same(value.strip(), self.token)
        if scheme.lower() == "basic" and self.username:
            return self._basic(request)
        return False

    def allows_page(self, request: Request) -> bool:
        """The status page (``GET /``) holds no figures: open, unless basic auth is set, when the browser logs in
        (or ``?token=`` is given): then the page's own requests carry the browser's credentials."""
        if not self.username or self.allows(request):
            return True
        args: dict[bytes, list[bytes]] = request.args or {}
        given = args.get(b"token", [b""])[0].decode("utf-8", "replace")
        return bool(self.token) and _same(given, self.token)

    def user_of(self, request: Request) -> str:
        """Who an allowed request is, for the logs: the basic user name, ``token`` for the bearer token, or
        ``loopback`` when no credentials are set."""
        if not self.required:
            return "loopback"
        scheme = _authorization(request).strip().partition(" ")[0].lower()
        return "token" if scheme == "bearer" else request.getUser().decode("utf-8", "replace")

    def bearer(self, request: Request) -> bool:
        """True if the request carries the bearer token (which a browser never sends by itself)."""
        scheme, _, value = _authorization(request).strip().partition(" ")
        return bool(self.token) and scheme.lower() == "bearer" and _same(value.strip(), self.token)

    def challenge(self, request: Request) -> bytes:
        """The ``WWW-Authenticate`` value: basic only when configured and the client did not try a token
        (so the status page, which sends a token, gets no browser login dialog)."""
        header = _authorization(request).lower()
        if self.username and not header.startswith("bearer"):
            return b'Basic realm="spiderd", charset="UTF-8"'
        return b'Bearer realm="spiderd"'

    def _basic(self, request: Request) -> bool:
        """Basic credentials as Twisted decodes them (``getUser``/``getPassword``)."""
        user_ok = hmac.compare_digest(request.getUser(), self.username.encode("utf-8"))
        password_ok = hmac.compare_digest(request.getPassword(), self.password.encode("utf-8"))
        return user_ok and password_ok


def _authorization(request: Request) -> str:
    return (request.getHeader(b"authorization") or b"").decode("latin-1")


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))
