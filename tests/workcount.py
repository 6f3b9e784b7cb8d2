"""The work a step costs, counted in operations rather than seconds: the Python bytecodes it runs (a loop over a
table in Python) and the memory it takes at its peak (a copy of a table in C, which runs no bytecode).

``growth`` measures one more host added to a table of 1,000 hosts and to one of 100,000: a table whose cost per
host does not grow with its size costs about the same in both; a scan or a copy costs a hundred times more.
"""

from __future__ import annotations

import statistics
import sys
import tracemalloc
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable

SMALL = 1_000
BIG = 100_000
MORE = 200  # hosts added and measured past each size (amortised costs: a resize now and then is spread)


@dataclass(frozen=True)
class Work:
    """What one more host cost: bytecodes run (mean) and peak bytes allocated (median) per host."""

    opcodes: float
    peak_bytes: float

    def flat_against(self, small: "Work") -> bool:
        """True if this (the big table's) cost is within twice the small table's, plus a constant."""
        return self.opcodes <= 2 * small.opcodes + 200 and self.peak_bytes <= 2 * small.peak_bytes + 16384


def opcodes(step: Callable[[], Any]) -> int:
    """Python bytecodes run by ``step()``, in every frame it calls."""
    count = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        count += event == "opcode"
        return local

    def called(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        return local

    previous = sys.gettrace()
    sys.settrace(called)
    try:
        step()
    finally:
        sys.settrace(previous)
    return count


def peak_bytes(step: Callable[[], Any]) -> int:
    """The most memory ``step()`` had allocated at any moment beyond what was allocated before it."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        step()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def work(add: Callable[[int], Any], first: int, count: int = MORE) -> Work:
    """The cost of ``add(i)`` for ``count`` new hosts numbered from ``first``."""
    ops = [opcodes(lambda: add(first + i)) for i in range(count)]
    peaks = [peak_bytes(lambda: add(first + count + i)) for i in range(count)]
    return Work(statistics.mean(ops), statistics.median(peaks))


def growth(table: Callable[[int], Callable[[int], Any]], small: int = SMALL, big: int = BIG) -> tuple[Work, Work]:
    """The cost of one more host for a table that holds ``small`` hosts, and for one that holds ``big``.

    ``table(n)`` builds a table and fills it with hosts 0 .. n-1 (as the code under test adds them); it returns
    ``add(i)``, which adds host ``i`` to it the same way."""
    return work(table(small), small), work(table(big), big)
