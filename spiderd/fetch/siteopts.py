"""The protocol options of each ``[[sites]]`` table, found by the host of the URL being fetched.

A request takes the options of the site allowing its own host (exactly, or as a subdomain): every hop of a
redirect is looked up again, so a redirect to another host never carries the first site's headers there, nor goes
through its proxy (http:// and https://).  A site with ``cookies = true`` keeps the cookies its hosts set in a jar of its own, in memory
(lost at a restart, shared by the frontier's fetches and the worker's jobs of the site), and sends them back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from http.cookiejar import CookieJar
from urllib.parse import urlsplit

from twisted.web import client
from twisted.web.iweb import IAgent
from twisted.web.http_headers import Headers

from spiderd.core.rules import HostTable, Site
from spiderd.core.urls import origin_end
from spiderd.fetch.proxy import Proxies, ProxyUnsupported

MAX_COOKIES = 1000  # cookies one site's jar holds before it is emptied
NETLOCS_KEPT = 16384  # URL authorities whose site is remembered (emptied when full, and when the sites change)


class SiteOptions:
    """The site of a URL's host: the request headers it adds, the proxy it goes through, its cookies."""

    def __init__(self, sites: Iterable[Site], proxies: Proxies | None = None) -> None:
        self._proxies = proxies
        self._jars: dict[str, CookieJar] = {}  # a site's name -> its cookies (sites with cookies = true)
        self.replace(sites)

    def replace(self, sites: Iterable[Site]) -> None:
        """Take ``sites`` in place of the current ones (a site keeping its name keeps its cookies)."""
        sites = tuple(sites)
        self._hosts = HostTable((host, site) for site in sites for host in site.allowed_hosts)
        self._netlocs: dict[str, Site | None] = {}  # an http(s) URL's authority -> its site (see site_for)
        kept = {site.name for site in sites if site.cookies}
        self._jars = {name: jar for name, jar in self._jars.items() if name in kept}

    def __bool__(self) -> bool:
        return bool(self._hosts)

    def site_for(self, url: str) -> Site | None:
        """The site allowing the host of ``url``, or None."""
        if not self._hosts:
            return None
        netloc = _netloc(url)
        if netloc is None:
            return self._site_of(url)
        try:
            return self._netlocs[netloc]
        except KeyError:
            pass
        site = self._site_of(url)  # (its host is a function of the authority alone: it is kept under it)
        if len(self._netlocs) >= NETLOCS_KEPT:
            self._netlocs.clear()
        self._netlocs[netloc] = site
        return site

    def _site_of(self, url: str) -> Site | None:
        try:
            host = (urlsplit(url).hostname or "").lower()
        except ValueError:
            return None
        return self._hosts.get(f"[{host}]" if ":" in host else host)  # an IPv6 address: in brackets, as written

    def route(self, url: str, base: Headers, default: Callable[[], IAgent]) -> tuple[IAgent, Headers]:
        """The agent for ``url`` (its site's proxy's, or ``default()``; wrapped in a CookieAgent with the site's
        jar when the site keeps cookies) and its headers: ``base`` with the site's headers set (a copy), or
        ``base`` itself if the site adds none.  ProxyUnsupported for a URL its site's proxy cannot carry."""
        site = self.site_for(url)
        if site is None or not (site.headers or site.proxy or site.cookies):
            return default(), base
        headers = base.copy()
        for name, value in site.headers:
            headers.setRawHeaders(name.encode("ascii"), [value.encode("latin-1")])
        agent: IAgent | None = None
        if site.proxy:
            if self._proxies is None:
                raise ProxyUnsupported("no proxies here")
            agent, parsed = self._proxies.agent(site.proxy, url)
            if parsed.authorization is not None and url.startswith("http://"):  # https: in the CONNECT only
                headers.setRawHeaders(b"proxy-authorization", [parsed.authorization])
        agent = agent or default()
        if site.cookies:
            agent = client.CookieAgent(agent, self._jar(site))
        return agent, headers

    def _jar(self, site: Site) -> CookieJar:
        """The site's own cookie jar (in memory; emptied past MAX_COOKIES, so no site can grow it without end)."""
        jar = self._jars.get(site.name)
        if jar is None:
            jar = self._jars[site.name] = CookieJar()
        elif len(jar) > MAX_COOKIES:
            jar.clear()
        return jar


def _netloc(url: str) -> str | None:
    """The scheme and authority of an ``http://`` or ``https://`` URL as written; None for any other URL (urlsplit
    reads it whole)."""
    end = origin_end(url)
    return None if end < 0 else url[:end]
