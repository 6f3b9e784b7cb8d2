"""The one backoff (spiderd.core.retry)."""

from __future__ import annotations

import itertools

from spiderd.core.retry import Backoff


def test_delays_double_up_to_the_cap() -> None:
    """first, doubling, capped; no wait before the first failure; a huge count does not overflow."""
    backoff = Backoff(1.0, 10.0)
    assert [backoff.delay(n) for n in range(6)] == [0.0, 1.0, 2.0, 4.0, 8.0, 10.0]
    assert backoff.delay(10_000) == 10.0
    assert list(itertools.islice(backoff.delays(at_once=True), 4)) == [0.0, 1.0, 2.0, 4.0]


def test_after_a_wait() -> None:
    """The next wait from the last one (a spool entry keeps only its last delay)."""
    backoff = Backoff(0.5, 3.0)
    assert [backoff.after(d) for d in (0.0, 0.5, 1.0, 2.0, 3.0)] == [0.5, 1.0, 2.0, 3.0, 3.0]
