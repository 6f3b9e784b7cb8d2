"""Keys held until a deadline, expired from a heap of deadlines: O(log n) a key, never a scan of the table.

A broad crawl adds a key per host it meets (a sitemap claim, a robots.txt entry); a table that expired its
keys by walking all of them at each call would make every new host cost as much as all the hosts before it.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Generic, Hashable, Iterator, TypeVar

K = TypeVar("K", bound=Hashable)


class Deadlines(Generic[K]):
    """``key -> deadline``; :meth:`expire` drops the keys whose deadline is past, earliest first."""

    def __init__(self) -> None:
        self._until: dict[K, tuple[float, int]] = {}  # key -> (deadline, the number of its heap entry)
        self._heap: list[tuple[float, int, K]] = []  # (deadline, number, key); stale once the key was set again
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._until)

    def __contains__(self, key: object) -> bool:
        return key in self._until

    def __iter__(self) -> Iterator[K]:
        return iter(self._until)

    def get(self, key: K) -> float | None:
        """The deadline of ``key``, or None."""
        held = self._until.get(key)
        return None if held is None else held[0]

    def set(self, key: K, deadline: float) -> None:
        """Hold ``key`` until ``deadline`` (a later or earlier one than it had)."""
        entry = (deadline, next(self._order), key)
        self._until[key] = entry[:2]
        heapq.heappush(self._heap, entry)
        if len(self._heap) > 2 * len(self._until) + 64:  # keys set again and again: drop their stale entries
            self._heap = [e for e in self._heap if self._until.get(e[2]) == e[:2]]  # amortised: half go
            heapq.heapify(self._heap)

    def expire(self, now: float) -> list[K]:
        """Drop and return the keys whose deadline is ``now`` or before (amortised O(log n) a key)."""
        gone = []
        while self._heap and self._heap[0][0] <= now:
            deadline, number, key = heapq.heappop(self._heap)
            if self._until.get(key) == (deadline, number):
                del self._until[key]
                gone.append(key)
        return gone
