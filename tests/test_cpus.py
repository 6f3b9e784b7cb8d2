"""Tests for spiderd.core.cpus: the CPUs a process may run on are its affinity, not the machine's count."""

from __future__ import annotations

import os

from spiderd.core.cpus import processes, usable_cpus
from .helpers import needs_affinity, pinned_to_one_cpu


def test_usable_cpus_is_the_affinity() -> None:
    """Unpinned, the count is the affinity mask's size."""
    assert usable_cpus() == len(os.sched_getaffinity(0))


@needs_affinity
def test_pinned_process_counts_one_cpu() -> None:
    """Under a one-CPU affinity, -1 means one process, though the machine has more CPUs."""
    with pinned_to_one_cpu():
        assert usable_cpus() == 1
        assert processes(-1) == 1


def test_explicit_settings_are_kept() -> None:
    """0 and N mean themselves whatever the affinity."""
    assert processes(0) == 0
    assert processes(3) == 3
    assert processes(-1) == usable_cpus()
