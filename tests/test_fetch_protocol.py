"""The protocol options of the fetcher against real twisted.web servers on loopback: per-site headers, br, proxies."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote

from twisted.internet import defer, reactor
from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial import unittest
from twisted.web import http, proxy, resource, server

from spiderd.config import settings as cfg
from spiderd.core import status as st
from spiderd.fetch import brotli_body
from spiderd.fetch.fetcher import FetchConfig, Fetcher, fetch_config

from .helpers import ClockedReactor


class Recorder(resource.Resource):
    """Answers every GET, recording each request's path and headers; ``/go`` redirects to ``target``."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, dict[bytes, list[bytes]]]] = []
        self.target = b""
        self.body = b"<html>ok</html>"
        self.encoding = b""

    def render_GET(self, request: Any) -> bytes:
        self.seen.append((request.path.decode(), dict(request.requestHeaders.getAllRawHeaders())))
        if request.path == b"/go":
            request.setResponseCode(302)
            request.setHeader(b"location", self.target)
            return b""
        if request.path == b"/robots.txt":
            return b"User-agent: *\nAllow: /\n"
        if request.path == b"/login":
            request.setHeader(b"set-cookie", b"sid=abc123; Path=/")
        if request.path == b"/login-and-go":
            request.setHeader(b"set-cookie", b"hop=1; Path=/")
            request.setResponseCode(302)
            request.setHeader(b"location", b"/after")
            return b""
        if self.encoding:
            request.setHeader(b"content-encoding", self.encoding)
        return self.body

    def header(self, path: str, name: bytes) -> list[bytes] | None:
        """The values of header ``name`` of the last request for ``path``."""
        for seen, headers in reversed(self.seen):
            if seen == path:
                return {k.lower(): v for k, v in headers.items()}.get(name.lower())
        raise AssertionError(f"no request for {path}: {self.seen}")


