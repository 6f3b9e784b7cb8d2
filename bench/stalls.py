"""What holds the reactor: stacks sampled from the reactor thread while it is late, for the benches.

A node started through ``TWISTD_STALLS`` (instead of ``crawl.TWISTD``) beats a timer every ``BEAT`` s on its
reactor; a watchdog thread looks every ``LOOK`` s, and while the last beat is older than ``$SPIDERD_STALLS_MS``
(30 ms) it samples the reactor thread's stack: apart, the samples in which that thread was on a CPU (its CPU
clock moved half a look or more) and those it spent off one (the machine busy elsewhere, a system call waiting).
At the node's end it writes to ``$SPIDERD_STALLS`` (a file) the longest stalls and the stacks seen most in
stalls (each sample about ``LOOK`` s), innermost frame last.  The samples show Python frames: a C call that holds
the GIL shows as the Python line that made it.

    SPIDERD_STALLS=/tmp/stalls.txt python -c "$(python -c 'import stalls; print(stalls.TWISTD_STALLS)')" -n spiderd

bench/hosts.py runs its nodes this way with ``--stalls DIR``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections import Counter, deque

BEAT = 0.005
LOOK = 0.005
THRESHOLD_MS = float(os.environ.get("SPIDERD_STALLS_MS", "30"))
TWISTD_STALLS = ("import sys; sys.path.insert(0, %r); import stalls; stalls.install(); "
                 "from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()"
                 % os.path.dirname(os.path.abspath(__file__)))


class Watchdog:
    """Samples ``ident``'s stack while ``beat`` is older than the threshold."""

    def __init__(self, ident: int, threshold: float) -> None:
        self.ident = ident
        self.threshold = threshold
        self.beat = time.monotonic()
        self.stacks: Counter[str] = Counter()
        self.waiting: Counter[str] = Counter()
        self.lengths: list[float] = []
        self.longest: list[tuple[float, str]] = []  # (length, what ran in it) of the longest stalls
        self.collections: dict[int, list[float]] = {0: [], 1: [], 2: []}  # generation -> seconds of each pass
        self._gc_started = 0.0
        self._stop = threading.Event()

    def on_gc(self, phase: str, info: dict) -> None:
        """gc.callbacks: the length of each collection, by generation."""
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.collections[info["generation"]].append(time.perf_counter() - self._gc_started)

    def run(self) -> None:
        clock = time.pthread_getcpuclockid(self.ident)
        stall = None
        inside: Counter[str] = Counter()  # the current stall's samples by outermost spiderd frame
        cpu = time.clock_gettime(clock)
        while not self._stop.wait(LOOK):
            late = time.monotonic() - self.beat
            before, cpu = cpu, time.clock_gettime(clock)
            if late < self.threshold:
                if stall is not None:
                    self._ended(stall, inside)
                    stall, inside = None, Counter()
                continue
            stall = late
            frame = sys._current_frames().get(self.ident)
            if frame is not None:  # a sample the thread ran through, or one it waited through (descheduled, a syscall)
                on = cpu - before >= LOOK / 2
                stack = stack_of(frame)
                (self.stacks if on else self.waiting)[stack] += 1
                inside[("" if on else "(off) ") + outermost(stack)] += 1

    def _ended(self, length: float, inside: Counter[str]) -> None:
        self.lengths.append(length)
        what = ", ".join(f"{n} {frame}" for frame, n in inside.most_common(3))
        self.longest = sorted(self.longest + [(length, what)], reverse=True)[:15]

    def stop(self) -> None:
        self._stop.set()

    def report(self) -> str:
        lengths = sorted(self.lengths)
        lines = [f"stalls over {self.threshold * 1000:.0f} ms: {len(lengths)}; "
                 f"longest {', '.join(f'{x * 1000:.0f}' for x in lengths[-10:])} ms",
                 f"samples in stalls (about {LOOK * 1000:.0f} ms each): {sum(self.stacks.values())} with the "
                 f"reactor thread on a CPU, {sum(self.waiting.values())} off it", ""]
        for generation, passes in self.collections.items():
            lines.append(f"gc generation {generation}: {len(passes)} passes, {sum(passes) * 1000:.0f} ms in all, "
                         f"longest {max(passes, default=0) * 1000:.1f} ms")
        lines.append("")
        lines.append("===== the longest stalls: ms, then samples by outermost spiderd frame")
        lines += [f"{length * 1000:6.0f} {what}" for length, what in self.longest]
        lines.append("")
        for title, pick in (("innermost", -1), ("outermost", 0)):
            lines.append(f"===== ON A CPU, by the {title} spiderd frame")
            for frame, count in by_frame(self.stacks, pick).most_common(20):
                lines.append(f"{count:6d} {frame}")
            lines.append("")
        for title, table in (("ON A CPU", self.stacks), ("OFF A CPU", self.waiting)):
            lines.append(f"===== {title}")
            for stack, count in table.most_common(25):
                lines += [f"--- {count} samples", stack, ""]
        return "\n".join(lines)


