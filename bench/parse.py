"""Benchmark of parsing: extract inline, and the parse pool with 1 and 2 children.

Run from the repository root: ``python bench/parse.py [--pages 2000] [--window 32] [--burst 16] [--anchors]``.
It prints pages/s, the parent's CPU time per page and the reactor's lag (a LoopingCall every
10 ms measuring how late it fires), then one ``RESULT key=value ...`` line.

Inline parsing runs ``--burst`` pages per reactor iteration (pages whose fetch finished in the
same iteration); the pool keeps ``--window`` pages in flight.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from twisted.internet import defer, reactor, task  # noqa: E402

from spiderd.fetch.extract import Rules, extract  # noqa: E402
from spiderd.fetch.parsepool import ParsePool, parse_rules  # noqa: E402
from spiderd.config.settings import from_dict  # noqa: E402

SITE_RAW = {
    "parse": {"workers": 0},
    "sites": [
        {
            "name": "shop",
            "allowed_hosts": ["shop.example.com"],
            "list_urls": [r"/c/[a-z-]+(/\?page=\d+)?$", r"/c/[a-z-]+/?(\?|$)"],
            "detail_urls": [r"/p/\d+\.html$"],
            "fields": {
                "title": "css:h1.title::text",
                "price": "//span[@class='price']/text()",
                "tags": {"css": "ul.tags li::text", "all": True},
                "description": "//div[@id='description']",
            },
        }
    ],
}
_WORDS = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore "
    "et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris nisi aliquip"
).split()
_CATEGORIES = ["shoes", "shirts", "hats", "bags", "coats", "socks", "belts", "gloves"]


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def _nav(rng: random.Random) -> str:
    items = "".join(f'<li><a href="/c/{c}/">{c.title()}</a></li>' for c in _CATEGORIES)
    extra = (
        '<li><a href="https://twitter.com/shop">Twitter</a></li>'
        '<li><a href="mailto:help@shop.example.com">Mail</a></li>'
    )
    return f'<nav class="top"><ul>{items}{extra}<li><a href="#content">Skip</a></li></ul></nav>'


def page(rng: random.Random, detail: bool, size: int = 40_000, links: int = 50) -> bytes:
    """One HTML page of about ``size`` bytes with about ``links`` links, list or detail."""
    head = (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Shop</title>'
        '<link rel="stylesheet" href="/static/site.css"><script src="/static/app.js"></script>'
        "<script>window.dataLayer=[];function gtag(){dataLayer.push(arguments)}</script></head><body>"
    )
    products = "".join(
        f'<div class="card"><a href="/p/{rng.randint(1, 10**6)}.html"><img src="/img/{i}.jpg" alt="x">'
        f'<span class="name">{_words(rng, 4)}</span></a><span class="price">{rng.randint(1, 999)}.99</span></div>'
        for i in range(links - 14)
    )
    pager = "".join(f'<a href="/c/shoes/?page={n}">{n}</a>' for n in range(1, 5))
    main = f'<h1 class="title">{_words(rng, 5)}</h1><span class="price">{rng.randint(1, 999)}.00</span>'
    main += '<ul class="tags">' + "".join(f"<li>{rng.choice(_WORDS)}</li>" for _ in range(5)) + "</ul>"
    filler = ""
    while len(head) + len(main) + len(products) + len(filler) < size - 500:
        filler += f'<div class="para"><p>{_words(rng, 40)} <b>{_words(rng, 3)}</b> {_words(rng, 30)}</p></div>\n'
    body = f'<div id="description">{filler}</div>' if detail else filler
    html = f'{head}{_nav(rng)}<main id="content">{main}{body}<section class="grid">{products}</section>'
    html += f'<div class="pager">{pager}</div></main><footer><a href="/about">About</a></footer></body></html>'
    return html.encode("utf-8")


def pages(n: int, seed: int = 1, detail_every: int = 4) -> list[tuple[str, bytes, str]]:
    """``n`` (url, body, kind) triples: mostly list pages, every ``detail_every``-th a detail page."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        detail = detail_every > 0 and i % detail_every == 0
        url = f"https://shop.example.com/p/{i}.html" if detail else f"https://shop.example.com/c/shoes/?page={i}"
        out.append((url, page(rng, detail), "detail" if detail else "list"))
    return out


