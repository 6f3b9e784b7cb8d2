"""The reactor's lag while a big form body is decoded: in one call, on a thread, or in steps.

    python bench/formlag.py [--rounds 6]

One process, the real reactor: eight TCP connections on loopback ping-pong 100-byte messages (every
turn of the reactor makes system calls, as a crawl's does) and a timer every 5 ms records how late it
runs.  Meanwhile the form of ``bench/hostile.py``'s ``job_60k_urls`` (60,000 start URLs, 3.5 MB of
which 540,000 percent-escapes) is decoded, by turns, four ways:

- ``none``: no decode, 0.2 s of the ping-pong alone (the floor of the machine);
- ``inline``: Twisted's ``http.parse_qs`` in one call on the reactor thread (Twisted's own path);
- ``thread``: urllib's ``parse_qs`` on a thread (the worker's lane before: the decode holds the GIL,
  and the reactor thread waits for it after each of its system calls);
- ``steps``: ``spiderd.core.net.forms.decode_form`` through a ``JsonSite``'s cooperator, a step per
  turn (what the node does now).

Prints each round, then one ``RESULT`` line: the median over the rounds of the largest lag during a
decode (``<way>_lag_max_ms``) and of the decode's time (``<way>_decode_ms``).  The machine's other
work shows in every figure; ``none`` says how much.  Needs nothing beyond ``pip install .``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

from twisted.internet import defer, protocol, reactor, task, threads
from twisted.web.http import parse_qs
from twisted.web.resource import Resource

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from spiderd.core.net.forms import Form, decode_form  # noqa: E402
from spiderd.core.net.serving import JsonSite  # noqa: E402

URLS = [f"http://127.0.0.1:45678/item/{i}.html" for i in range(60_000)]
BODY = urllib.parse.urlencode([("project", "spiderd"), ("spider", "shop"),
                               ("setting", "DISTRIBUTED_START_URLS=" + json.dumps(URLS))]).encode()
WAYS = ("none", "inline", "thread", "steps")


class Echo(protocol.Protocol):
    def dataReceived(self, data: bytes) -> None:
        self.transport.write(data)


class Lag:
    """A timer every 5 ms; ``worst`` is its largest lateness since ``reset``."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._due = time.perf_counter() + 0.005
        reactor.callLater(0.005, self._tick)

    def reset(self) -> None:
        self.worst = 0.0

    def _tick(self) -> None:
        now = time.perf_counter()
        self.worst = max(self.worst, now - self._due)
        self._due = now + 0.005
        reactor.callLater(0.005, self._tick)


def decode(way: str, site: JsonSite) -> defer.Deferred[Any]:
    if way == "none":
        return task.deferLater(reactor, 0.2, lambda: None)
    if way == "inline":
        return defer.succeed(parse_qs(BODY, 1))
    if way == "thread":
        return threads.deferToThread(urllib.parse.parse_qs, BODY, 1)
    form: Form = {}
    return site.steps.coiterate(decode_form(BODY, form)).addCallback(lambda _: form)


@defer.inlineCallbacks
def run(rounds: int) -> Any:
    port = reactor.listenTCP(0, protocol.Factory.forProtocol(Echo), interface="127.0.0.1")
    for _ in range(8):
        client = yield protocol.ClientCreator(reactor, Echo).connectTCP("127.0.0.1", port.getHost().port)
        client.transport.write(b"x" * 100)
    site = JsonSite(Resource(), len(BODY), "bench", "bench", reactor=reactor)
    lag = Lag()
    results: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    for n in range(rounds):
        for way in WAYS:
            yield task.deferLater(reactor, 0.5, lambda: None)
            lag.reset()
            started = time.perf_counter()
            yield decode(way, site)
            took = time.perf_counter() - started
            yield task.deferLater(reactor, 0.012, lambda: None)  # the timer's sample after the decode
            results[way].append((lag.worst * 1000, took * 1000))
        print(f"round {n}: " + "  ".join(f"{way} lag max {results[way][-1][0]:.0f} ms, decode "
                                         f"{results[way][-1][1]:.0f} ms" for way in WAYS), flush=True)
    fields = " ".join(f"{way}_lag_max_ms={statistics.median(r[0] for r in results[way]):.0f} "
                      f"{way}_decode_ms={statistics.median(r[1] for r in results[way]):.0f}" for way in WAYS)
    print(f"RESULT body_bytes={len(BODY)} {fields}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    run(args.rounds).addErrback(lambda f: print(f.getTraceback())).addBoth(lambda _: reactor.stop())
    reactor.run()


if __name__ == "__main__":
    main()