def by_frame(stacks: Counter[str], pick: int) -> Counter[str]:
    """The samples of ``stacks`` by one spiderd frame of each (``pick``: -1 innermost, 0 outermost)."""
    table: Counter[str] = Counter()
    for stack, count in stacks.items():
        table[spiderd_frame(stack, pick)] += count
    return table


def outermost(stack: str) -> str:
    """The outermost spiderd frame of ``stack``."""
    return spiderd_frame(stack, 0)


def spiderd_frame(stack: str, pick: int) -> str:
    """One spiderd frame of ``stack`` (``pick``: -1 innermost, 0 outermost); its innermost frame when none is
    spiderd's."""
    frames = stack.split("\n")
    ours = [f for f in frames if "/spiderd/" in f]
    return (ours or frames[-1:])[pick].strip()


def stack_of(frame) -> str:
    """The stack, outermost first, past the reactor's own loop; the last 25 frames."""
    entries = traceback.extract_stack(frame)[-25:]
    return "\n".join(f"  {e.filename.split('site-packages/')[-1]}:{e.lineno} {e.name}" for e in entries)


def install() -> None:
    """Starts the watchdog once the reactor runs; writes the report at its shutdown."""
    path = os.environ.get("SPIDERD_STALLS")
    if not path:
        return
    from twisted.internet import reactor, task

    dog = Watchdog(threading.get_ident(), THRESHOLD_MS / 1000)

    def beat() -> None:
        dog.beat = time.monotonic()

    def start() -> None:
        import gc

        gc.callbacks.append(dog.on_gc)
        task.LoopingCall(beat).start(BEAT)
        threading.Thread(target=dog.run, daemon=True, name="stalls").start()

    census: list[str] = []

    def count_objects() -> None:  # (a stall of its own: only with $SPIDERD_STALLS_CENSUS)
        import gc

        objects = gc.get_objects()
        kinds = Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in objects)
        census[:] = [f"objects the collector tracks: {len(objects)} (frozen: {gc.get_freeze_count()})"]
        census.extend(f"{n:9d} {kind}" for kind, n in kinds.most_common(30))
        sized = sorted((o for o in objects if isinstance(o, (list, dict, set, deque))), key=len, reverse=True)[:12]
        closed = [o for o in objects if type(o).__qualname__ == "Client" and not hasattr(o, "socket")][:3]
        del objects
        for client in closed:
            census.append(f"a closed Client, held by:")
            for h in gc.get_referrers(client):
                if h is closed:
                    continue
                up = [type(x).__qualname__ for x in gc.get_referrers(h)[:5] if x is not closed]
                census.append(f"    {type(h).__qualname__} {str(h)[:100]!r} <- {up}")
                for x in gc.get_referrers(h):
                    if isinstance(x, (list, dict)) and x is not closed:
                        owners = [f"{type(y).__qualname__} {str(y)[:80]!r}" for y in gc.get_referrers(x)[:3]
                                  if y is not closed]
                        census.append(f"        {type(x).__name__} of {len(x)} <- {owners}")
        del closed
        census.append("the largest containers:")
        for o in sized:
            holders = [type(h).__qualname__ for h in gc.get_referrers(o)[:4] if h is not sized]
            census.append(f"{len(o):9d} {type(o).__name__} of {type(next(iter(o), None)).__name__}, held by {holders}")
        del sized
        found = gc.collect()
        left = sum(1 for o in gc.get_objects() if type(o).__qualname__ == "Client")
        census.append(f"a full collection found {found} unreachable; Client objects left: {left}")
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a full pass finds unreachable: garbage that only the collector frees
        gc.collect()
        garbage = Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
        census.append(f"garbage in cycles: {len(gc.garbage)} objects")
        census.extend(f"{n:9d} {kind}" for kind, n in garbage.most_common(40))
        gc.garbage.clear()
        gc.set_debug(0)

    if os.environ.get("SPIDERD_GC_THRESHOLDS"):  # an experiment: the collector's thresholds, once calm_gc has run
        import gc

        wanted = tuple(int(x) for x in os.environ["SPIDERD_GC_THRESHOLDS"].split(","))
        reactor.callLater(1, lambda: gc.set_threshold(*wanted))

    if os.environ.get("SPIDERD_STALLS_CENSUS"):
        reactor.callLater(float(os.environ["SPIDERD_STALLS_CENSUS"]), count_objects)

    def end() -> None:
        dog.stop()
        with open(path, "w") as out:
            out.write(dog.report())
            out.write("\n".join(["", "===== census"] + census + [""]))

    reactor.callWhenRunning(start)
    reactor.addSystemEventTrigger("after", "shutdown", end)
