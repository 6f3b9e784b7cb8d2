"""The browser guard of every HTTP API spiderd serves (the node's API and the worker's Scrapyd API).

A web page the operator opens can send requests to 127.0.0.1: a POST from a
page of another origin (a form aimed at the API) would drive the node, and,
without credentials, a Host that is not loopback means a DNS-rebinding page
reads the API through a name of its own.  Neither API sends CORS headers.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from twisted.web.server import Request

from spiderd.core.secrets import is_loopback_host_header

SAFE_METHODS = (b"GET", b"HEAD", b"OPTIONS")


def foreign_request(request: Request, has_credentials: bool) -> str | None:
    """Why a request that a browser may have sent for another site is refused (None: it is not)."""
    host = (request.getHeader(b"host") or b"").decode("latin-1")
    origin = request.getHeader(b"origin")
    if request.method not in SAFE_METHODS and origin is not None:
        if urlsplit(origin.decode("latin-1")).netloc != host:
            return "cross-origin request refused (its Origin is not this API)"
    if not has_credentials and host and not is_loopback_host_header(host):
        return f"this API has no credentials set, so it answers only to a loopback host name, not {host!r}"
    return None