def cpu() -> float:
    """This process's user+system CPU seconds (children excluded)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def bench_extract(corpus: list[tuple[str, bytes, str]], rules: Rules) -> dict[str, float]:
    """Plain extract() time per page, list and detail pages apart (no reactor)."""
    out = {}
    for kind in ("list", "detail"):
        subset = [p for p in corpus if p[2] == kind]
        start = time.perf_counter()
        for url, body, k in subset:
            extract(url, body, "text/html; charset=utf-8", k, 0.0, 200, rules)
        out[kind] = (time.perf_counter() - start) / len(subset) * 1e6
    return out


class LagMeter:
    """A LoopingCall every 10 ms recording how late each call fires."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._call = task.LoopingCall.withCount(self._tick)
        self._call.clock = reactor
        self._start = 0.0
        self._count = 0

    def start(self) -> None:
        self._start = reactor.seconds()
        self._call.start(0.01, now=False)

    def _tick(self, count: int) -> None:
        self._count += count
        self.lags.append(max(0.0, reactor.seconds() - (self._start + 0.01 * self._count)))

    def stop(self) -> tuple[float, float, float, int]:
        """(max, p99, p50) lag in milliseconds and the number of samples."""
        self._call.stop()
        lags = sorted(self.lags) or [0.0]
        p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
        return lags[-1] * 1000, p99 * 1000, lags[len(lags) // 2] * 1000, len(self.lags)


def run_pool(pool: ParsePool, corpus: list[tuple[str, bytes, str]], window: int, burst: int) -> defer.Deferred[int]:
    """Parse the corpus through the pool (``window`` pages in flight, or ``burst`` per iteration inline); the errors."""
    done: defer.Deferred[None] = defer.Deferred()
    state = {"next": 0, "finished": 0, "errors": 0}

    def finished(result: Any) -> None:
        state["finished"] += 1
        if getattr(result, "error", None) or not hasattr(result, "lists"):
            state["errors"] += 1
        if state["finished"] == len(corpus):
            done.callback(None)
        elif pool.workers:
            feed(1)

    def feed(count: int) -> None:
        for _ in range(count):
            if state["next"] >= len(corpus):
                return
            url, body, kind = corpus[state["next"]]
            state["next"] += 1
            pool.parse(url, body, "text/html; charset=utf-8", kind, 0.0, 200).addBoth(finished)
        if pool.workers == 0 and state["next"] < len(corpus):
            reactor.callLater(0, feed, burst)

    reactor.callLater(0, feed, window if pool.workers else burst)
    return done.addCallback(lambda _: state["errors"])


@defer.inlineCallbacks
def main(args: argparse.Namespace) -> Any:
    settings = from_dict({**SITE_RAW, "pool": {"linkbase": True}} if args.anchors else SITE_RAW)
    corpus = pages(args.pages)
    size = sum(len(b) for _, b, _ in corpus) / len(corpus)
    lists = [extract(u, b, "text/html", k, 0.0, 200, Rules(settings.sites)) for u, b, k in corpus[1:50:4]]
    links = sum(len(p.lists) + len(p.details) + p.skipped for p in lists) / len(lists)
    details = sum(k == "detail" for _, _, k in corpus)
    print(f"corpus: {len(corpus)} pages ({details} detail pages), {size / 1024:.1f} KiB per page, "
          f"{links:.0f} links per list page; {os.cpu_count()} CPUs")
    timings = bench_extract(corpus, Rules(settings.sites, anchors=args.anchors))
    print(f"extract(): {timings['list']:.0f} us per list page, {timings['detail']:.0f} us per detail page")
    figures: dict[str, float] = {"extract_list_us": timings["list"], "extract_detail_us": timings["detail"]}
    for workers, name in ((0, "inline"), (1, "pool1"), (2, "pool2")):
        pool = ParsePool(reactor, parse_rules(settings.sites, settings.pool, settings.fetch), workers)
        pool.startService()
        yield pool.ready()
        meter = LagMeter()
        meter.start()
        cpu0, wall0 = cpu(), time.perf_counter()
        errors = yield run_pool(pool, corpus, args.window, args.burst)
        cpu1, wall1 = cpu(), time.perf_counter()
        lag_max, lag_p99, lag_p50, samples = meter.stop()
        yield pool.stopService()
        rate = len(corpus) / (wall1 - wall0)
        parent_us = (cpu1 - cpu0) / len(corpus) * 1e6
        print(f"{name:>6} (workers={workers}): {rate:7.0f} pages/s, parent CPU {parent_us:6.1f} us/page, "
              f"reactor lag max {lag_max:5.1f} ms, p99 {lag_p99:5.1f} ms, p50 {lag_p50:5.2f} ms "
              f"({samples} samples), errors {errors}")
        figures.update({f"{name}_pages_per_s": rate, f"{name}_parent_cpu_us": parent_us,
                        f"{name}_lag_max_ms": lag_max, f"{name}_lag_p99_ms": lag_p99})
    figures["parent_cpu_us_per_page"] = figures["pool2_parent_cpu_us"]
    print("RESULT " + " ".join(f"{k}={v:.1f}" for k, v in figures.items()))


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--window", type=int, default=32, help="pages in flight through the pool")
    parser.add_argument("--burst", type=int, default=16, help="pages parsed per reactor iteration inline")
    parser.add_argument("--anchors", action="store_true", help="collect anchor texts too ([pool] linkbase = true)")
    args = parser.parse_args()
    outcome: list[Any] = []
    d = main(args)
    d.addBoth(outcome.append).addBoth(lambda _: reactor.stop())
    reactor.run()
    if outcome and hasattr(outcome[0], "raiseException"):
        outcome[0].raiseException()


if __name__ == "__main__":
    cli()
