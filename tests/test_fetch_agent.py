"""spiderd.fetch.agent: a request's URL split as Twisted's Agent splits it, its origin parsed once."""

from __future__ import annotations

import itertools
from typing import Any

from twisted.internet import defer, reactor
from twisted.trial import unittest
from twisted.web import http, resource, server
from twisted.web.client import URI

from spiderd.fetch import agent as agent_module
from spiderd.fetch.agent import Origins
from spiderd.fetch.fetcher import FetchConfig, Fetcher

HOSTS = [b"h", b"H.Example.com", b"h:8080", b"u:p@h:81", b"[::1]", b"[::1]:8443", b"h:", b"h:abc", b"a.b.c:443", b""]
RESTS = [b"", b"/", b"/a", b"/a/b.html", b"?q=1", b"#f", b"/a?q#f", b"/a;p", b"/a;p/b", b"/a/b;p;q?x=;y#z", b";p",
         b"/a?b;c", b"/a#b?c", b"/a?", b"/a#", b"/?", b"//x", b"/a;", b"/%2F;x", b"?a/b;c", b"#/;?", b"//", b"///a;b"]


def fields(uri: URI) -> tuple[Any, ...]:
    return (uri.scheme, uri.netloc, uri.host, uri.port, uri.path, uri.params, uri.query, uri.fragment)


class SplitTests(unittest.SynchronousTestCase):
    """Origins.split against URI.fromBytes."""

    def test_as_twisted_splits(self) -> None:
        """Every part of 460 URLs (hosts with ports, users, IPv6 brackets, bad ports; paths with parameters,
        queries, fragments, in every order) and the request's target are Twisted's."""
        origins = Origins()
        for scheme, host, rest in itertools.product([b"http", b"https"], HOSTS, RESTS):
            uri = scheme + b"://" + host + rest
            split = origins.split(uri)
            assert split is not None
            want = URI.fromBytes(uri)
            self.assertEqual((fields(split[0]), split[1]), (fields(want), want.originForm), uri)

    def test_other_urls_and_bad_origins(self) -> None:
        """A URL of another scheme (or case) is not split here; an origin Twisted refuses is refused the same."""
        origins = Origins()
        self.assertEqual([origins.split(u) for u in (b"ftp://h/a", b"HTTP://h/a", b"//h/a")], [None, None, None])
        for bad in (b"http://[::1/a", b"http://::1]/a"):
            self.assertRaises(ValueError, URI.fromBytes, bad)
            self.assertRaises(ValueError, origins.split, bad)

    def test_an_origin_parsed_once(self) -> None:
        """The URLs of one origin cost one urlparse between them (it cost one each), up to ORIGINS_KEPT origins."""
        parsed: list[bytes] = []
        real = http.urlparse
        self.patch(http, "urlparse", lambda url: parsed.append(url) or real(url))
        origins = Origins(size=2)
        for i in range(3):
            for host in (b"a", b"b"):
                origins.split(b"http://%s:81/p/%d.html?x=%d" % (host, i, i))
        self.assertEqual(parsed, [b"http://a:81", b"http://b:81"])
        origins.split(b"http://c/")
        origins.split(b"http://a:81/again")
        self.assertEqual(parsed, [b"http://a:81", b"http://b:81", b"http://c", b"http://a:81"])


class Page(resource.Resource):
    """Answers with the request's target."""

    isLeaf = True

    def render_GET(self, request: Any) -> bytes:
        return request.uri


class AgentTests(unittest.TestCase):
    """The fetcher's agent on a real server."""

    @defer.inlineCallbacks
    def test_fetches_send_the_target(self) -> Any:
        """Each fetch sends its URL's path, parameters and query (no fragment), with no urlparse of the URL."""
        port = reactor.listenTCP(0, server.Site(Page()), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        parsed: list[bytes] = []
        real = http.urlparse
        self.patch(http, "urlparse", lambda url: parsed.append(url) or real(url))
        fetcher = Fetcher(reactor, FetchConfig())
        base = f"http://127.0.0.1:{port.getHost().port}"
        bodies = []
        for path in ("/a/b;p?q=1#frag", "/c", "?x"):
            result = yield fetcher.fetch(base + path, robots=False)
            bodies.append(result.body)
        yield fetcher.close()
        self.assertEqual(bodies, [b"/a/b;p?q=1", b"/c", b"?x"])
        self.assertEqual(parsed, [base.encode()])
        self.assertTrue(agent_module.ORIGINS_KEPT >= 1000)


class HostValueTests(unittest.SynchronousTestCase):
    """The Host header of each origin, kept."""

    def test_each_origin_once(self) -> None:
        """Twisted's value for each origin (its port left out where it is the scheme's, an IPv6 address in
        brackets), computed once for the requests after."""
        from twisted.web.client import _AgentBase

        computed: list[tuple[bytes, bytes, int]] = []
        real = _AgentBase._computeHostValue
        self.patch(_AgentBase, "_computeHostValue", lambda agent, *key: computed.append(key) or real(agent, *key))
        agent = agent_module.Agent(reactor)
        origins = [(b"http", b"h", 80), (b"https", b"h", 443), (b"http", b"h", 8080), (b"http", b"::1", 81)]
        values = [agent._computeHostValue(*origin) for origin in origins * 3]
        self.assertEqual(values[:4], [b"h", b"h", b"h:8080", b"[::1]:81"])
        self.assertEqual((values[4:], computed), (values[:4] * 2, origins))
