"""The batcher's figures per target (``status()["targets"]``: the status page's "Batches per target").

A target's ``waiting`` batches are the spooled ones whose next POST goes to it
(targets take turns by batch number and attempt, see :mod:`.batcher`) and
that are not in flight: queued for a POST slot, or waiting out a back-off.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class TargetFigures:
    """What one target was sent and answered since this node started."""

    target: str  # its schedule.json URL without credentials (and without /schedule.json)
    in_flight: int = 0
    sent: int = 0
    urls_sent: int = 0
    failures: int = 0
    last_error: str = ""
    last_accepted: float | None = None


def next_target(number: int, attempts: int, count: int) -> int:
    """The index of the target a batch's next POST goes to."""
    return (number - 1 + attempts) % count


def target_rows(figures: Sequence[TargetFigures], spooled: Iterable[Any]) -> list[dict[str, Any]]:
    """One row a target, the ones that need attention first: most batches waiting, then most failures."""
    bound = [0] * len(figures)
    for batch in spooled:
        bound[next_target(batch.number, batch.attempts, len(figures))] += 1
    rows: list[dict[str, Any]] = [{"target": f.target, "waiting": max(0, bound[i] - f.in_flight), "in_flight": f.in_flight, "sent": f.sent,
             "urls_sent": f.urls_sent, "failures": f.failures, "last_error": f.last_error,
             "last_accepted": f.last_accepted} for i, f in enumerate(figures)]
    order = sorted(range(len(rows)), key=lambda i: (-rows[i]["waiting"], -rows[i]["failures"], i))
    return [rows[i] for i in order]
