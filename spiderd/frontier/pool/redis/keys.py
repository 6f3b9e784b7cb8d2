"""A URL's place in the seen buckets, computed by the node (hashlib) and passed to the scripts: Lua's
``redis.sha1hex`` and the number-to-string work after it cost Redis several microseconds a URL."""

from __future__ import annotations

import hashlib


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
