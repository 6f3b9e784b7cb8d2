"""A node's memory of URLs the shared pool already knows, so that adding them again costs Redis nothing.

A list page links mostly to pages found before (the menu, the pager, items shown on several lists); adding a
link the pool knows is a no-op in add.lua and seen.lua, yet costs Redis its arguments, a set lookup and the
script's loop for each.  A URL is remembered here only after Redis answered that it is known (or has just
recorded it), and the pool never forgets a URL it knew (a URL only changes state: waiting, leased, done, failed,
batched), so skipping it changes nothing: the add or the filter would have answered the same.

Unless Redis loses the pool's data (restarted empty, flushed, a replica that missed writes): each answer carries
the pool's epoch (``P meta``, set anew by the first call that finds none), and a change of epoch in any of the
pool's partitions empties the memory.  Links skipped between the loss and the first answer after it are lost
with the rest of what Redis lost.

The memory is bounded: least recently used URLs go first (``[pool] redis_known_urls`` entries; 0 keeps none).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable


class KnownURLs:
    """Canonical URLs the shared pool knows, the ``size`` most recently used; ``size`` 0 remembers none."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._urls: OrderedDict[str, None] = OrderedDict()
        self._epochs: dict[str, str] = {}  # the pool's (a partition's) prefix -> its epoch at the last answer
        self.skipped = 0  # URLs left out of a call because they are known (the tests and benches read it)

    def __len__(self) -> int:
        return len(self._urls)

    def unknown(self, urls: Iterable[str]) -> list[str]:
        """``urls`` not remembered, in order; each remembered one is counted in ``skipped`` and kept longer."""
        urls_ = self._urls
        out = []
        for url in urls:
            if url in urls_:
                urls_.move_to_end(url)
                self.skipped += 1
            else:
                out.append(url)
        return out

    def remember(self, urls: Iterable[str], pool: str, epoch: str) -> bool:
        """Remember ``urls`` as known to ``pool`` (a prefix) in ``epoch``, dropping the least recently used past
        ``size``; all are forgotten first if ``pool``'s epoch changed (it lost its data): then True."""
        lost = self._epochs.setdefault(pool, epoch) != epoch
        if lost:
            self._urls.clear()
            self._epochs[pool] = epoch
        if self.size <= 0:
            return lost
        urls_ = self._urls
        for url in urls:
            urls_[url] = None
            urls_.move_to_end(url)
        while len(urls_) > self.size:
            urls_.popitem(last=False)
        return lost
