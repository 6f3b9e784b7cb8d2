"""Crawl counters, and the progress line logged at a steady interval (as Scrapy's LogStats)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Protocol

from twisted.application.service import Service
from twisted.internet import task
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from spiderd.core import status as st

log = Logger()


class CrawlStats:
    """Counters of one crawl; other components read them (progress log, API, metrics)."""

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        self.started = clock.seconds()
        self.counts: Counter[str] = Counter()
        self.statuses: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.sites: dict[str, dict[str, Any]] = {}  # a site's items and empty fields (item_made), by name
        # called with the seconds each fetch took (the API's latency histogram); None: nothing to call
        self.on_elapsed: Callable[[float], Any] | None = None

    def fetched(self, status: int, wire_bytes: int, elapsed: float) -> None:
        """Count one fetch outcome (and pass its duration to ``on_elapsed``, if set)."""
        if self.on_elapsed is not None:
            self.on_elapsed(elapsed)
        self.counts["requests"] += 1
        self.statuses[st.name(status)] += 1
        if status > 0:
            self.counts["pages"] += 1
            self.counts["bytes"] += wire_bytes
        else:
            self.errors[st.name(status)] += 1

    def incr(self, name: str, by: int = 1) -> None:
        self.counts[name] += by

    def item_made(self, site: str, item: dict[str, Any]) -> None:
        """Count an item of ``site`` and each of its fields that came out empty (the Sites view's figures)."""
        figures = self.sites.get(site)
        if figures is None:  # (not setdefault: it would make a dict and a Counter for every item)
            figures = self.sites[site] = {"items": 0, "empty": Counter()}
        figures["items"] += 1
        empty: Counter[str] = figures["empty"]
        for name, value in item.items():
            if value is None or value == "" or value == []:
                empty[name] += 1
            else:
                empty.setdefault(name, 0)

    def snapshot(self) -> dict[str, Any]:
        """Everything, as plain JSON-able values."""
        return {
            "uptime": self._clock.seconds() - self.started,
            "counts": dict(self.counts),
            "statuses": dict(self.statuses),
            "errors": dict(self.errors),
        }


class PoolStats(Protocol):
    """What the progress log asks of the URL pool (its ``IURLPool.stats``)."""

    def stats(self) -> Deferred[dict[str, Any]]: ...


class ProgressLogger(Service):
    """Logs pages, pages/min, items, pool sizes and errors every ``interval`` seconds, and a summary at stop."""

    def __init__(self, stats: CrawlStats, pool: PoolStats, clock: IReactorTime, interval: float = 60.0,
                 extra: dict[str, Callable[[], dict[str, Any]]] | None = None) -> None:
        self._stats = stats
        self._extra = extra or {}
        self._pool = pool
        self._clock = clock
        self._interval = interval
        self._loop = task.LoopingCall(self._tick)
        self._loop.clock = clock
        self._last = (clock.seconds(), 0)

    def startService(self) -> None:
        super().startService()
        self._last = (self._clock.seconds(), self._stats.counts["pages"])
        self._loop.start(self._interval, now=False).addErrback(lambda f: log.failure("progress logger", f))

    def stopService(self) -> Any:
        super().stopService()
        if self._loop.running:
            self._loop.stop()
        return self._summary()

    def _tick(self) -> Any:
        return self._pool.stats().addCallback(self._log_line).addErrback(lambda f: log.failure("progress", f))

    def _log_line(self, pool: dict[str, Any]) -> None:
        now, pages = self._clock.seconds(), self._stats.counts["pages"]
        then, before = self._last
        self._last = (now, pages)
        rate = (pages - before) * 60.0 / max(now - then, 1e-9)
        log.info(
            "Crawled {pages} pages ({rate:.0f} pages/min), {items} items; pool: waiting={waiting} "
            "pending={pending} done={done} failed={failed} hosts={hosts} largest={largest}; errors: {errors}{extra}",
            pages=pages,
            rate=rate,
            items=self._stats.counts["items"],
            waiting=pool["waiting"],
            pending=pool["pending"],
            done=pool["done"],
            failed=pool["failed"],
            hosts=pool["hosts"],
            largest=_largest(pool["max_host"]),
            errors=_brief(self._stats.errors) or "none",
            extra=self._extras(),
        )

    def _extras(self) -> str:
        """``; batches: sent=3 ...; worker: pages=10 ...`` from the other components, flat values only."""
        parts = []
        for name, source in self._extra.items():
            try:
                values = source()
            except Exception:
                log.failure("status of {name}", name=name)
                continue
            flat = ", ".join(f"{k}={v}" for k, v in values.items() if isinstance(v, (int, float)) and v)
            parts.append(f"; {name}: {flat or 'idle'}")
        return "".join(parts)

    def _summary(self) -> Any:
        def line(pool: dict[str, Any]) -> None:
            snap = self._stats.snapshot()
            elapsed = max(snap["uptime"], 1e-9)
            log.info(
                "Summary: {pages} pages in {elapsed:.1f}s ({rate:.1f} pages/s); by the crawler: {items} items, "
                "{stored} pages stored; statuses: {statuses}; pool: waiting={waiting} pending={pending} done={done} "
                "failed={failed}{extra}",
                pages=snap["counts"].get("pages", 0),
                elapsed=elapsed,
                rate=snap["counts"].get("pages", 0) / elapsed,
                items=snap["counts"].get("items", 0),
                stored=snap["counts"].get("stored", 0),
                statuses=_brief(self._stats.statuses),
                extra=self._extras(),
                **{k: pool[k] for k in ("waiting", "pending", "done", "failed")},
            )

        return self._pool.stats().addCallback(line).addErrback(lambda f: log.failure("summary", f))


def _largest(host: Any) -> str:
    """The largest host queue as ``host (count)``, or ``none`` when no host waits."""
    name, count = (list(host) + ["", 0])[:2] if isinstance(host, (list, tuple)) else ("", 0)
    return f"{name} ({count})" if name and count else "none"


def _brief(counter: Counter[str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in counter.most_common())
