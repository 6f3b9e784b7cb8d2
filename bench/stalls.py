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
from collections import Counter

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
        self._stop = threading.Event()

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
    """The samples of ``stacks`` by one spiderd frame of each (``pick``: -1 innermost, 0 outermost; the innermost
    frame when none is spiderd's)."""
    table: Counter[str] = Counter()
    for stack, count in stacks.items():
        frames = stack.split("\n")
        ours = [f for f in frames if "/spiderd/" in f]
        table[(ours or frames[-1:])[pick].strip()] += count
    return table


def outermost(stack: str) -> str:
    """The outermost spiderd frame of ``stack`` (its innermost frame when none is spiderd's)."""
    frames = stack.split("\n")
    ours = [f for f in frames if "/spiderd/" in f]
    return (ours or frames[-1:])[0].strip()


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
        task.LoopingCall(beat).start(BEAT)
        threading.Thread(target=dog.run, daemon=True, name="stalls").start()

    def end() -> None:
        dog.stop()
        with open(path, "w") as out:
            out.write(dog.report())

    reactor.callWhenRunning(start)
    reactor.addSystemEventTrigger("after", "shutdown", end)
