"""``GET /api/export`` and ``POST /api/import``: the pool as JSON lines, a chunk per cooperator step.

The export never holds the pool in memory and never blocks the reactor for
long: each step reads one chunk from the pool's reader and writes it; the
response is a streaming producer, so a slow client pauses the steps.  An
error after the first line cannot change the status code any more: the
stream then ends with a line ``{"error": "..."}``.  The import reads the
request body (capped by the site) line by line, a chunk per step.
"""

from __future__ import annotations

import json
from itertools import islice
from typing import IO, Any, Callable, Iterator

from twisted.internet import defer, task
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.server import Request

from spiderd.contracts.pool import ExportReader, IURLPoolAdmin
from spiderd.core import jsontext

log = Logger()

CHUNK = 1000
MAX_REJECTED_SHOWN = 100


def _line(record: dict[str, Any]) -> bytes:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


class ExportStream:
    """Writes one export to one request; a push producer over a cooperative task."""

    def __init__(self, reader: ExportReader, request: Request, cooperator: task.Cooperator) -> None:
        self._reader = reader
        self._request = request
        self._cooperator = cooperator
        self._task: Any = None  # the CooperativeTask, from start
        self._over = False
        self._gone = False
        self.lines = 0

    def start(self) -> None:
        self._request.setHeader(b"Content-Type", b"application/x-ndjson; charset=utf-8")
        self._request.notifyFinish().addErrback(self._lost)
        self._task = self._cooperator.cooperate(self._steps())
        self._request.registerProducer(self, True)
        self._task.whenDone().addCallbacks(self._done, self._failed)

    def _steps(self) -> Iterator[defer.Deferred[Any]]:
        while not self._over and not self._gone:
            yield self._reader.next().addCallback(self._write)

    def _write(self, records: list[dict[str, Any]] | None) -> None:
        if records is None:
            self._over = True
        elif records and not self._gone:
            self.lines += len(records)
            self._request.write(b"".join(map(_line, records)))

    def _done(self, _: Any) -> None:
        if not self._gone:
            self._request.unregisterProducer()
            self._request.finish()
            log.debug("API: exported {lines} entries", lines=self.lines)

    def _failed(self, failure: Failure) -> None:
        if self._gone:
            return
        log.failure("API: the export failed after {lines} entries", failure, lines=self.lines)
        self._request.write(_line({"error": f"the export failed: {failure.getErrorMessage()}"}))
        self._request.unregisterProducer()
        self._request.finish()

    def _lost(self, _: Any) -> None:
        self._gone = True
        self.stopProducing()

    # IPushProducer
    def pauseProducing(self) -> None:
        _quietly(self._task.pause)

    def resumeProducing(self) -> None:
        _quietly(self._task.resume)

    def stopProducing(self) -> None:
        self._gone = True
        _quietly(self._task.stop)


def _quietly(call: Callable[[], object]) -> None:
    try:
        call()
    except (task.TaskFinished, task.NotPaused):
        pass


def import_lines(pool: IURLPoolAdmin, body: IO[bytes], cooperator: task.Cooperator) -> defer.Deferred[dict[str, Any]]:
    """Read JSON lines from ``body`` and hand them to ``pool.import_states`` a chunk at a time; fires with totals."""
    totals: dict[str, Any] = {"lines": 0, "queued": 0, "restored": 0, "known": 0, "rejected_count": 0, "rejected": []}

    def reject(line: int, reason: str) -> None:
        totals["rejected_count"] += 1
        if len(totals["rejected"]) < MAX_REJECTED_SHOWN:
            totals["rejected"].append({"line": line, "reason": reason})

    def add(answer: dict[str, Any], numbers: list[int]) -> None:
        for key in ("queued", "restored", "known"):
            totals[key] += answer[key]
        for index, reason in answer["rejected"]:
            reject(numbers[index], reason)

    def steps() -> Iterator[Any]:
        number = 0
        while True:
            lines = list(islice(body, CHUNK))
            if not lines:
                return
            records, numbers = [], []
            for raw in lines:
                number += 1
                if not raw.strip():
                    continue
                try:
                    records.append(jsontext.loads(raw))
                    numbers.append(number)
                except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
                    reject(number, f"not JSON: {e}")
            totals["lines"] = number
            if records:
                yield pool.import_states(records).addCallback(add, numbers)

    return cooperator.cooperate(steps()).whenDone().addCallback(lambda _: totals)
