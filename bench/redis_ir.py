"""Redis's own instructions per crawled page on the shared frontier, counted by valgrind: a figure that does not move
with the machine's load.

    python bench/redis_ir.py                 # 3,060 crawler-shaped pages over 1000 hosts, then each script alone
    python bench/redis_ir.py --pages 6120 --hosts 100

Needs, beside ``pip install .``: ``valgrind`` (with ``callgrind_control``) and ``redis-server`` on PATH
(``apt-get install valgrind redis-server``).  It starts a redis-server of its own under callgrind (a free port, a
temp directory, ``--save "" --appendonly no``, ``--hz 1`` and ``--activerehashing no`` so that timers, which run
more often in a slowed-down server, add little) and counts the instructions (Ir) the server runs in each phase
(``callgrind_control --dump`` between phases; ``--profile DIR`` keeps the dumps for ``callgrind_annotate``, which
names Redis's and Lua's functions when the redis-server first on PATH has symbols: Debian's is stripped; one is
built with ``apt-get source redis`` (a deb-src line in /etc/apt/sources.list.d), ``apt-get install
libjemalloc-dev`` and ``make USE_SYSTEM_JEMALLOC=yes USE_JEMALLOC=yes BUILD_TLS=no`` in its folder, then
``PATH=<folder>/src:$PATH python bench/redis_ir.py --profile DIR``).
Kernel time (the sockets) is not counted.  ``bench/cluster.py`` gives Redis CPU a page, kernel included, on a real
clock, but on a shared machine that figure moves by 20% from run to run, where this one moves by about 3%: it
tells which of two versions of the scripts runs fewer instructions and where they go.

Phases:

- ``crawl``: a crawler-shaped mix run in a fixed order: 64 URLs in flight; each round pops 16 (with the statuses
  given since the last pop: ``statuspop``, as the crawler's ``[pool] redis_status_wait`` sends them), then the 16
  oldest are fetched (``fetched``), a list page (1 in 51) adds its 50 new detail links, and each status is set.
  Script time is a ``task.Clock`` that moves 1 ms a round: the status timer never fires, so statuses always go
  out with the next pop.  ``redis_ir_per_page`` is this phase's count over its pages.
- ``pop``, ``status``, ``add``: each script alone, 64 URLs a pop, 64 statuses a call, 50 new links a call:
  per URL (link).

Instructions are not time: a listpack's scan runs several instructions a cycle, where a skiplist's pointers miss
the cache, so confirm a cut with alternated ``bench/cluster.py`` runs (``INFO cpu``).  Nor does this count a real
crawler's calls (``bench/crawl.py``) faithfully: under valgrind Redis runs some 50 times slower, so a node that
waits on it sends larger calls and holds more leases than it would.

``--ir-per-us`` converts instructions to microseconds at an assumed rate (default 8,000 Ir per µs, about what
this machine's ``INFO cpu`` and this count gave for the same mix: a rough guide only).  Ends with one
``RESULT key=value ...`` line.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Generator

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from twisted.internet import defer, task, threads  # noqa: E402

from spiderd.engine.politeness import Politeness  # noqa: E402
from spiderd.frontier.pool.redis import open_redis_pool  # noqa: E402

from cluster import Servers  # noqa: E402  (bench/ is on sys.path: this script's folder)
from faultkit import free_port, wait_port  # noqa: E402

Gen = Generator[Any, Any, Any]
IN_FLIGHT, POP, LINKS, LIST_EVERY = 64, 16, 50, 51


class Server:
    """A redis-server under callgrind; ``count(label)`` dumps and returns the instructions since the last dump."""

    def __init__(self, directory: str, keep: str | None = None) -> None:
        self.directory, self.keep, self.port = directory, keep, free_port()
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={directory}/cg.out.%p",
               "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--hz", "1", "--activerehashing", "no", "--dir", directory]
        self.log = open(os.path.join(directory, "valgrind.log"), "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        wait_port(self.port, timeout=60.0)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def count(self, label: str) -> int:
        """Instructions run since the last dump (blocking: call from a thread)."""
        subprocess.run(["callgrind_control", f"--dump={label}", str(self.proc.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            for path in glob.glob(f"{self.directory}/cg.out.{self.proc.pid}.*"):
                with open(path, errors="replace") as f:
                    text = f.read()
                if f"Trigger: dump {label}\n" in text and (m := re.search(r"^totals: (\d+)", text, re.M)):
                    if self.keep:
                        shutil.move(path, os.path.join(self.keep, f"callgrind.{label}"))
                    else:
                        os.remove(path)
                    return int(m.group(1))
            time.sleep(0.1)
        raise RuntimeError(f"callgrind wrote no dump {label!r}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()


def url(i: int, hosts: int) -> str:
    """A detail URL of about 70 characters on host ``i % hosts``."""
    return f"http://www.shop{i % hosts}.com/category/{(i // hosts) % 97}/item-{i}.html?ref=list&page={i % 7}"


def list_url(i: int, hosts: int) -> str:
    return f"http://www.shop{i % hosts}.com/list/{i}.html"


class Mix:
    """The pages of the crawl phase: list pages queued first, their detail links numbered from ``first``."""

    def __init__(self, hosts: int, first: int) -> None:
        self.hosts, self.next_link = hosts, first

    def links_of(self, page: str) -> list[str]:
        if "/list/" not in page:
            return []
        start, self.next_link = self.next_link, self.next_link + LINKS
        return [url(i, self.hosts) for i in range(start, start + LINKS)]


@defer.inlineCallbacks
def crawl(pool: Any, clock: task.Clock, mix: Mix, pages: int, fail_every: int = 0) -> Gen:
    """The crawler-shaped phase: pages done (a fetch in ``fail_every`` a 503, to retry)."""
    in_flight: collections.deque[str] = collections.deque()
    statuses: list[defer.Deferred[None]] = []
    done = 0
    while done < pages:
        clock.advance(0.001)
        got = yield pool.pop(POP, 0)
        in_flight.extend(got)
        if not in_flight:
            if (yield pool.size()) == 0:
                break
            clock.advance(0.01)  # every host waits for its delay
            continue
        for _ in range(min(POP, len(in_flight)) if len(in_flight) > IN_FLIGHT - POP or not got else 0):
            page = in_flight.popleft()
            pool.fetched(page, 0.02)
            links = mix.links_of(page)
            if links:
                yield pool.addmany(links, detail=True, parent=page)
            code = 503 if fail_every and done % fail_every == fail_every - 1 else 200  # retried (failure_threshold)
            statuses.append(pool.set_statuses([(page, code)]))
            done += 1
    clock.advance(1.0)  # the statuses of the last round go out
    yield defer.gatherResults(statuses)
    return done


@defer.inlineCallbacks
def components(pool: Any, clock: task.Clock, server: Server, n: int, hosts: int) -> Gen:
    """Each script alone: instructions per URL of pop (64), status (64 a call) and add (50 new links a call)."""
    popped: list[str] = []
    while len(popped) < n:
        got = yield pool.pop(64, 0)
        if not got:
            break
        popped += got
    pop_ir = yield threads.deferToThread(server.count, "pop")
    for k in range(0, len(popped), 64):
        d = pool.set_statuses([(u, 200) for u in popped[k:k + 64]])
        clock.advance(1.0)  # status_wait is over
        yield d
    status_ir = yield threads.deferToThread(server.count, "status")
    links = n // LINKS * LINKS
    for k in range(0, links, LINKS):
        yield pool.addmany([url(50_000_000 + k + j, hosts) for j in range(LINKS)], detail=True)
    add_ir = yield threads.deferToThread(server.count, "add")
    return pop_ir / max(1, len(popped)), status_ir / max(1, len(popped)), add_ir / max(1, links)


@defer.inlineCallbacks
def driver(reactor: Any, args: argparse.Namespace, server: Server) -> Gen:
    clock = task.Clock()
    clock.advance(time.time())
    pool = yield open_redis_pool(server.url, clock, prefix="bir:", namespace="bir:",
                                 politeness=Politeness(args.delay, 100000), pending_threshold=3600, status_wait=0.05,
                                 redis_known_urls=args.known_urls)
    lists = args.pages // LIST_EVERY
    yield pool.addmany([list_url(i, args.hosts) for i in range(lists)])
    details = args.pages - lists - lists * LINKS
    for base in range(0, max(0, details), 5000):
        yield pool.addmany([url(i, args.hosts) for i in range(base, min(details, base + 5000))], detail=True)
    yield pool.addmany([url(i, args.hosts) for i in range(10_000_000, 10_000_000 + 20 * args.hosts)], detail=True)
    servers = yield Servers.open(server.url, None)
    yield threads.deferToThread(server.count, "filled")
    before = yield servers.commandstats()
    pages = yield crawl(pool, clock, Mix(args.hosts, 20_000_000), args.pages, args.fail_every)
    after = yield servers.commandstats()
    crawl_ir = yield threads.deferToThread(server.count, "crawl")
    pop_ir, status_ir, add_ir = yield components(pool, clock, server, args.components, args.hosts)
    yield pool.close()
    yield servers.close()
    per_page = crawl_ir / max(1, pages)
    us = args.ir_per_us
    print(f"crawl: {pages:,} pages ({lists} lists of {LINKS} new links, {args.hosts} hosts): "
          f"{per_page:,.0f} Ir a page (about {per_page / us:.1f} us at {us:,.0f} Ir/us)")
    calls = {name: (n - before.get(name, [0])[0]) / max(1, pages) for name, (n, _) in after.items()}
    print("Redis commands a crawled page (INFO commandstats; those called from the scripts included):",
          ", ".join(f"{name} {n:.2f}" for name, n in sorted(calls.items(), key=lambda kv: -kv[1]) if n >= 0.01
                    and name not in ("info", "(reads)")))
    print(f"alone: pop {pop_ir:,.0f} Ir a URL (64 a pop), status {status_ir:,.0f} Ir a URL (64 a call), "
          f"add {add_ir:,.0f} Ir a new link (50 a call)")
    print(f"RESULT redis_ir_per_page={per_page:.0f} redis_ir_us_per_page={per_page / us:.1f} "
          f"pop_ir_per_url={pop_ir:.0f} status_ir_per_url={status_ir:.0f} add_ir_per_link={add_ir:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=3060, help="pages in the crawl phase")
    parser.add_argument("--hosts", type=int, default=1000, help="hosts the URLs are spread over")
    parser.add_argument("--components", type=int, default=1280, help="URLs popped, acked (and links added) alone")
    parser.add_argument("--delay", type=float, default=0.0, help="politeness delay of every host (script seconds: "
                        "the crawl phase's clock moves 1 ms a round)")
    parser.add_argument("--fail-every", type=int, default=0, help="one fetch in N answers 503 (a failure "
                        "the pool retries, up to failure_threshold): failures kept in P fails meanwhile")
    parser.add_argument("--known-urls", type=int, default=0, help="[pool] redis_known_urls")
    parser.add_argument("--profile", metavar="DIR", help="keep each phase's callgrind dump in DIR "
                        "(callgrind_annotate DIR/callgrind.crawl; a redis-server built with symbols names functions)")
    parser.add_argument("--ir-per-us", type=float, default=8000.0, help="instructions a microsecond, for the guide")
    args = parser.parse_args()
    missing = [tool for tool in ("valgrind", "callgrind_control", "redis-server") if shutil.which(tool) is None]
    if missing:
        sys.exit(f"{', '.join(missing)} not on PATH: apt-get install valgrind redis-server")
    with tempfile.TemporaryDirectory(prefix="bench-redis-ir-") as directory:
        if args.profile:
            os.makedirs(args.profile, exist_ok=True)
        server = Server(directory, args.profile)
        try:
            task.react(driver, (args, server))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
