"""Seed 004's ``get_list`` / ``get_detail``: how a pop divides between waiting list and detail URLs.

``list_ratio`` and ``detail_ratio`` (``[pool]``) are the shares of a pop's
waiting URLs (the hubs it hands out aside) reserved for each kind; the rest,
``1 - list_ratio - detail_ratio``, goes as before: hosts in turn, a host's list
URLs before its detail URLs.  Both 0 (the default) reserve nothing.  A pop
first takes the reserved URLs (looking at up to ``RESERVE_SCAN`` hosts, or
Redis domains, that have none of the kind it still needs, which keep their
turn), then fills the rest in host order from either kind, so a kind with too
few URLs ready leaves its share to the other and a pop never hands out less
than it did without a split.

Small pops (the fetch loop asks for the slots that just came free, often one)
cannot be split one by one, so each kind earns ``ratio x wanted`` credit per
pop and a pop reserves the whole URLs of that credit; what a kind takes is
paid from it.  Credit is kept between 0 and 1 once a pop is over: a kind that
had nothing ready does not save up a burst for later, and one that got more
than its share (from the rest) owes nothing.  Over many pops each kind thus
gets at least its share whenever it has URLs ready.  The credit is per pool
object: on Redis each node splits its own pops.
"""

from __future__ import annotations

import math
from typing import Sequence

RESERVE_SCAN = 100
KINDS = ("list", "detail")


def check_ratios(list_ratio: float, detail_ratio: float) -> None:
    """Raise ValueError unless both ratios are in 0..1 and their sum does not exceed 1."""
    for name, ratio in zip(KINDS, (list_ratio, detail_ratio)):
        if not 0 <= ratio <= 1:
            raise ValueError(f"{name}_ratio must be between 0 and 1, got {ratio!r}")
    if list_ratio + detail_ratio > 1:
        raise ValueError(f"list_ratio + detail_ratio must not exceed 1 ({list_ratio} + {detail_ratio})")


class KindSplit:
    """The reserved shares of list (prio 0) and detail (prio 1) URLs in a pop, with credit carried between pops."""

    __slots__ = ("ratios", "_credit")

    def __init__(self, list_ratio: float = 0.0, detail_ratio: float = 0.0) -> None:
        check_ratios(list_ratio, detail_ratio)
        self.ratios = (float(list_ratio), float(detail_ratio))
        self._credit = [0.0, 0.0]

    @property
    def active(self) -> bool:
        """Whether any share is reserved."""
        return any(self.ratios)

    @property
    def credit(self) -> tuple[float, float]:
        """The credit of each kind, carried from the pops before (for a pop computed elsewhere: Redis)."""
        return self._credit[0], self._credit[1]

    def reserve(self, wanted: int) -> list[int]:
        """``[lists, details]`` a pop of ``wanted`` waiting URLs takes first (pop.lua computes the same)."""
        if not self.active or wanted <= 0:
            return [0, 0]
        lists = min(wanted, math.floor(self._credit[0] + wanted * self.ratios[0] + 1e-9))
        return [lists, min(wanted - lists, math.floor(self._credit[1] + wanted * self.ratios[1] + 1e-9))]

    def settle(self, wanted: int, counts: Sequence[int]) -> None:
        """A pop of ``wanted`` waiting URLs handed out ``counts[prio]`` of each kind: earn, pay, keep in 0..1."""
        if self.active and wanted > 0:
            earned = zip(self._credit, self.ratios, counts)
            self._credit = [min(1.0, max(0.0, c + wanted * r - n)) for c, r, n in earned]


def hub_quota(count: int, hub_percent: int) -> int:
    """How many due hubs a pop of ``count`` hands out at most: ``hub_percent`` of it, and at least one (as seed
    000's pool does), so ``pop(1)`` never leaves a due hub waiting while the pool says it is due."""
    if count <= 0 or hub_percent <= 0:
        return 0
    return max(1, count * min(hub_percent, 100) // 100)
