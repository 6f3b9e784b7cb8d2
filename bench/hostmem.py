"""Where the node's memory per host goes (issue 38): bench/hosts.py's crawl of its generated web, run in this
process under tracemalloc, with the allocation sites that grew listed per host.

    python bench/hostmem.py --hosts 20000 --seconds 60
    python bench/hostmem.py --hosts 50000 --seconds 90 --top 40 --frames 12

Three snapshots: before the configuration is read (S0), ``--warmup`` seconds after the first page (S1: every host
is a seed, so S1 - S0 is what a host known costs, its seed in the configuration and the start-up included), and after ``--seconds`` (S2: S2 - S1
is what a host fetched from costs, divided by the hosts the server saw requests for in between, from its access
log).  Each allocation is filed under its innermost frame and the innermost frame in spiderd (``~`` when they are
the same line), so that a dict grown in Twisted is named by the spiderd line that made it grow.  The objects that
grew are counted by type too.  tracemalloc slows the crawl several times: only bytes and counts are figures here.

Needs what bench/hosts.py needs (root, nginx).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from hosts import SPEC, Server, config  # noqa: E402
from crawl import free_port  # noqa: E402

from spiderd.demo.static import write_static  # noqa: E402

ROOT = str(BENCH.parent)


def site_of(trace: tracemalloc.Traceback) -> str:
    """``innermost frame <- innermost spiderd frame`` of an allocation's traceback."""
    inner = trace[-1]  # a traceback's frames go from the outermost kept to the innermost
    here = f"{_short(inner.filename)}:{inner.lineno}"
    mine = next((f for f in reversed(trace) if "/spiderd/" in f.filename and "/site-packages/" not in f.filename),
                None)
    if mine is None or mine == inner:
        return here if mine is None else f"{here} ~"
    return f"{here} <- {_short(mine.filename)}:{mine.lineno}"


def _short(filename: str) -> str:
    for marker in ("/site-packages/", ROOT + "/", "/lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def by_site(snapshot: tracemalloc.Snapshot) -> Counter[str]:
    sizes: Counter[str] = Counter()
    for stat in snapshot.statistics("traceback"):
        sizes[site_of(stat.traceback)] += stat.size
    return sizes


def types() -> Counter[str]:
    return Counter(type(o).__qualname__ for o in gc.get_objects())


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def hosts_seen(log: Path) -> int:
    """Hosts the server saw a request for (its access log: ``host uri`` lines, flushed every second)."""
    time.sleep(1.2)
    with log.open() as lines:
        return len({line.partition(" ")[0] for line in lines})


class Probe:
    """The snapshots, taken on the reactor."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.snaps: list[tuple[str, tracemalloc.Snapshot, Counter[str], float, int]] = []

    def take(self, name: str, hosts: int) -> None:
        gc.collect()
        self.snaps.append((name, tracemalloc.take_snapshot(), types(), rss_mb(), hosts))
        traced = tracemalloc.get_traced_memory()[0] / 2**20
        print(f"{name}: traced {traced:.1f} MB, RSS {rss_mb():.1f} MB, hosts {hosts}", flush=True)

    def report(self, a: int, b: int, per: int, label: str) -> None:
        (na, sa, ta, ra, _), (nb, sb, tb, rb, _) = self.snaps[a], self.snaps[b]
        grown = by_site(sb)
        grown.subtract(by_site(sa))
        total = sum(grown.values())
        print(f"\n== {nb} - {na}: {label}, per host ({per} hosts): traced {total / per:.0f} B, "
              f"RSS {(rb - ra) * 2**20 / per:.0f} B")
        for site, size in grown.most_common(self.top):
            print(f"{size / per:9.1f} B  {site}")
        counts = tb
        counts.subtract(ta)
        print(f"-- objects per host (of {sum(counts.values()) / per:.1f}):")
        for name, count in counts.most_common(20):
            print(f"{count / per:9.3f}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--frames", type=int, default=10)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds from the first page to S1")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spiderd-hostmem-"))
    (work / "www").mkdir()
    (work / "nginx").mkdir()
    write_static(SPEC, work / "www")
    server = Server(work / "www", work / "nginx")
    try:
        run(work, server, args)
    finally:
        server.stop()


def run(work: Path, server: Server, args: Any) -> None:
    from twisted.internet import reactor

    from spiderd.config import settings as cfg
    from twisted.logger import globalLogBeginner, textFileLogObserver

    from spiderd.core.stats import ProgressLogger
    from spiderd.tap import build

    globalLogBeginner.beginLoggingTo([textFileLogObserver(open(work / "node.log", "w"))], redirectStandardIO=False)  # not kept in memory

    server.new_log("check")
    path = config(work, "node", args.hosts, server.port, free_port(), "")
    probe = Probe(args.top)
    tracemalloc.start(args.frames)
    probe.take("S0 before the configuration", 0)
    settings = cfg.with_overlay(cfg.load(str(path)))
    top = build(settings, reactor)  # type: ignore[arg-type]
    stats = next(s for s in _walk(top) if isinstance(s, ProgressLogger))._stats
    log = work / "nginx" / "access.log"

    def first_page() -> None:
        if not stats.counts["pages"]:
            reactor.callLater(0.5, first_page)
            return
        reactor.callLater(args.warmup, warm)

    def warm() -> None:
        probe.take("S1 warm", args.hosts)
        started = hosts_seen(log)
        reactor.callLater(args.seconds, end, started)

    def end(started: int) -> None:
        probe.take("S2 end", hosts_seen(log) - started)
        reactor.callLater(0, top.stopService().addBoth, lambda _: reactor.stop())

    reactor.callWhenRunning(top.startService)
    reactor.callWhenRunning(first_page)
    reactor.run()
    tracemalloc.stop()
    probe.report(0, 1, args.hosts, "a host known (a seed)")
    probe.report(1, 2, max(probe.snaps[2][4], 1), "a host fetched from")
    print(f"\npages {stats.counts['pages']}, requests {stats.counts['requests']}")


def _walk(service: Any) -> Any:
    yield service
    for child in getattr(service, "services", ()):
        yield from _walk(child)


if __name__ == "__main__":
    main()