class ServedTestCase(unittest.TestCase):
    """Servers on 127.0.0.1 and 127.0.0.2 (both loopback); fetchers on a Clock."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.one, self.base = self.serve("127.0.0.1")
        self.two, self.other = self.serve("127.0.0.2")

    def serve(self, address: str) -> tuple[Recorder, str]:
        recorder = Recorder()
        factory = server.Site(recorder)
        factory.noisy = False
        port = reactor.listenTCP(0, factory, interface=address)
        self.addCleanup(port.stopListening)
        return recorder, f"http://{address}:{port.getHost().port}"

    def fetcher(self, **config: Any) -> Fetcher:
        config.setdefault("max_body_size", 8000)
        fetcher = Fetcher(ClockedReactor(reactor, self.clock), FetchConfig(**config))
        self.addCleanup(fetcher.close)
        return fetcher


def _sites(raw: list[dict[str, Any]]) -> Any:
    return cfg.from_dict({"sites": raw}).sites


class SiteHeaderTests(ServedTestCase):
    """``[[sites]] headers``: sent to the site's hosts only, on every hop, robots.txt included."""

    @defer.inlineCallbacks
    def test_headers_go_to_their_site_only(self) -> Any:
        sites = _sites([
            {"allowed_hosts": ["127.0.0.1"], "headers": {"X-Token": "abc", "Accept-Language": "fr"}},
            {"allowed_hosts": ["127.0.0.2"], "headers": {"Accept": "text/plain"}},
        ])
        fetcher = self.fetcher(sites=sites, robots=True)
        result = yield fetcher.fetch(self.base + "/page")
        self.assertEqual(result.status, 200)
        self.assertEqual(self.one.header("/page", b"x-token"), [b"abc"])
        self.assertEqual(self.one.header("/page", b"accept-language"), [b"fr"])
        self.assertEqual(self.one.header("/robots.txt", b"x-token"), [b"abc"])
        self.assertEqual(self.one.header("/page", b"user-agent"), [b"spiderd"])  # the fetcher's own stay
        yield fetcher.fetch(self.other + "/page")
        self.assertIsNone(self.two.header("/page", b"x-token"))
        self.assertEqual(self.two.header("/page", b"accept"), [b"text/plain"])  # a site's value replaces the default

    @defer.inlineCallbacks
    def test_a_redirect_to_another_host_takes_that_hosts_headers(self) -> Any:
        """The first site's header (a token, say) never follows a redirect to a host of no site."""
        sites = _sites([{"allowed_hosts": ["127.0.0.1"], "headers": {"Authorization": "Bearer s3cret"}}])
        self.one.target = (self.other + "/landed").encode()
        result = yield self.fetcher(sites=sites).fetch(self.base + "/go", user_agent="job-agent")
        self.assertEqual((result.status, result.final_url), (200, self.other + "/landed"))
        self.assertEqual(self.one.header("/go", b"authorization"), [b"Bearer s3cret"])
        self.assertIsNone(self.two.header("/landed", b"authorization"))
        self.assertEqual(self.one.header("/go", b"user-agent"), [b"job-agent"])

    @defer.inlineCallbacks
    def test_subdomains_and_no_sites(self) -> Any:
        """A site's entry covers its subdomains (here: none on an IP); without sites, nothing is added."""
        result = yield self.fetcher().fetch(self.base + "/plain")
        self.assertEqual(result.status, 200)
        self.assertEqual(sorted(k.lower() for k in dict(self.one.seen[-1][1])),
                         [b"accept", b"accept-encoding", b"host", b"user-agent"])
        from spiderd.fetch.siteopts import SiteOptions

        options = SiteOptions(_sites([{"allowed_hosts": ["example.com"], "headers": {"X-A": "1"}}]))
        self.assertEqual(options.site_for("http://shop.example.com/x").headers, (("X-A", "1"),))
        self.assertIsNone(options.site_for("http://example.org/x"))

    def test_site_lookups_by_authority(self) -> None:
        """The site of a URL is read from its host once for its authority (not parsed again for each of its
        pages), whatever the URL's case, user, port, IPv6 brackets, query or fragment; a change of the sites
        is seen at once."""
        from spiderd.fetch import siteopts

        options = siteopts.SiteOptions(_sites([{"allowed_hosts": ["example.com", "[::1]"], "headers": {"X-A": "1"}}]))
        hosts: list[str] = []
        real = siteopts.urlsplit
        self.patch(siteopts, "urlsplit", lambda url: hosts.append(url) or real(url))
        cases = {"http://shop.example.com/x": True, "http://shop.example.com/y?z": True,
                 "https://User@Shop.Example.COM:8443#f": True, "http://example.com?q=/a": True,
                 "http://[::1]:8080/a": True, "http://example.org/x": False, "http://[::1/a": False,
                 "ftp://example.com/x": True, "http://evil.example.org#@example.com/": False}
        for _ in range(2):
            for url, found in cases.items():
                self.assertEqual(options.site_for(url) is not None, found, url)
        self.assertEqual(len(hosts), 7 + 2)  # 7 authorities once each; ftp:// (no http(s) URL) on each lookup
        options.replace(_sites([{"allowed_hosts": ["example.org"], "headers": {"X-B": "1"}}]))
        self.assertIsNone(options.site_for("http://shop.example.com/x"))
        self.assertIsNotNone(options.site_for("http://example.org/x"))

    def test_fetch_config_takes_the_sites(self) -> None:
        settings = cfg.from_dict({"sites": [{"allowed_hosts": ["a.example"], "headers": {"X-A": "1"}}]})
        self.assertEqual(fetch_config(settings.fetch, settings.sites).sites, settings.sites)
        self.assertNotIn("X-A", repr(settings.sites))  # a header may hold a token: not in reprs


try:
    import brotli
except ImportError:  # the brotli extra is not installed: those tests skip
    brotli = None



class BrotliTests(ServedTestCase):
    """``br`` bodies: asked for and inflated when a bounding Brotli package is here, bounded by max_body_size."""

    if brotli is None or not brotli_body.available():
        skip = "no Brotli package that bounds its output (the brotli extra)"

    def serve_br(self, body: bytes) -> None:
        self.one.body, self.one.encoding = body, b"br"

    @defer.inlineCallbacks
    def test_br_asked_for_and_inflated(self) -> Any:
        self.serve_br(brotli.compress(b"<p>squeezed</p>" * 100))
        result = yield self.fetcher(max_body_size=8000).fetch(self.base + "/page")
        self.assertEqual((result.status, result.body), (200, b"<p>squeezed</p>" * 100))
        self.assertEqual(self.one.header("/page", b"accept-encoding"), [b"gzip, deflate, br"])

    @defer.inlineCallbacks
    def test_br_bomb_stops_at_the_limit(self) -> Any:
        """9 KB of br that inflate to 50 MB: TOO_LARGE, never inflated whole (at most one 32 KiB block past the limit)."""
        bomb = brotli.compress(b"\0" * 50_000_000, quality=1)
        self.serve_br(bomb)
        result = yield self.fetcher(max_body_size=8000).fetch(self.base + "/page")
        self.assertEqual((result.status, result.body), (st.TOO_LARGE, b""))
        self.assertRegex(result.reason, r"^too large: (inflated body of )?more than 8000 bytes$")
        inflater = brotli_body.BrotliInflater()
        out = inflater.decompress(bomb, 8001)
        self.assertLessEqual(len(out), 8001 + 32 * 1024)
        self.assertTrue(inflater.unconsumed_tail)  # output still pending: the reader stops there

    @defer.inlineCallbacks
    def test_corrupt_and_truncated_br(self) -> Any:
        """A body that claims br but is not, or ends early, is a broken response (retried), not a crash."""
        self.serve_br(b"this is not brotli at all")
        corrupt = yield self.fetcher().fetch(self.base + "/page")
        self.serve_br(brotli.compress(bytes(range(256)) * 20)[:-5])
        truncated = yield self.fetcher(max_body_size=20000).fetch(self.base + "/page")
        self.assertEqual((corrupt.status, truncated.status), (st.CONNECTION_LOST, st.CONNECTION_LOST))



