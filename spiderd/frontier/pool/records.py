"""The pool's export format, shared by both backends: one JSON object per entry (JSON lines over HTTP).

``{"url": U, "state": "waiting" | "pending", "kind": "list" | "detail", "failures": N}``
    a URL still to crawl, with its text (a pending one is leased now; imported, it waits again);
``{"fp": "16 hex digits", "state": "done" | "failed" | "batched", "hash": H}``
    a finished URL (a failed one with ``"last_failure": {"reason": R, "at": T, "failures": N}``, as ``why``
    gives it, where the pool kept it).  Neither backend keeps the text of finished URLs, only a
    64-bit fingerprint, and the two compute it differently (``H`` is
    ``farmhash64`` for LevelDB and memory, ``sha1-64`` for Redis), so finished
    entries move only between pools of the same fingerprint.

An export is not a snapshot: entries that change state while it runs may show
up twice or not at all (pause the crawl first for an exact copy).  Not carried:
the hubs (they come from the configuration), failure counts (an imported URL
starts afresh), lease deadlines, crawled sets, validators and the linkbase; an import reads
no ``last_failure`` (it is for people and tools to read).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from spiderd.core.urls import BadURL, canonicalize

FINAL_STATES = ("done", "failed", "batched")
ACTIVE_STATES = ("waiting", "pending")
KINDS = ("list", "detail")
_HEX = re.compile(r"[0-9a-f]{16}")


@dataclass
class Sorted:
    """Records checked and sorted for an import."""

    urls: dict[int, list[str]] = field(default_factory=lambda: {0: [], 1: []})  # prio (0 list, 1 detail) -> URLs
    finals: list[tuple[int, str]] = field(default_factory=list)  # (fingerprint, state)
    rejected: list[tuple[int, str]] = field(default_factory=list)  # (index of the record, reason)


def sort_records(records: Iterable[Any], hash_kind: str, max_url_length: int) -> Sorted:
    """Check each record; URLs are canonicalised; a bad record is rejected with a reason, never raised."""
    out = Sorted()
    for index, record in enumerate(records):
        problem = _sort_one(record, hash_kind, max_url_length, out)
        if problem is not None:
            out.rejected.append((index, problem))
    return out


def _sort_one(record: Any, hash_kind: str, max_url_length: int, out: Sorted) -> str | None:
    if not isinstance(record, dict):
        return "expected a JSON object"
    state = record.get("state")
    if "url" in record:
        if state not in ACTIVE_STATES:
            return f"a URL entry's state must be waiting or pending, got {state!r}"
        kind = record.get("kind", "list")
        if kind not in KINDS:
            return f"kind must be list or detail, got {kind!r}"
        try:
            url = canonicalize(record["url"], max_url_length)
        except BadURL as e:
            return f"bad URL ({e.reason})"
        out.urls[KINDS.index(kind)].append(url)
        return None
    if "fp" in record:
        if state not in FINAL_STATES:
            return f"a fingerprint entry's state must be done, failed or batched, got {state!r}"
        fp = record["fp"]
        if not isinstance(fp, str) or not _HEX.fullmatch(fp):
            return "fp must be 16 lower-case hex digits"
        if record.get("hash") != hash_kind:
            return (f"fingerprint of another kind ({record.get('hash')!r}; this pool uses {hash_kind!r}): "
                    "finished entries move only between pools of the same backend kind")
        out.finals.append((int(fp, 16), state))
        return None
    return "expected a \"url\" or an \"fp\" field"


def url_record(url: str, state: str, prio: int, failures: int) -> dict[str, Any]:
    """The export entry of a waiting or pending URL."""
    return {"url": url, "state": state, "kind": KINDS[prio], "failures": failures}


def final_record(fp: int, state: str, hash_kind: str) -> dict[str, Any]:
    """The export entry of a finished URL (its fingerprint only)."""
    return {"fp": f"{fp:016x}", "state": state, "hash": hash_kind}


def last_failure(reason: str, at: float, failures: int) -> dict[str, Any]:
    """A URL's last failure as ``why`` and the export give it."""
    return {"reason": reason, "at": at, "failures": failures}


def counts(queued: int, offered: int, restored: int, finals: int, rejected: list[tuple[int, str]]) -> dict[str, Any]:
    """What ``import_states`` fires with."""
    return {"queued": queued, "restored": restored, "known": (offered - queued) + (finals - restored),
            "rejected": rejected}
