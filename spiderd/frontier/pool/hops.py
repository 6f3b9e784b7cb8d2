"""Link-hop limits (``[pool] max_hops``, ``[[sites]] max_hops``): how many links from a seed a URL may be.

A seed, a hub, a URL added through the API and a recrawled page are at hop 0;
a link found on a page at hop ``h`` is at ``h + 1`` (``addmany(..., parent=)``)
and is not added past the limit of its site (the registered domain of one of
the site's allowed hosts), or else of the pool; 0 is no limit.  A URL found
again keeps the count it was first queued with (the pool dedupes at add).  The
pools keep a URL's count only while it is waiting or leased, and only when some
limit is set (see :mod:`.keys` for the embedded pool, :mod:`.redis` for Redis).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from spiderd.core.rules import normalize_host
from spiderd.core.urls import registered_domain

REJECTED = "max-hops"  # the pool's ``rejected`` reason of a link past the limit


class HopLimits:
    """The pool's limit and the sites' limits by registered domain; ``tracking`` when any is set."""

    def __init__(self, max_hops: int = 0, by_domain: Mapping[str, int] | None = None) -> None:
        self.max_hops = max_hops
        self._hosts: dict[str, int] = {}
        self.set_sites(by_domain or {})

    def set_sites(self, by_domain: Mapping[str, int]) -> None:
        """The sites' own limits by registered domain (they changed at run time): from the next link on."""
        self.by_domain = {domain: hops for domain, hops in by_domain.items() if hops > 0}
        self.tracking = self.max_hops > 0 or bool(self.by_domain)
        self._hosts = {}

    @classmethod
    def from_sites(cls, max_hops: int, sites: Iterable[Any]) -> HopLimits:
        """The pool's ``max_hops`` and each site's own (``max_hops`` > 0) by the domains of its allowed hosts;
        a domain of two sites takes the lower limit."""
        by_domain: dict[str, int] = {}
        for site in sites:
            hops = getattr(site, "max_hops", 0)
            if hops > 0:
                for host in site.allowed_hosts:
                    domain = registered_domain(normalize_host(host))
                    by_domain[domain] = min(hops, by_domain.get(domain, hops))
        return cls(max_hops, by_domain)

    def limit(self, host: str) -> int:
        """The limit of a URL of ``host`` (0: none)."""
        if not self.by_domain:
            return self.max_hops
        found = self._hosts.get(host)
        if found is None:
            if len(self._hosts) > 100_000:
                self._hosts.clear()
            found = self._hosts[host] = self.by_domain.get(registered_domain(host), self.max_hops)
        return found

    def within(self, hops: int, host: str) -> bool:
        """True if a URL of ``host`` may be ``hops`` links from a seed."""
        limit = self.limit(host)
        return limit <= 0 or hops <= limit

