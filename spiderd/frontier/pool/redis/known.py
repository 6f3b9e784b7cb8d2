"""A node's memory of URLs the shared pool already knows, so that adding them again costs Redis nothing.

A list page links mostly to pages found before (the menu, the pager, items shown on several lists); adding a
link the pool knows is a no-op in add.lua and seen.lua, yet costs Redis its arguments, a set lookup and the
script's loop for each.  A URL is remembered here only after Redis answered that it is known (or has just
recorded it), and the pool never forgets a URL it knew (a URL only changes state: waiting, leased, done, failed,
batched), so skipping it changes nothing: the add or the filter would have answered the same.  Only an operator
who deletes the pool's keys by hand makes an entry wrong; restarting the nodes empties their memory.

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
        self.skipped = 0  # URLs left out of a call because they are known (for the log and the tests)

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

    def remember(self, urls: Iterable[str]) -> None:
        """Remember ``urls`` as known to the pool, dropping the least recently used past ``size``."""
        if self.size <= 0:
            return
        urls_ = self._urls
        for url in urls:
            urls_[url] = None
            urls_.move_to_end(url)
        while len(urls_) > self.size:
            urls_.popitem(last=False)
