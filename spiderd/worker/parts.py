"""A job's feed in parts: a job that runs long ships what it has so far, exactly once.

A job's items go into ``<job>.jl``.  When the file is old (``[items] rotate_seconds`` after its first item) or idle
(``rotate_idle`` after its last) and the job is still running, the file is *cut* on the job's I/O lane, in this
order: the file is fsynced and closed, renamed to ``<job>.p00001.jl`` (part 1, 2, ...), the part's page
fingerprints are appended to the job's ledger ``<jobs>/<job>.parts`` (fsynced), and ``<job>.jl`` starts again
empty.  The part is then shipped as the job's feed name with ``-p00001`` before its extension; the rest of the job
ships under the feed name itself when the job ends.

What a crash leaves is unambiguous: a part file in the incoming directory is not shipped yet (the shipper's spool
takes it by a rename); a ledger line without its part file is a shipped part; a part file without a ledger line
was cut just before the crash (its fingerprints are read back from it).  When the job runs again
(:meth:`JobParts.recover`), the parts not shipped are shipped first, and the pages of every part are skipped:
they make no item again (they are fetched again: only their items are known).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime

from spiderd.core.fsutil import fsync_dir
from spiderd.core.urls import fingerprint

LEDGER = ".parts"


def part_path(items_path: str, number: int, extension: str = ".jl") -> str:
    """The local file of part ``number`` of the job whose items file is ``items_path``."""
    return f"{items_path[: -len('.jl')]}.p{number:05d}{extension}"


def part_uri(feed_uri: str, number: int) -> str:
    """The feed URI of part ``number``: ``-p00001`` before the name's extension."""
    head, slash, name = feed_uri.rpartition("/")
    stem, dot, extension = name.rpartition(".")
    named = f"{stem}-p{number:05d}.{extension}" if dot and stem else f"{name}-p{number:05d}"
    return head + slash + named


@dataclass
class Recovered:
    """What a job's earlier runs left: the fingerprints of its parts' pages, the part files not shipped, and the
    next part's number."""

    sealed: set[int] = field(default_factory=set)
    unshipped: list[tuple[int, str]] = field(default_factory=list)  # (number, path), in order
    next: int = 1


class JobParts:
    """A job's ledger of parts and its part files (blocking: the job's I/O lane)."""

    def __init__(self, items_path: str, ledger_path: str) -> None:
        self.items_path = items_path
        self.ledger_path = ledger_path
        self._pattern = re.compile(re.escape(os.path.basename(items_path)[: -len(".jl")]) +
                                   r"\.p(\d{5})\.(jl|parquet)$")

    def recover(self) -> Recovered:
        """The ledger read (a torn last line dropped), a part cut just before a crash entered in it."""
        ledger = self._read()
        found = self._part_files()
        for number, path in found:
            if number not in ledger and path.endswith(".jl"):
                ledger[number] = _fingerprints(path)
                self._append(number, ledger[number])
        numbers = set(ledger) | {n for n, _ in found}
        return Recovered({fp for fps in ledger.values() for fp in fps}, found, max(numbers, default=0) + 1)

    def cut(self, number: int, fingerprints: set[int]) -> str:
        """(Between the closed file and the new one) ``<job>.jl`` becomes part ``number``; its path."""
        path = part_path(self.items_path, number)
        os.replace(self.items_path, path)
        fsync_dir(os.path.dirname(path))
        self._append(number, sorted(fingerprints))
        return path

    def remove(self) -> None:
        """The job ended: its ledger goes (its part files are shipped or discarded)."""
        try:
            os.unlink(self.ledger_path)
        except FileNotFoundError:
            pass

    def discard_parts(self) -> None:
        """A cancelled job: the part files not shipped go too."""
        for _, path in self._part_files():
            os.unlink(path)

    def _read(self) -> dict[int, list[int]]:
        ledger: dict[int, list[int]] = {}
        try:
            with open(self.ledger_path, encoding="utf-8") as f:
                for line in f:
                    try:
                        entry = json.loads(line)
                        ledger[int(entry["part"])] = [int(fp) for fp in entry["fps"]]
                    except (ValueError, KeyError, TypeError):
                        break  # a torn last line: that part is entered again from its file
        except FileNotFoundError:
            pass
        return ledger

    def _append(self, number: int, fps: list[int]) -> None:
        os.makedirs(os.path.dirname(self.ledger_path), exist_ok=True)
        with open(self.ledger_path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"part": number, "fps": fps}) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def _part_files(self) -> list[tuple[int, str]]:
        directory = os.path.dirname(self.items_path)
        found = []
        for name in os.listdir(directory) if os.path.isdir(directory) else ():
            match = self._pattern.fullmatch(name)
            if match:
                found.append((int(match.group(1)), os.path.join(directory, name)))
        return sorted(found)


def item_fingerprint(item: dict[str, Any]) -> int | None:
    """The page fingerprint of an item (its ``url``), as the job's redirect and repeat checks take it."""
    url = item.get("url")
    return fingerprint(url) if isinstance(url, str) else None


def _fingerprints(path: str) -> list[int]:
    found = []
    with open(path, "rb") as f:
        for line in f:
            try:
                fp = item_fingerprint(json.loads(line))
            except ValueError:
                continue  # (a cut file holds whole lines: it was fsynced before the rename)
            if fp is not None:
                found.append(fp)
    return found


class PartClock:
    """When a job's current part is due: ``age`` seconds after its first item, ``idle`` after its last (0: never);
    ``due()`` is called then."""

    def __init__(self, clock: IReactorTime, age: float, idle: float, due: Callable[[], object]) -> None:
        self._clock, self._age, self._idle, self._due = clock, age, idle, due
        self._first: IDelayedCall | None = None
        self._last: IDelayedCall | None = None

    def wrote(self) -> None:
        """An item went into the current part."""
        if self._first is None and self._age > 0:
            self._first = self._clock.callLater(self._age, self._fire)
        if self._idle > 0:
            if self._last is not None and self._last.active():
                self._last.reset(self._idle)  # (moved later: no new timer, no cancelled one left in the heap)
            else:
                self._last = self._clock.callLater(self._idle, self._fire)

    def reset(self) -> None:
        """A new part begins (or the job ends): no timer runs until its first item."""
        for call in (self._first, self._last):
            if call is not None and call.active():
                call.cancel()
        self._first = self._last = None

    def _fire(self) -> None:
        self.reset()
        self._due()