class WithoutBrotliTests(ServedTestCase):
    """Without a bounding Brotli module, br is neither asked for nor inflated."""

    @defer.inlineCallbacks
    def test_without_brotli_br_is_not_asked_for(self) -> Any:
        """No bounding Brotli module: Accept-Encoding names gzip and deflate only, and br is not inflated."""
        self.patch(brotli_body, "_BROTLI", None)
        self.one.body, self.one.encoding = b"opaque", b"br"
        result = yield self.fetcher().fetch(self.base + "/page")
        self.assertEqual(self.one.header("/page", b"accept-encoding"), [b"gzip, deflate"])
        self.assertEqual((result.status, result.body), (200, b"opaque"))

    def test_an_unbounded_module_is_not_used(self) -> None:
        """A Brotli module whose process() takes no output_buffer_limit (brotli < 1.2) is not used."""
        import sys
        import types

        class Old:
            def process(self, data: bytes) -> bytes:
                return data

        from unittest import mock

        with mock.patch.dict(sys.modules, {"brotli": types.SimpleNamespace(Decompressor=Old), "brotlicffi": None}):
            self.assertIsNone(brotli_body._module())


class _RecordingProxyRequest(proxy.ProxyRequest):
    """twisted.web's proxy, recording what it was asked (URI, Proxy-Authorization) and keeping that header."""

    def process(self) -> None:
        self.channel.factory.asked.append((self.uri.decode(), self.getHeader(b"proxy-authorization")))
        self.requestHeaders.removeHeader(b"proxy-authorization")  # as a proxy does: it is for the proxy alone
        if self.method == b"CONNECT":  # twisted.web's proxy has no tunnels: it says so, as such a proxy would
            self.setResponseCode(405)
            self.finish()
            return
        super().process()


class _RecordingProxy(proxy.Proxy):
    requestFactory = _RecordingProxyRequest


