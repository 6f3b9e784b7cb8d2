"""Twisted's HTTP agent, with a request's URL read once per origin instead of by ``urlparse`` every time.

``client.Agent.request`` parses every URL with ``urllib.parse.urlparse`` (bytes decoded, split, encoded again)
and rebuilds its path with ``urlunparse``: about 11 us a request, a tenth of the fetcher's own work on a page.
:class:`Agent` splits an ``http://`` or ``https://`` URL as urlparse does (the origin, then the fragment at the
first ``#``, the query at the first ``?``, the parameters at the first ``;`` of the last segment) and keeps the
origin's parse (scheme, host and port, as :meth:`URI.fromBytes` makes them) for the next URLs of that origin.  Any
other URL goes Twisted's way.  The Host header of each origin is kept too.  ``tests/test_fetch_agent.py`` holds the split to urlparse's on every kind of URL.
"""

from __future__ import annotations

from typing import Any

from twisted.internet import defer
from twisted.python.failure import Failure
from twisted.web import client
from twisted.web._newclient import _ensureValidURI
from twisted.web.client import URI
from twisted.web.error import SchemeNotSupported
from twisted.web.http_headers import Headers
from twisted.web.iweb import IBodyProducer, IResponse

from spiderd.core.urls import origin_end

ORIGINS_KEPT = 4096  # origins whose parse is kept (emptied when full)


class Origins:
    """The parse of each origin (``scheme://netloc`` as written) seen lately, as :meth:`URI.fromBytes` made it."""

    def __init__(self, size: int = ORIGINS_KEPT) -> None:
        self._size = size
        self._kept: dict[bytes, URI] = {}

    def split(self, uri: bytes) -> tuple[URI, bytes] | None:
        """``uri`` (valid and stripped, as ``Agent.request`` has it) as :meth:`URI.fromBytes` reads it, and its
        origin form (the request's target); None for a URL other than ``http://`` or ``https://``."""
        end = origin_end(uri)
        if end < 0:
            return None
        origin = self._origin(uri[:end])
        path, _, fragment = uri[end:].partition(b"#")
        path, _, query = path.partition(b"?")
        params = b""
        if b";" in path:
            path, params = _split_params(path)
        parsed = URI(origin.scheme, origin.netloc, origin.host, origin.port, path, params, query, fragment)
        target = path + (b";" + params if params else b"") + (b"?" + query if query else b"")  # (urlunparse's)
        return parsed, target or b"/"

    def _origin(self, origin: bytes) -> URI:
        parsed = self._kept.get(origin)
        if parsed is None:
            parsed = URI.fromBytes(origin)  # (a bad IPv6 netloc raises its ValueError here, as in Twisted's)
            if len(self._kept) >= self._size:
                self._kept.clear()
            self._kept[origin] = parsed
        return parsed


def _split_params(path: bytes) -> tuple[bytes, bytes]:
    """urllib.parse's ``_splitparams``: the parameters begin at the first ``;`` of the last segment."""
    slash = path.rfind(b"/")
    at = path.find(b";", slash) if slash >= 0 else path.find(b";")
    if at < 0:
        return path, b""
    return path[:at], path[at + 1:]


class Agent(client.Agent):
    """``client.Agent`` whose requests' URLs are split by :class:`Origins` (see the module's docstring)."""

    def _init(self, *args: Any) -> None:  # (both constructors, __init__ and usingEndpointFactory, call it)
        super()._init(*args)
        self._origins = Origins()
        self._host_values: dict[tuple[bytes, bytes, int], bytes] = {}

    def _computeHostValue(self, scheme: bytes, host: bytes, port: int) -> bytes:
        """Twisted's Host header of an origin (an IPv6 address checked for each request), kept for the next."""
        key = (scheme, host, port)
        value = self._host_values.get(key)
        if value is None:
            if len(self._host_values) >= ORIGINS_KEPT:
                self._host_values.clear()
            value = self._host_values[key] = super()._computeHostValue(scheme, host, port)
        return value

    def request(self, method: bytes, uri: bytes, headers: Headers | None = None,
                bodyProducer: IBodyProducer | None = None) -> defer.Deferred[IResponse]:
        uri = _ensureValidURI(uri.strip())
        split = self._origins.split(uri)
        if split is None:
            return super().request(method, uri, headers, bodyProducer)
        parsed, target = split
        try:
            endpoint = self._getEndpoint(parsed)
        except SchemeNotSupported:
            return defer.fail(Failure())
        key = (parsed.scheme, parsed.host, parsed.port)
        return self._requestWithEndpoint(key, endpoint, method, parsed, headers, bodyProducer, target)
