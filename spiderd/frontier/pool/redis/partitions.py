"""The partitions of the Redis Cluster pool: their hash tags, which partition a domain belongs to, merged answers.

A partition's tag is chosen so that its slot (CRC16) lies at the middle of its
1/P share of the 16384 slots: a cluster made by ``redis-cli --cluster create``
(contiguous, equal slot ranges per master) then holds P/N partitions on each of
its N masters when N divides P.  The tags are a pure function of P, so every
node finds the same ones.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from twisted.internet import defer

from spiderd.contracts.pool import ExportReader
from spiderd.core.urls import fingerprint, parse, registered_domain
from spiderd.frontier.pool.redis.export import FINGERPRINT
from spiderd.frontier.pool.redis.cluster import SLOTS, key_slot
from spiderd.frontier.pool.shared import STATE_COUNTS, stats_answer

MAX_PARTITIONS = 1024
TAG_SLACK = 4  # slots a tag's slot may lie off the middle of its share


def partition_tags(count: int) -> list[str]:
    """The hash tag of each of ``count`` partitions (``p<index>.<n>``, the first n whose slot is near the middle of
    the partition's share of the slots)."""
    if not 1 <= count <= MAX_PARTITIONS:
        raise ValueError(f"partitions must be between 1 and {MAX_PARTITIONS}, not {count!r}")
    tags = []
    for p in range(count):
        target = (2 * p + 1) * SLOTS // (2 * count)
        n = 0
        while abs(key_slot(f"p{p}.{n}") - target) > TAG_SLACK:
            n += 1
        tags.append(f"p{p}.{n}")
    return tags


def partition_of(text: str, count: int) -> int:
    """The partition of a registered domain (or of any text: a content digest): farmhash fingerprint64 mod count."""
    return fingerprint(text) % count


def url_partition(url: str, count: int, max_length: int) -> int:
    """The partition of a URL's registered domain; a bad URL's is 0 (its pool rejects and counts it)."""
    try:
        return partition_of(registered_domain(parse(url, max_length).host), count)
    except Exception:  # noqa: BLE001  # BadURL, or not a string: rejected by partition 0's pool
        return 0


def stride_order(count: int) -> list[int]:
    """The partitions in the order pops take them: a stride near 0.618 x count and prime to it, so partitions next
    in turn lie far apart in the slots (on different masters) and every one comes once per round."""
    stride = max(1, round(count * 0.618))
    while math.gcd(stride, count) != 1:
        stride += 1
    return [(i * stride) % count for i in range(count)]


def spread(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` shares as even as can be (the first ones one larger)."""
    share, extra = divmod(total, parts)
    return [share + (1 if i < extra else 0) for i in range(parts)]


def merged_stats(answers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``stats()`` over partitions: counts, hosts and hubs summed, the largest host queues of all, rejections, and
    the known-URL memory's skips (one memory for every partition: each answer's figure is the same); the domains
    in turn summed."""
    counts = {name: sum(a[name] for a in answers) for name in STATE_COUNTS}
    largest = sorted((row for a in answers for row in a["largest"]), key=lambda r: (-r[1], r[0]))[:5]
    rejected: Counter[str] = Counter()
    for a in answers:
        rejected.update(a["rejected"])
    return stats_answer(counts, sum(a["hosts"] for a in answers), largest, sum(a["hubs"] for a in answers),
                        rejected, answers[0].get("known_skipped"),
                        in_turn=sum(a.get("hosts_in_turn", 0) for a in answers))


class ChainedExport:
    """Every partition's export in turn; fingerprint records carry ``partition`` (``p/P``), which an import of the
    cluster pool needs to place them (the fingerprint alone does not name the domain)."""

    def __init__(self, readers: Iterable[ExportReader]) -> None:
        self._readers = list(readers)
        self._count = len(self._readers)
        self._index = 0

    def next(self) -> defer.Deferred[list[dict[str, Any]] | None]:
        if self._index >= self._count:
            return defer.succeed(None)
        return self._readers[self._index].next().addCallback(self._read, self._index)

    def _read(self, entries: list[dict[str, Any]] | None, index: int) -> list[dict[str, Any]]:
        if entries is None:
            self._index = index + 1
            return []
        for entry in entries:
            if "fp" in entry:
                entry["partition"] = f"{index}/{self._count}"
        return entries


def import_groups(records: Sequence[Any], count: int, max_length: int) -> tuple[dict[int, list[int]], list[int]]:
    """Record indexes per partition (URLs by their domain, fingerprints by their ``partition``), and the indexes of
    fingerprints without a partition of this layout (rejected)."""
    groups: dict[int, list[int]] = {}
    homeless = []
    for index, record in enumerate(records):
        if isinstance(record, dict) and "url" in record:
            p = url_partition(record["url"], count, max_length)
        elif isinstance(record, dict) and "fp" in record:
            place, _, of = str(record.get("partition", "")).partition("/")
            if place.isdigit() and of == str(count) and int(place) < count:
                p = int(place)
            elif record.get("hash") == FINGERPRINT:
                homeless.append(index)
                continue
            else:
                p = 0  # another kind of fingerprint: partition 0's pool rejects it with its reason
        else:
            p = 0  # junk: partition 0's pool rejects it with its reason
        groups.setdefault(p, []).append(index)
    return groups, homeless


def merged_imports(answers: Sequence[tuple[list[int], dict[str, Any]]], homeless: list[int],
                   count: int) -> dict[str, Any]:
    """``import_states``' answer over partitions (``answers``: each partition's record indexes and answer)."""
    rejected = [(index, f"a finished fingerprint needs its partition (p/{count}) in a Redis Cluster pool: export it "
                        f"from a cluster pool of {count} partitions") for index in homeless]
    total = {"queued": 0, "restored": 0, "known": 0}
    for indexes, answer in answers:
        for name in total:
            total[name] += answer[name]
        rejected += [(indexes[i], why) for i, why in answer["rejected"]]
    return {**total, "rejected": sorted(rejected)}

