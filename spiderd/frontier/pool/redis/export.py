"""Exporting the Redis pool a chunk at a time, with cursors (SSCAN, LRANGE, HSCAN, SCAN): format in :mod:`..records`.

Waiting URLs are read from the seed-002 lists of every domain in
``spider.website.domains`` (``.higher``: list, ``.lower``: detail), pending
ones from the lease hash, finished fingerprints from the seen buckets
(``P s:<bucket>``, members ``low bits * 8 + code``).  Nothing is locked: the
pool goes on changing while the export runs.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from twisted.internet import defer

from spiderd.frontier.pool.records import final_record, last_failure, url_record
from spiderd.frontier.pool.redis.keys import KEEP_HASHTABLE, fingerprint_hex

__all__ = ["FINGERPRINT", "RedisExport", "fingerprint_hex", "parse_failure"]

FINGERPRINT = "sha1-64"  # the first 64 bits of the SHA-1 of the canonical URL (the Lua scripts compute it)
_FINAL = {1: "done", 2: "failed", 3: "batched"}
_SUFFIXES = ((0, ".higher"), (1, ".lower"))


def parse_failure(value: str) -> dict[str, Any]:
    """A ``P why`` value (``at failures reason``) as ``why`` and the export give it."""
    at, failures, reason = (value.split(" ", 2) + ["", ""])[:3]
    return last_failure(reason, float(at), int(failures))


class RedisExport:
    """``next()`` fires with the next entries (perhaps none yet), or None once everything was read."""

    def __init__(self, execute: Callable[..., defer.Deferred[Any]], prefix: str, namespace: str, bits: int,
                 chunk: int = 1000) -> None:
        self._execute = execute
        self._prefix = prefix
        self._namespace = namespace
        self._bits = bits
        self._chunk = chunk
        self._phase = 0  # 0 lists, 1 leases, 2 buckets, 3 done
        self._cursor: str | None = None  # None: the phase's scan has not started
        self._lists: list[tuple[str, int]] = []  # (key, prio) still to read
        self._offset = 0
        self._buckets: list[str] = []
        self._bucket_cursor = "0"

    def next(self) -> defer.Deferred[list[dict[str, Any]] | None]:
        step = (self._waiting, self._pending, self._finished)
        if self._phase >= len(step):
            return defer.succeed(None)
        return step[self._phase]()

    def _scan_over(self) -> bool:
        """True (and the next phase begins) once the phase's scan came back to cursor 0."""
        if self._cursor == "0":
            self._phase += 1
            self._cursor = None
            return True
        return False

    @defer.inlineCallbacks
    def _waiting(self) -> Any:
        if not self._lists:
            if self._scan_over():
                return []
            domains_key = self._namespace + "spider.website.domains"
            self._cursor, domains = yield self._execute("SSCAN", domains_key, self._cursor or "0", "COUNT", "100")
            self._lists = [(self._namespace + d + suffix, prio) for d in domains for prio, suffix in _SUFFIXES]
            return []
        key, prio = self._lists[0]
        start = self._offset
        urls = yield self._execute("LRANGE", key, str(start), str(start + self._chunk - 1))
        if len(urls) < self._chunk:
            self._lists.pop(0)
            self._offset = 0
        else:
            self._offset += self._chunk
        return (yield self._records(urls, [prio] * len(urls), "waiting"))

    @defer.inlineCallbacks
    def _pending(self) -> Any:
        if self._scan_over():
            return []
        self._cursor, flat = yield self._execute("HSCAN", self._prefix + "lease", self._cursor or "0",
                                                 "COUNT", str(self._chunk))
        urls, prios = [], []
        for field, record in zip(flat[::2], flat[1::2]):
            if field.startswith("h") or field == KEEP_HASHTABLE[0]:  # a hub hand-out, or no lease at all
                continue
            head, _, rest = record.partition(" ")
            urls.append(rest.partition(" ")[2])
            prios.append(int(head[0]))
        return (yield self._records(urls, prios, "pending"))

    @defer.inlineCallbacks
    def _records(self, urls: list[str], prios: list[int], state: str) -> Any:
        if not urls:
            return []
        failures = yield self._execute("HMGET", self._prefix + "fails", *map(fingerprint_hex, urls))
        return [url_record(u, state, p, int(f or 0)) for u, p, f in zip(urls, prios, failures)]

    @defer.inlineCallbacks
    def _finished(self) -> Any:
        if not self._buckets:
            if self._scan_over():
                return []
            pattern = _glob_escape(self._prefix + "s:") + "*"
            self._cursor, self._buckets = yield self._execute("SCAN", self._cursor or "0", "MATCH", pattern,
                                                              "COUNT", "1000")
            self._bucket_cursor = "0"
            return []
        key = self._buckets[0]
        cursor, members = yield self._execute("SSCAN", key, self._bucket_cursor, "COUNT", str(self._chunk))
        if cursor == "0":
            self._buckets.pop(0)
        self._bucket_cursor = cursor
        try:
            high = int(key[len(self._prefix) + 2 :]) << (64 - self._bits)
        except ValueError:  # a key that only looks like a bucket
            return []
        out = []
        for member in map(int, members):
            state = _FINAL.get(member & 7)
            if state is not None:
                out.append(final_record(high | (member >> 3), state, FINGERPRINT))
        failed = [record for record in out if record["state"] == "failed"]
        if failed:
            reasons = yield self._execute("HMGET", self._prefix + "why", *(record["fp"] for record in failed))
            for record, value in zip(failed, reasons):
                if value:
                    record["last_failure"] = parse_failure(value)
        return out


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)
