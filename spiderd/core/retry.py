"""The one backoff: ``first`` seconds, then doubling (by ``factor``), at most ``cap``; pure, no clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays between attempts of something that keeps failing."""

    first: float
    cap: float
    factor: float = 2.0

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` failures in a row (1 -> ``first``; 0 or less -> 0)."""
        if failures <= 0:
            return 0.0
        return min(self.cap, self.first * self.factor ** min(failures - 1, 64))

    def after(self, previous: float) -> float:
        """The wait after a wait of ``previous`` seconds (0 or less: the first)."""
        return min(self.cap, self.first if previous <= 0 else previous * self.factor)

    def delays(self, at_once: bool = False) -> Iterator[float]:
        """Every wait in turn (``at_once``: a first try with no wait)."""
        if at_once:
            yield 0.0
        failures = 0
        while True:
            failures += 1
            yield self.delay(failures)
