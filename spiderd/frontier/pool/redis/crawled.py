"""RedisPool's part for seed 004: recrawl of the crawled sets (``recrawl.lua``), the linkbase (``links.lua``),
and one-shot claims over every node (``SET NX PX``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from twisted.internet import defer
from zope.interface import implementer

from spiderd.contracts.pool import ILinkbase
from spiderd.core import conditional as cg
from spiderd.core.recrawls import Recrawl
from spiderd.core.urls import registered_domain
from spiderd.frontier.pool.crawled import KINDS, link_value, parallel
from spiderd.frontier.pool.redis.channel import RedisChannel
from spiderd.frontier.pool.shared import parsed


@implementer(ILinkbase)
class RedisCrawled:
    """recrawl, add_links (when ``linkbase``, up to ``linkbase_max`` entries) and claim_once over the ``channel``."""

    def __init__(self, channel: RedisChannel, linkbase: bool, linkbase_max: int, max_url_length: int,
                 conditional_get: bool = True) -> None:
        self._channel = channel
        self._conditional = conditional_get
        self._linkbase = linkbase
        self._linkbase_max = linkbase_max
        self._max_url_length = max_url_length

    def recrawl(self, cutoffs: Iterable[tuple[str, str, float]], limit: int) -> defer.Deferred[int]:
        """Queue again up to ``limit`` pages of each (domain, kind) crawled set fetched at or before its cut-off."""
        args = [str(limit)]
        for domain, kind, cutoff in cutoffs:
            args += (domain, str(KINDS[kind]), repr(float(cutoff)))
        return self._channel.run("recrawl", args).addCallback(int)

    def recrawl_batched(self, cutoffs: Iterable[tuple[str, str, float]], limit: int) -> defer.Deferred[list[Recrawl]]:
        """Up to ``limit`` detail pages sent in batches of each domain's set (its cut-off for "detail"), last
        fetched (or sent) at or before the cut-off; each is scored as sent now (``batched.lua``)."""
        args = ["take", str(limit)]
        for domain, kind, cutoff in cutoffs:
            if kind == "detail":
                args += (domain, repr(float(cutoff)))
        if len(args) == 2 or limit <= 0:
            return defer.succeed([])
        return self._channel.run("batched", args).addCallback(_recrawls)

    def batched_fetched(self, pages: Iterable[Recrawl]) -> defer.Deferred[int]:
        """A worker fetched batched pages: each one in its set is scored by its fetch and keeps the validators
        given (with ``conditional_get``; None drops them)."""
        args = ["fetched"]
        for page in pages:
            u = parsed(page.url, self._max_url_length)
            if u is not None:
                kept = "~" if not self._conditional else "" if page.validators is None else cg.to_text(page.validators)
                args += (u.url, registered_domain(u.host), repr(float(page.fetched_at)), kept)
        return self._channel.run("batched", args).addCallback(int) if len(args) > 1 else defer.succeed(0)

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


def _recrawls(answer: list[Any]) -> list[Recrawl]:
    """``batched.lua``'s take: url, score, validators per page."""
    return [Recrawl(_text(answer[i]), float(answer[i + 1]), cg.from_text(answer[i + 2]))
            for i in range(0, len(answer), 3)]


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
