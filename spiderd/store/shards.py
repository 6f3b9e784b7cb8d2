"""Seed 004's sharded page store: several MySQL databases, a page's shard chosen by its urlhash.

``[store] url`` as a list of ``mysql://`` URLs makes one :class:`MySQLStore`
per database; a page (and its hub row) goes to shard ``urlhash % n``, a hub
URL given to ``save_hubs`` to the shard of its fingerprint, so each row has
one place and reads go straight to it.  The mapping is stable as long as the
list keeps its order and length: adding a shard moves pages (copy them, or
start the new layout in fresh databases).  ``count`` sums the shards;
``hubs`` lists them shard by shard (oldest first within each).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from twisted.application.service import MultiService
from twisted.internet.defer import Deferred, gatherResults
from zope.interface import implementer

from spiderd.store.interfaces import IPageStore
from spiderd.core.urls import fingerprint
from spiderd.store.base import ItemRow, PageStore, check_page


@implementer(IPageStore)
class ShardedStore(MultiService):
    """Pages spread over ``shards`` (started and stopped with this service) by ``urlhash % len(shards)``."""

    name = "page-store"  # type: ignore[assignment]  # Service declares it None

    def __init__(self, shards: Sequence[PageStore]) -> None:
        super().__init__()
        if not shards:
            raise ValueError("a sharded store needs at least one shard")
        self.shards = list(shards)
        for index, shard in enumerate(self.shards):
            shard.setName(f"page-store-{index}")
            shard.setServiceParent(self)

    @property
    def preset(self) -> int:
        return self.shards[0].preset

    @property
    def item_table(self) -> bool:
        return self.shards[0].item_table

    @property
    def where(self) -> str:
        return " + ".join(shard.where for shard in self.shards)

    @property
    def pending(self) -> int:
        return sum(shard.pending for shard in self.shards)

    def shard_of(self, urlhash: int) -> PageStore:
        """The shard that holds the page of ``urlhash``."""
        return self.shards[urlhash % len(self.shards)]

    def save(self, url: str, urlhash: int, html: bytes, hub: bool = False,
             compressed: bytes | None = None, digest: str | None = None, item: ItemRow | None = None) -> Deferred[None]:
        problem = check_page(url, urlhash, html)
        shard = self.shards[0] if problem is not None else self.shard_of(urlhash)  # the shard says what is wrong
        return shard.save(url, urlhash, html, hub=hub, compressed=compressed, digest=digest, item=item)

    def save_hubs(self, urls: Iterable[str]) -> Deferred[int]:
        by_shard: dict[int, list[str]] = {}
        for url in [urls] if isinstance(urls, str) else urls:
            index = fingerprint(url) % len(self.shards) if isinstance(url, str) else 0
            by_shard.setdefault(index, []).append(url)
        saves = [self.shards[index].save_hubs(batch) for index, batch in sorted(by_shard.items())]
        return gatherResults(saves, consumeErrors=True).addCallback(sum)

    def get(self, urlhash: int) -> Deferred[tuple[str, bytes] | None]:
        shard = self.shard_of(urlhash) if check_page("", urlhash, b"") is None else self.shards[0]
        return shard.get(urlhash)

    def count(self) -> Deferred[int]:
        return self._all(lambda shard: shard.count()).addCallback(sum)

    def hubs(self) -> Deferred[list[str]]:
        return self._all(lambda shard: shard.hubs()).addCallback(lambda lists: [u for urls in lists for u in urls])

    def flush(self) -> Deferred[Any]:
        """Write every shard's queued pages now."""
        return self._all(lambda shard: shard.flush())

    def _all(self, call: Callable[[PageStore], Deferred[Any]]) -> Deferred[list[Any]]:
        return gatherResults([call(shard) for shard in self.shards], consumeErrors=True)
