"""RedisPool's part for seed 004: recrawl of the crawled sets (``recrawl.lua``), the linkbase (``links.lua``),
and one-shot claims over every node (``SET NX PX``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from twisted.internet import defer
from zope.interface import implementer

from spiderd.contracts.pool import ILinkbase
from spiderd.frontier.pool.crawled import KINDS, link_value, parallel
from spiderd.frontier.pool.redis.channel import RedisChannel
from spiderd.frontier.pool.shared import parsed


@implementer(ILinkbase)
class RedisCrawled:
    """recrawl, add_links (when ``linkbase``, up to ``linkbase_max`` entries) and claim_once over the ``channel``."""

    def __init__(self, channel: RedisChannel, linkbase: bool, linkbase_max: int, max_url_length: int) -> None:
        self._channel = channel
        self._linkbase = linkbase
        self._linkbase_max = linkbase_max
        self._max_url_length = max_url_length

    def recrawl(self, cutoffs: Iterable[tuple[str, str, float]], limit: int) -> defer.Deferred[int]:
        """Queue again up to ``limit`` pages of each (domain, kind) crawled set fetched at or before its cut-off."""
        args = [str(limit)]
        for domain, kind, cutoff in cutoffs:
            args += (domain, str(KINDS[kind]), repr(float(cutoff)))
        return self._channel.run("recrawl", args).addCallback(int)

    def add_links(self, parent: str, urls: Sequence[str], anchors: Sequence[str] = (),
                  xpaths: Sequence[str] = ()) -> defer.Deferred[int]:
        """Record how ``urls`` were first found (``parent``, anchor text, link path); fires with the number recorded."""
        if not self._linkbase:
            return defer.succeed(0)
        args = [str(self._linkbase_max)]
        for url, anchor, xpath in zip(urls, parallel(anchors, len(urls)), parallel(xpaths, len(urls))):
            u = parsed(url, self._max_url_length)
            if u is not None:
                args += (u.url, link_value(u.url, parent, anchor, xpath))
        return self._channel.run("links", args).addCallback(int) if len(args) > 1 else defer.succeed(0)

    def claim_once(self, name: str, ttl: float) -> defer.Deferred[bool]:
        """True for the one caller, over all nodes, that first claims ``name`` within ``ttl`` seconds (SET NX PX)."""
        d = self._channel.execute("SET", self._channel.prefix + name, "1", "NX", "PX", str(max(1, int(ttl * 1000))))
        return d.addCallback(lambda answer: answer is not None)
