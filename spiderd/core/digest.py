"""The content digest of a page: SHA-1 of the body as fetched (decompressed), base32, as Heritrix and WARC say it.

``sha1:`` then 32 base32 characters (``sha1:2UZR3H5EFHQKW7JMNS6BSPIIWQCFPMRL``): the form of
Heritrix's crawl log, of a WARC record's ``WARC-Payload-Digest`` and of Common Crawl's CDX ``digest``
field, so a digest spiderd wrote can be compared with theirs.  SHA-1 rather than BLAKE2: hashlib's SHA-1
(OpenSSL) runs at ~900 MB/s here, 1.5x ``blake2b`` (about 45 microseconds for a 40 KB page), and it is what
those tools use.  It is not collision-proof against someone who crafts two pages on purpose (SHAttered);
for telling mirror pages apart that risk is one page skipped.
"""

from __future__ import annotations

import base64
import hashlib

PREFIX = "sha1:"
LENGTH = len(PREFIX) + 32  # 37 ASCII characters


def content_digest(body: bytes) -> str:
    """``sha1:BASE32`` of ``body`` (the raw bytes, decompressed, before any decoding)."""
    return PREFIX + base64.b32encode(hashlib.sha1(body).digest()).decode("ascii")


def is_digest(value: object) -> bool:
    """True for a string of :func:`content_digest`'s form."""
    return isinstance(value, str) and len(value) == LENGTH and value.startswith(PREFIX)
