"""A URL's place in the seen buckets, computed by the node (hashlib) and passed to the scripts: Lua's
``redis.sha1hex`` and the number-to-string work after it cost Redis several microseconds a URL; and the entries
that keep the pool's small keys out of listpacks."""

from __future__ import annotations

import hashlib

# ``P inflight``, ``P lease`` and ``P leases`` hold about as many entries as there are fetches in flight, ``P
# ready``, ``P waiting`` and ``P next`` as many as there are domains and hosts: up to 128 (Redis's
# hash-max-listpack-entries and zset-max-listpack-entries; ``P lease`` while its records are 64 bytes or shorter:
# short URLs), each is a compact listpack that every HGET, HMGET, HSET, ZADD and ZREM scans from its start (a ZADD
# parses the scores it passes).  An entry longer than 64 bytes (the *-max-listpack-value), written at each node's
# start (RedisPool._keep_encodings), turns each into a hash table or a skiplist for good: a field no script asks
# for (the export skips it); a member at +inf (leases, ready, next: no range of due ones reaches it) or at 0
# (waiting: hosts are read from counts above 0).  Their names hold a '/', which no host or registered domain the
# scripts read from a list entry does.
KEEP_HASHTABLE = ("~/encoding", "this field keeps the hash a hashtable: a listpack is scanned at every HGET and HSET")
KEEP_SKIPLIST = "~/encoding: this member keeps the sorted set a skiplist: a listpack is scanned at every ZADD and ZREM"


def fingerprint_hex(url: str) -> str:
    """The Redis pool's fingerprint of a canonical URL: the first 64 bits of its SHA-1, in hex."""
    return hashlib.sha1(url.encode("utf-8")).hexdigest()[:16]


def located(url: str, prefix: str, bits: int) -> tuple[str, str, int]:
    """``url``'s fingerprint, seen bucket key (``P s:<top bits>``) and member base (the other bits times 8: its
    member for state code ``c`` is ``base + c``, in decimal), as ``locate`` in common.lua computes them."""
    fp = fingerprint_hex(url)
    n = int(fp, 16)
    low = 64 - bits
    return fp, f"{prefix}s:{n >> low}", (n & ((1 << low) - 1)) << 3


def add_keys(url: str, prefix: str, bits: int) -> tuple[str, ...]:
    """add.lua's and seen.lua's fingerprint, seen bucket and five members (state codes 1-5) of ``url``."""
    fp, bucket, base = located(url, prefix, bits)
    return fp, bucket, str(base + 1), str(base + 2), str(base + 3), str(base + 4), str(base + 5)


def status_keys(url: str, prefix: str, bits: int) -> tuple[str, str, str]:
    """status.lua's fingerprint, seen bucket and done member (state code 1) of ``url``."""
    fp, bucket, base = located(url, prefix, bits)
    return fp, bucket, str(base + 1)
