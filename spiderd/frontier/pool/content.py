"""Content digests seen by the pool (``claim_content``): which URL first gave each page content.

``[items] skip_duplicate_content`` asks the pool, for each detail page, whether
another URL gave the same content (digest, spiderd.core.digest) before: mirror
pages and session-id duplicates then give no second item.  The first URL to
claim a digest holds it for good, across restarts and (Redis) nodes; the same
URL claiming it again (a page fetched again after a crash, or recrawled
unchanged) still holds it, so a claim made before an item line was committed
never costs that item.

- embedded pool (LevelDB, memory): ``Z`` + the digest's 20 bytes -> the URL's
  8-byte fingerprint (29 bytes per distinct content);
- Redis: ``P content:<digest>`` -> the URL's fingerprint, set with ``SET NX``
  (about 100 bytes of Redis memory per distinct content); a duplicate costs
  a second round trip (``GET``), a new page none.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from twisted.internet import defer

from spiderd.core.digest import PREFIX, is_digest
from spiderd.frontier.pool.shared import parsed

if TYPE_CHECKING:
    from spiderd.frontier.pool.redis.channel import RedisChannel

CONTENT = b"Z"


def content_key(digest: str) -> bytes:
    """The embedded pool's key of ``digest``: ``Z`` and the SHA-1's 20 bytes (any other string as it is)."""
    if is_digest(digest):
        return CONTENT + base64.b32decode(digest[len(PREFIX):])
    return CONTENT + digest.encode("utf-8")


class KVContent:
    """KVPool's claim_content over its store ``kv`` (one process owns the store: a read, then a write)."""

    def __init__(self, kv: Any, max_url_length: int) -> None:
        self._kv = kv
        self._max_url_length = max_url_length

    def claim_content(self, digest: str, url: str) -> defer.Deferred[bool]:
        """True if ``url`` holds ``digest`` (claimed it now or before); False if another URL does."""
        u = parsed(url, self._max_url_length)
        if u is None:
            return defer.succeed(True)  # a URL the pool cannot keep: nothing to compare it with
        key, mine = content_key(digest), u.fingerprint.to_bytes(8, "big")
        holder = self._kv.get(key)
        if holder is None:
            batch = self._kv.write_batch()
            batch.put(key, mine)
            batch.write()
            return defer.succeed(True)
        return defer.succeed(bytes(holder) == mine)


class RedisContent:
    """RedisPool's claim_content over its ``channel``: ``SET NX`` over every node sharing the pool."""

    def __init__(self, channel: RedisChannel, max_url_length: int) -> None:
        self._channel = channel
        self._max_url_length = max_url_length

    @defer.inlineCallbacks
    def claim_content(self, digest: str, url: str) -> Any:
        """True if ``url`` holds ``digest`` (claimed it now or before, on any node); False if another URL does."""
        u = parsed(url, self._max_url_length)
        if u is None:
            return True
        key, mine = f"{self._channel.prefix}content:{digest}", str(u.fingerprint)
        if (yield self._channel.execute("SET", key, mine, "NX")) is not None:
            return True
        holder = yield self._channel.execute("GET", key)
        if isinstance(holder, bytes):
            holder = holder.decode()
        return holder is None or holder == mine  # None: removed in between (by hand): nothing to compare with
