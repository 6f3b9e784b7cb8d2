"""Scrapy's stats lines in a job's log, which ScrapydWeb and LogParser read for a job's progress and its end.

While a job runs, every minute (and once at its start), the line of Scrapy's ``LogStats`` extension::

    Crawled 12 pages (at 7 pages/min), scraped 10 items (at 6 items/min)

and when it ends, the block of Scrapy's stats collector (``Dumping Scrapy stats:`` and a dict, as ``pprint``
writes it), with Scrapy's key names for what they mean here (pages are HTTP answers received, as Scrapy counts
``response_received_count``; items are item lines written) and the job's other counters under ``spiderd/``
(``spiderd/status_timeout``: fetches that got no answer).
"""

from __future__ import annotations

import pprint
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from twisted.internet import task
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

log = Logger()

INTERVAL = 60.0  # seconds between two lines, as Scrapy's LOGSTATS_INTERVAL
STATUS = "status_"  # the job's counter of one HTTP status ("status_200"; "status_timeout" is no answer)


def answers(stats: Mapping[str, int]) -> int:
    """The HTTP answers the job received (its counters of numeric statuses)."""
    return sum(v for k, v in stats.items() if k.startswith(STATUS) and k[len(STATUS):].isdigit())


def crawled(stats: Mapping[str, int], before: tuple[int, int], minutes: float) -> tuple[str, tuple[int, int]]:
    """The "Crawled ..." line of ``stats``, and its (pages, items) for the next line's rates."""
    pages, items = answers(stats), int(stats.get("items", 0))
    page_rate, item_rate = (round((now - then) / minutes) for now, then in ((pages, before[0]), (items, before[1])))
    return (f"Crawled {pages} pages (at {page_rate} pages/min), scraped {items} items (at {item_rate} items/min)",
            (pages, items))


def scrapy_stats(stats: Mapping[str, int], reason: str, start: float, end: float) -> dict[str, Any]:
    """The job's counters as Scrapy's stats collector holds them at the spider's close."""
    out: dict[str, Any] = {}
    for key, value in stats.items():
        if key.startswith(STATUS) and key[len(STATUS):].isdigit():
            out[f"downloader/response_status_count/{key[len(STATUS):]}"] = value
        else:
            out[f"spiderd/{key}"] = value
    out.update({
        "downloader/request_count": int(stats.get("requests", 0)),
        "downloader/response_count": answers(stats),
        "response_received_count": answers(stats),
        "item_scraped_count": int(stats.get("items", 0)),
        "finish_reason": reason,
        "start_time": datetime.fromtimestamp(start, timezone.utc),
        "finish_time": datetime.fromtimestamp(end, timezone.utc),
        "elapsed_time_seconds": round(end - start, 3),
    })
    return out


def dump(stats: Mapping[str, Any]) -> str:
    """The stats block's lines after its first (``pprint``'s form of the dict, as Scrapy logs it)."""
    return pprint.pformat(dict(stats))


class LogStats:
    """The "Crawled ..." line of one running job every :data:`INTERVAL` seconds on ``clock``, the first at start."""

    def __init__(self, clock: IReactorTime, write: Callable[[str], None],
                 stats: Callable[[], Mapping[str, int]]) -> None:
        self._write = write
        self._stats = stats
        self._before = (0, 0)
        self._loop = task.LoopingCall(self._tick)
        self._loop.clock = clock

    def start(self) -> None:
        self._loop.start(INTERVAL, now=True)

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def _tick(self) -> None:
        try:
            line, self._before = crawled(self._stats(), self._before, INTERVAL / 60.0)
            self._write(line)
        except Exception:  # a periodic call that raised would stop for good: say so, and go on
            log.failure("Worker: a job's stats line failed")
