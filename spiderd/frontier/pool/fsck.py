"""Check an embedded pool's store for consistency (a full scan: for tests and operators, never at start-up).

Every URL is in exactly one state; every waiting URL has exactly one queue
entry and every pending one exactly one lease; per-host counts and the global
counters agree with what is stored.  ``python -m spiderd.frontier.pool.fsck DIR``.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

from spiderd.core.urls import fingerprint, host_of
from spiderd.frontier.pool import keys as k


def check(kv: Any) -> list[str]:
    """Problems found in the store ``kv`` (plyvel DB or MemoryKV); empty when consistent."""
    problems: list[str] = []
    states: dict[int, bytes] = {}
    for key, value in kv.iterator(prefix=k.STATE):
        states[int.from_bytes(key[1:], "big")] = value
    per_host: Counter[bytes] = Counter()
    queued = _check_queue(kv, states, per_host, problems)
    leased = _check_leases(kv, states, problems)
    for fp, value in states.items():
        if value[0] == k.WAITING and fp not in queued:
            problems.append(f"waiting URL {fp} has no queue entry")
        if value[0] == k.PENDING and fp not in leased:
            problems.append(f"pending URL {fp} has no lease")
        if value not in (k.DONE, k.FAILED, k.BATCHED) and value[0] not in (k.WAITING, k.PENDING) and not (
            k.in_crawled_set(value)
        ):
            problems.append(f"URL {fp} has an unknown state {value!r}")
    _check_crawled(kv, states, problems)
    _check_hosts(kv, per_host, problems)
    _check_counters(kv, states, problems)
    return problems


def _check_queue(kv: Any, states: dict[int, bytes], per_host: Counter[bytes], problems: list[str]) -> set[int]:
    queued: set[int] = set()
    for key, value in kv.iterator(prefix=k.QUEUE):
        url = k.split_url_value(value, 1)[0]
        fp = fingerprint(url)
        if fp in queued:
            problems.append(f"{url} is queued twice")
        queued.add(fp)
        per_host[key[1:9]] += 1
        if key[1:9] != k.host_id(host_of(url)):
            problems.append(f"{url} is queued under another host")
        state = states.get(fp)
        if state is None or state[0] != k.WAITING:
            problems.append(f"{url} is queued but its state is {state!r}")
        elif k.parse_active(state)[1:] != (key[9], int.from_bytes(key[10:], "big")):
            problems.append(f"{url}: state and queue entry disagree")
    return queued


def _check_leases(kv: Any, states: dict[int, bytes], problems: list[str]) -> set[int]:
    leased: set[int] = set()
    for key, value in kv.iterator(prefix=k.LEASE):
        fp = int.from_bytes(key[9:], "big")
        if fp in leased:
            problems.append(f"URL {fp} is leased twice")
        leased.add(fp)
        state = states.get(fp)
        if state is None or state[0] != k.PENDING:
            problems.append(f"{k.split_url_value(value, 2)[0]} is leased but its state is {state!r}")
        elif k.parse_active(state)[2] != int.from_bytes(key[1:9], "big"):
            problems.append(f"{k.split_url_value(value, 2)[0]}: state and lease deadline disagree")
    return leased


def _check_crawled(kv: Any, states: dict[int, bytes], problems: list[str]) -> None:
    """Every ``R`` entry matches its URL's done state, and every such state has its entry."""
    entries = set()
    for key, value in kv.iterator(prefix=k.CRAWLED):
        fp, prio, fetched_ms = int.from_bytes(key[18:], "big"), key[9], int.from_bytes(key[10:18], "big")
        entries.add(fp)
        expected = (k.done_in_crawled_set(prio, fetched_ms), k.batched_in_crawled_set(prio, fetched_ms))
        if states.get(fp) not in expected or fingerprint(value.decode()) != fp:
            problems.append(f"crawled entry of {value.decode()} disagrees with its state {states.get(fp)!r}")
    for fp, value in states.items():
        if k.in_crawled_set(value) and fp not in entries:
            problems.append(f"URL {fp} is done or batched in a crawled set but has no entry")


def _check_hosts(kv: Any, per_host: Counter[bytes], problems: list[str]) -> None:
    recorded = {key[1:]: k.from_u64(value)[0] for key, value in kv.iterator(prefix=k.HOST)}
    for hid in set(recorded) | set(per_host):
        if recorded.get(hid, 0) != per_host.get(hid, 0):
            problems.append(f"host {hid.hex()}: count {recorded.get(hid, 0)} but {per_host.get(hid, 0)} queued")


def _check_counters(kv: Any, states: dict[int, bytes], problems: list[str]) -> None:
    counts = Counter(v[:1] for v in states.values())
    actual = [counts[b"W"], counts[b"P"], counts[k.DONE], counts[k.FAILED], counts[k.BATCHED]]
    stored = k.unpack_counters(kv.get(k.COUNTERS))
    stored = stored[:4] + stored[5:]
    if actual != stored:
        problems.append(f"counters (waiting, pending, done, failed, batched) say {stored}, the states say {actual}")


def main(argv: list[str] | None = None) -> int:
    """Check the pool in the directory given; exit 1 if anything is wrong."""
    from spiderd.core import leveldb

    path = (argv or sys.argv[1:])[0]
    db = leveldb.DB(path)
    problems = check(db)
    db.close()
    for problem in problems:
        print(problem)
    print("ok" if not problems else f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