class ProxyTests(ServedTestCase):
    """``[[sites]] proxy``: the site's http:// URLs go through twisted.web's proxy, with Basic credentials."""

    PASSWORD = "pa@ss w0rd"

    def setUp(self) -> None:
        super().setUp()
        factory = http.HTTPFactory()
        factory.protocol = _RecordingProxy
        factory.asked = []
        factory.noisy = False
        self.asked = factory.asked
        port = reactor.listenTCP(0, factory, interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.proxy = f"http://crawler:{quote(self.PASSWORD, safe='')}@127.0.0.1:{port.getHost().port}"

    def proxied_sites(self, proxy_url: str) -> Any:
        return _sites([{"allowed_hosts": ["127.0.0.2"], "proxy": proxy_url, "headers": {"X-Site": "2"}}])

    @defer.inlineCallbacks
    def test_through_the_proxy_with_credentials(self) -> Any:
        fetcher = self.fetcher(sites=self.proxied_sites(self.proxy))
        result = yield fetcher.fetch(self.other + "/page")
        self.assertEqual((result.status, result.body), (200, b"<html>ok</html>"))
        expected = b"Basic " + base64.b64encode(f"crawler:{self.PASSWORD}".encode())
        self.assertEqual(self.asked, [(self.other + "/page", expected)])
        self.assertEqual(self.two.header("/page", b"x-site"), [b"2"])
        yield fetcher.fetch(self.base + "/direct")  # a host of no proxied site: straight to it
        self.assertEqual(len(self.asked), 1)
        self.assertIsNone(self.one.header("/direct", b"proxy-authorization"))

    @defer.inlineCallbacks
    def test_a_redirect_off_the_site_leaves_the_proxy(self) -> Any:
        """Each hop takes its own host's site: a redirect to a host of no proxied site is fetched directly."""
        self.two.target = (self.base + "/landed").encode()
        result = yield self.fetcher(sites=self.proxied_sites(self.proxy)).fetch(self.other + "/go")
        self.assertEqual((result.status, result.final_url), (200, self.base + "/landed"))
        self.assertEqual([uri for uri, _ in self.asked], [self.other + "/go"])
        self.assertIsNone(self.one.header("/landed", b"proxy-authorization"))

    @defer.inlineCallbacks
    def test_https_of_a_proxied_site_is_not_fetched_directly(self) -> Any:
        """An https:// URL of a proxied site is asked of the proxy (CONNECT, tests/test_fetch_tunnel.py); a proxy
        that does not tunnel makes it fail, never fetched around the proxy."""
        sites = _sites([{"allowed_hosts": ["127.0.0.2"], "proxy": self.proxy}])
        port = self.other.rpartition(":")[2]
        result = yield self.fetcher(sites=sites).fetch(f"https://127.0.0.2:{port}/page")
        self.assertEqual(result.status, st.CONNECT_ERROR)
        self.assertIn("refused CONNECT: 405", result.reason)
        self.assertEqual([uri for uri, _ in self.asked], [f"127.0.0.2:{port}"])
        self.assertEqual(self.two.seen, [])

    @defer.inlineCallbacks
    def test_the_password_is_never_shown(self) -> Any:
        """A proxy that refuses: the reason and the logs hold no password; nor do the settings' reprs and errors."""
        closed = reactor.listenTCP(0, server.Site(Recorder()), interface="127.0.0.1")
        dead = f"http://crawler:{quote(self.PASSWORD, safe='')}@127.0.0.1:{closed.getHost().port}"
        yield closed.stopListening()
        settings = cfg.from_dict({"sites": [{"allowed_hosts": ["127.0.0.2"], "proxy": dead}]})
        with capturedLogs() as events:
            result = yield self.fetcher(sites=settings.sites).fetch(self.other + "/page")
        self.assertEqual(result.status, st.CONNECT_REFUSED)
        shown = [result.reason, repr(result), repr(settings), str(settings.sites)]
        shown += [formatEvent(e) for e in events]
        with self.assertRaises(cfg.ConfigError) as bad:
            cfg.from_dict({"sites": [{"allowed_hosts": ["a"], "proxy": dead.replace("http:", "socks5:")}]})
        shown.append(str(bad.exception))
        for text in shown:
            self.assertNotIn(quote(self.PASSWORD, safe=""), text)
            self.assertNotIn(self.PASSWORD, text)
        self.assertIn("***", str(bad.exception))
        self.assertTrue(str(bad.exception).startswith("<config>: sites[0].proxy: expected http://"))


class CookieTests(ServedTestCase):
    """``[[sites]] cookies = true``: the cookies a site's hosts set are sent back to them, and only to them."""

    @defer.inlineCallbacks
    def test_cookies_kept_per_site_when_asked(self) -> Any:
        sites = _sites([{"allowed_hosts": ["127.0.0.1"], "cookies": True}, {"allowed_hosts": ["127.0.0.2"]}])
        fetcher = self.fetcher(sites=sites)
        yield fetcher.fetch(self.base + "/login")
        yield fetcher.fetch(self.base + "/next")
        self.assertEqual(self.one.header("/next", b"cookie"), [b"sid=abc123"])
        yield fetcher.fetch(self.other + "/login")  # a site without cookies: what it sets is not kept
        yield fetcher.fetch(self.other + "/next")
        self.assertIsNone(self.two.header("/next", b"cookie"))

    @defer.inlineCallbacks
    def test_off_by_default_and_set_by_a_redirect(self) -> Any:
        """No cookies without the setting; with it, a cookie set by a redirect goes with the redirect's next hop."""
        plain = self.fetcher(sites=_sites([{"allowed_hosts": ["127.0.0.1"]}]))
        yield plain.fetch(self.base + "/login")
        yield plain.fetch(self.base + "/next")
        self.assertIsNone(self.one.header("/next", b"cookie"))
        keeping = self.fetcher(sites=_sites([{"allowed_hosts": ["127.0.0.1"], "cookies": True}]))
        result = yield keeping.fetch(self.base + "/login-and-go")
        self.assertEqual((result.status, result.final_url), (200, self.base + "/after"))
        self.assertEqual(self.one.header("/after", b"cookie"), [b"hop=1"])

    def test_a_jar_is_bounded(self) -> None:
        """Past MAX_COOKIES a site's jar is emptied, so a site setting endless cookies cannot grow memory."""
        from http.cookiejar import Cookie

        from spiderd.fetch import siteopts

        options = siteopts.SiteOptions(_sites([{"allowed_hosts": ["a.example"], "cookies": True}]))
        site = options.site_for("http://a.example/")
        jar = options._jar(site)
        for i in range(siteopts.MAX_COOKIES + 1):
            jar.set_cookie(Cookie(0, f"c{i}", "v", None, False, "a.example", False, False, "/", False, False,
                                  None, True, None, None, {}))
        self.assertIs(options._jar(site), jar)
        self.assertEqual(len(jar), 0)
