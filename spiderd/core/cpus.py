"""The CPUs this process may run on: its affinity (``taskset``, a container's cpuset), not the machine's count.

``os.cpu_count()`` counts the machine's CPUs even when the process may use only some of them, so a crawler started
under ``taskset -c 0`` would start a parse child per CPU of the machine and crowd the one it has.
"""

from __future__ import annotations

import os


def usable_cpus() -> int:
    """How many CPUs this process may run on (at least 1): the size of its affinity mask where the system has one
    (Linux), else ``os.cpu_count()``."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity on this system (macOS, Windows)
        return os.cpu_count() or 1


def processes(setting: int) -> int:
    """The number of child processes a ``-1 / 0 / N`` setting means: -1 is one per usable CPU, else the setting."""
    return usable_cpus() if setting < 0 else setting


__all__ = ["processes", "usable_cpus"]
