"""Exporting the embedded pool: its entries read by key range, a chunk at a time (format: :mod:`.records`)."""

from __future__ import annotations

from typing import Any

from twisted.internet import defer

from spiderd.frontier.pool import keys as k
from spiderd.frontier.pool import records as rec

FINGERPRINT = "farmhash64"  # what the export calls this pool's fingerprints (farmhash fingerprint64)
_FINAL_STATES = {k.DONE: "done", k.FAILED: "failed", k.BATCHED: "batched"}


class KVExport:
    """Reads the pool's entries ``chunk`` at a time, each call going on after the last key it read.

    Waiting URLs come from the queues (``Q``), pending ones from the leases
    (``L``), finished fingerprints from the states (``S``).  No iterator stays
    open between calls, so the pool goes on changing meanwhile (see :mod:`.records`).
    """

    _RANGES = (k.QUEUE, k.LEASE, k.STATE)

    def __init__(self, kv: Any, chunk: int = 1000) -> None:
        self._kv = kv
        self._chunk = chunk
        self._range = 0
        self._after: bytes | None = None

    def next(self) -> defer.Deferred[list[dict[str, Any]] | None]:
        """Fires with the next entries (perhaps none yet), or None once everything was read."""
        if self._range >= len(self._RANGES):
            return defer.succeed(None)
        out: list[dict[str, Any]] = []
        scanned = 0
        prefix = self._RANGES[self._range]
        start = self._after + b"\x00" if self._after is not None else prefix
        for key, value in self._kv.iterator(start=start, stop=k.prefix_end(prefix)):
            self._after = key
            entry = _entry(self._kv, prefix, key, value)
            if entry is not None:
                out.append(entry)
            scanned += 1
            if len(out) >= self._chunk or scanned >= 4 * self._chunk:
                return defer.succeed(out)
        self._range += 1
        self._after = None
        return defer.succeed(out)


def _entry(kv: Any, prefix: bytes, key: bytes, value: bytes) -> dict[str, Any] | None:
    if prefix == k.QUEUE:  # Q host-id prio seq -> failures, [0 hops], url (hops are not exported)
        return rec.url_record(k.split_url_value(value, 1)[0], "waiting", key[9], value[0])
    if prefix == k.LEASE:  # L deadline fp -> failures, prio, [0 hops], url
        return rec.url_record(k.split_url_value(value, 2)[0], "pending", value[1], value[0])
    state = _FINAL_STATES.get(value[:1])  # a done URL in a crawled set has more bytes after its D
    if state is None:
        return None
    fp = int.from_bytes(key[1:9], "big")
    record = rec.final_record(fp, state, FINGERPRINT)
    failed = kv.get(k.failure_key(fp)) if state == "failed" else None
    if failed is not None:
        record["last_failure"] = rec.last_failure(*k.unpack_failure(failed))
    return record
