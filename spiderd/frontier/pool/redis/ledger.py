"""RedisPool's batch ledger: the seen set the batcher filters detail URLs by (``seen.lua`` over the seen buckets,
a URL sent in a batch recorded as batched), and batch numbers (``INCRBY P batch``), unique across nodes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from twisted.internet import defer
from zope.interface import implementer

from spiderd.contracts.pool import IBatchLedger
from spiderd.core.urls import host_of, registered_domain
from spiderd.frontier.pool.redis.channel import RedisChannel
from spiderd.frontier.pool.redis.keys import add_keys
from spiderd.frontier.pool.shared import URLParser


@implementer(IBatchLedger)
class RedisLedger:
    """seen_filter, seen_add and next_batch over the ``channel`` (``urls`` parses, counting rejections); a URL
    sent in a batch of a domain whose detail pages are recrawled (``kept``: domain -> its kept prios, "1" for
    detail) goes in its crawled set of batched pages (``batched.lua``)."""

    def __init__(self, channel: RedisChannel, urls: URLParser, kept: dict[str, str] | None = None) -> None:
        self._channel = channel
        self._urls = urls
        self.set_kept(kept or {})

    def set_kept(self, kept: dict[str, str]) -> None:
        """The recrawled domains' kept prios (the sites' recrawl intervals changed)."""
        self._kept = {domain for domain, prios in kept.items() if "1" in prios}

    def seen_filter(self, urls: Iterable[str]) -> defer.Deferred[list[str]]:
        """The canonical forms of ``urls`` the pool has never seen (in any state), without duplicates."""
        return self._seen(urls, mark=False)

    def seen_add(self, urls: Iterable[str]) -> defer.Deferred[int]:
        """Record ``urls`` as sent in a batch (a final state here); fires with the number newly recorded."""
        return self._seen(urls, mark=True).addCallback(self._keep).addCallback(len)

    def _keep(self, marked: list[str]) -> Any:
        """Put the URLs just marked of the recrawled domains in their sets of batched pages."""
        args = ["mark"]
        if self._kept:
            for url in marked:
                domain = registered_domain(host_of(url))
                if domain in self._kept:
                    args += (url, domain)
        if len(args) == 1:
            return marked
        return self._channel.run("batched", args).addCallback(lambda _: marked)

    def _seen(self, urls: Iterable[str], mark: bool) -> defer.Deferred[list[str]]:
        channel = self._channel
        canonical = channel.known.unknown(dict.fromkeys(u.url for u in map(self._urls.parse, urls) if u is not None))
        if not canonical:
            return defer.succeed([])
        args = ["1" if mark else "0"]
        for url in canonical:
            args += add_keys(url, channel.prefix, channel.bits)
        return channel.run("seen", args).addCallback(self._seen_answer, canonical, mark)

    def _seen_answer(self, answer: list[Any], urls: list[str], mark: bool) -> list[str]:
        """The fresh ones of ``urls``; the others (all of them, marked) are known to the pool now."""
        *flags, epoch = answer
        self._channel.remember(urls if mark else [url for url, fresh in zip(urls, flags) if not fresh], epoch)
        return [url for url, fresh in zip(urls, flags) if fresh]

    def next_batch(self, count: int = 1) -> defer.Deferred[int]:
        """Reserve ``count`` batch numbers, unique across nodes and restarts; fires with the first."""
        d = self._channel.execute("INCRBY", self._channel.prefix + "batch", str(count))
        return d.addCallback(lambda last: int(last) - count + 1)
