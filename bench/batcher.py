"""The batcher's throughput: a million detail URLs to two Scrapyd-protocol targets, then again with one killed.

    python bench/batcher.py                  # 1,000,000 URLs, batches of 1000
    python bench/batcher.py --urls 200000

The targets are two separate processes answering ``schedule.json`` the way
Scrapyd does (they record each batch's number and URLs to a file and run
nothing), so the figure is the batcher's: dedup against the LevelDB pool's
seen set, the spool, the POSTs, the acknowledgements.  In the second run one
target is SIGKILLed halfway; the batcher must fail over and lose nothing.
Ends with one ``RESULT`` line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def serve(record: str) -> None:
    """A Scrapyd stand-in: answers schedule.json with "ok" and appends ``batch count`` lines to ``record``."""
    from urllib.parse import parse_qsl

    from twisted.internet import reactor
    from twisted.web import resource, server

    out = open(record, "a", buffering=1)

    class Schedule(resource.Resource):
        isLeaf = True

        def render_POST(self, request):  # type: ignore[no-untyped-def]
            fields = parse_qsl(request.content.read().decode())
            settings = dict(v.split("=", 1) for k, v in fields if k == "setting")
            urls = json.loads(settings["DISTRIBUTED_START_URLS"])
            out.write(f"{dict(fields)['batch']} {len(urls)}\n")
            return b'{"node_name": "stub", "status": "ok", "jobid": "x"}'

    site = server.Site(Schedule())
    site.noisy = False
    port = reactor.listenTCP(0, site, interface="127.0.0.1")
    print(f"LISTENING {port.getHost().port}", flush=True)
    reactor.run()


def start_target(work: Path, name: str) -> tuple[subprocess.Popen, str, Path]:
    record = work / f"{name}.txt"
    child = subprocess.Popen([sys.executable, __file__, "--serve", str(record)], stdout=subprocess.PIPE, text=True)
    port = int(child.stdout.readline().split()[1])
    return child, f"127.0.0.1:{port}", record


def received(records: list[Path]) -> dict[int, int]:
    """batch number -> URLs, over every target's record (a batch accepted twice counts once)."""
    batches: dict[int, int] = {}
    for record in records:
        if record.exists():
            for line in record.read_text().splitlines():
                number, count = line.split()
                batches[int(number)] = int(count)
    return batches


def run(work: Path, total: int, kill_one: bool) -> tuple[float, int, int, int]:
    """Push ``total`` URLs; (URLs acknowledged per second, batches sent, batches lost, URLs lost)."""
    from twisted.internet import defer, reactor, task

    from spiderd.config.sections import BatchSection
    from spiderd.frontier.batcher import Batcher
    from spiderd.core.lifecycle import wait_until
    from spiderd.frontier.pool import open_leveldb_pool

    tag = "killed" if kill_one else "normal"
    targets = [start_target(work, f"{tag}-a"), start_target(work, f"{tag}-b")]
    pool = open_leveldb_pool(str(work / f"pool-{tag}"), reactor)
    config = BatchSection(tuple(t[1] for t in targets), project="bench", spider="shop", size=1000,
                          flush_interval=5, timeout=10)
    batcher = Batcher(reactor, pool, str(work / f"spool-{tag}"), config, retry_first=0.5, retry_max=2)
    outcome: list[float] = []

    @defer.inlineCallbacks
    def push() -> defer.Deferred[None]:
        batcher.startService()
        started = time.perf_counter()
        for base in range(0, total, 500):
            urls = [f"http://shop{i % 50}.example.com/item/{i}.html" for i in range(base, min(base + 500, total))]
            yield batcher.add(urls)
            if kill_one and base == total // 2:
                os.kill(targets[0][0].pid, signal.SIGKILL)
        yield batcher.flush()
        yield wait_until(reactor, batcher.idle, 0.05)
        outcome.append(time.perf_counter() - started)
        yield batcher.stopService()
        pool.close()
        reactor.stop()

    reactor.callWhenRunning(lambda: push().addErrback(lambda f: (f.printTraceback(), reactor.stop())))
    reactor.run()
    for child, _, _ in targets:
        child.kill()
        child.wait()
    got = received([t[2] for t in targets])
    expected_batches = batcher.status()["sent"]
    urls_received = sum(got.values())
    return total / outcome[0], expected_batches, expected_batches - len(got), total - urls_received


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--kill-one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--work", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    if args.work:  # one run in a child process (a reactor runs once per process)
        rate, sent, lost, urls_lost = run(Path(args.work), args.urls, args.kill_one)
        print(json.dumps({"rate": rate, "sent": sent, "lost": lost, "urls_lost": urls_lost}))
        return
    work = Path(tempfile.mkdtemp(prefix="spiderd-bench-batcher-"))
    try:
        results = {}
        for kill in (False, True):
            command = [sys.executable, __file__, "--urls", str(args.urls), "--work", str(work)]
            out = subprocess.run(command + (["--kill-one"] if kill else []), capture_output=True, text=True, check=True)
            results[kill] = json.loads(out.stdout.strip().splitlines()[-1])
            r = results[kill]
            print(f"{'one target killed halfway' if kill else 'two targets':26s} {r['rate']:10,.0f} URLs/s acknowledged, "
                  f"{r['sent']} batches sent, {r['lost']} batches lost, {r['urls_lost']} URLs lost", flush=True)
        normal, killed = results[False], results[True]
        print(f"RESULT urls_per_s={normal['rate']:.0f} batches_sent={normal['sent']} batches_lost={normal['lost']} "
              f"urls_per_s_one_target_killed={killed['rate']:.0f} batches_lost_one_target_killed={killed['lost']}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
