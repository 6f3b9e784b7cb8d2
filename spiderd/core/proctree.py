"""A process and its descendants, read from Linux's /proc (a browser is a tree of processes)."""

from __future__ import annotations

import os

from spiderd.core.memory import private_of, rss_of


def children_of() -> dict[int, list[int]]:
    """Every process's children, by parent pid (one pass over /proc; empty where /proc is missing)."""
    tree: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return tree
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:  # procfs: answered from the kernel's memory
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()  # the name may hold spaces and parentheses
        if len(fields) > 1:
            tree.setdefault(int(fields[1]), []).append(int(name))
    return tree


def descendants(pid: int, tree: dict[int, list[int]] | None = None) -> list[int]:
    """``pid``'s children, their children, and so on."""
    tree = children_of() if tree is None else tree
    found, todo = [], list(tree.get(pid, ()))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(tree.get(child, ()))
    return found


def pss_of(pid: int) -> int | None:
    """The proportional set size of ``pid`` in bytes (its resident pages, each shared page divided among the
    processes that share it), from /proc/PID/smaps_rollup; its resident set where that cannot be read."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return rss_of(pid)


def tree_memory(pid: int, tree: dict[int, list[int]] | None = None) -> int | None:
    """The memory of ``pid`` and its descendants in bytes: their proportional set sizes summed, so the pages a
    browser's processes share count once (None: ``pid`` cannot be read)."""
    own = pss_of(pid)
    if own is None:
        return None
    return own + sum(pss_of(child) or 0 for child in descendants(pid, tree))


def tree_private(pid: int, tree: dict[int, list[int]] | None = None) -> int | None:
    """The private resident memory (:func:`~spiderd.core.memory.private_of`) of ``pid`` and its descendants in
    bytes, summed (None: ``pid`` cannot be read): cheap enough to read every few seconds on the reactor, where
    :func:`tree_memory` is not (a few hundred ms for a browser's processes)."""
    own = private_of(pid)
    if own is None:
        return None
    return own + sum(private_of(child) or 0 for child in descendants(pid, tree))


def command_of(pid: int) -> list[str]:
    """The command line of ``pid`` ([] when gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [part.decode("utf-8", "replace") for part in f.read().split(b"\0") if part]
    except OSError:
        return []
