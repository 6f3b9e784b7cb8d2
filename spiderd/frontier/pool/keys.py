"""Key and value encoding of the embedded pool (one byte prefix per kind, big-endian integers).

==========================================  =========================================
key                                         value
==========================================  =========================================
``S`` fp                                    state: ``D`` / ``F`` (final), ``B`` (sent in a batch), or
                                            ``W`` failures prio seq, ``P`` failures prio deadline,
                                            or ``D`` prio fetch-ms (done, in a crawled set)
``Q`` host-id prio seq                      failures, [0 hops], then the URL (UTF-8)
``L`` deadline-ms fp                        failures prio, [0 hops], then the URL
``C`` host-id                               waiting count, then the host
``T`` host-id                               new URLs the host took in all (max_urls_per_host)
``H`` fp                                    next-due-ms, then the hub URL
``G``                                       waiting pending done failed seq batched
``N``                                       the last batch number handed out
``R`` domain-id prio fetch-ms fp            the URL (a crawled set: done pages to recrawl)
``K`` fp                                    linkbase: URL, parent URL, anchor, xpath (``\n``-separated)
``J``                                       linkbase entries
``M`` name                                  a checkpoint (``set_statuses``): a count
``E`` fp                                    the last failure: at-ms, failures (1 byte), reason (UTF-8)
``Y`` fp                                    throttled fetches of an active URL (1 byte; ``throttle``)
``V`` fp                                    validators of a hub or recrawled page: Last-Modified (4 bytes,
                                            0: none), then the ETag (ASCII; spiderd.core.conditional.pack)
``Z`` sha1                                  the fingerprint of the URL that first gave this content
                                            (20-byte digest; ``claim_content``, spiderd.frontier.pool.content)
==========================================  =========================================

``fp`` is the 64-bit fingerprint of the canonical URL, ``host-id`` the one of
its host, so a host's waiting URLs sit together and list URLs (prio 0) come
before detail URLs (prio 1).  A done URL costs one 9-byte key and a 1-byte value;
one whose (domain, kind) is recrawled costs a 10-byte state value and a 26-byte
``R`` key holding its URL besides (see :mod:`spiderd.frontier.pool.crawled`).  A URL
whose last fetch failed (retried, or failed for good) has an ``E`` entry: 9 bytes
of key and 9 of value plus its reason (at most 200 characters, about 60 for a
network error), until it is done (a URL added again after failing for good keeps
its entry until it fails again or is done after a failure).  A hub or a page whose (domain, kind) is
recrawled has a ``V`` entry while its last 200 gave an ``ETag`` or a ``Last-Modified``: 9 bytes of key and
4 of value plus the ETag (about 20 characters), with ``[fetch] conditional_get``.  With a link-hop limit
(``[pool] max_hops``, ``[[sites]] max_hops``), a waiting or leased URL found at 1 or more hops from a seed has
its count in its ``Q`` or ``L`` value: a 0 byte (no URL starts with one) and the count, 2 bytes; a seed, a
hub, a URL at hop 0 and a finished URL have none.
"""

from __future__ import annotations

import struct

import farmhash

STATE = b"S"
QUEUE = b"Q"
LEASE = b"L"
HOST = b"C"
HOST_SEEN = b"T"
HUB = b"H"
COUNTERS = b"G"
BATCH_NUMBER = b"N"
CRAWLED = b"R"
LINK = b"K"
LINK_COUNT = b"J"
CHECKPOINT = b"M"
FAILURE = b"E"
THROTTLED = b"Y"
VALIDATORS = b"V"

DONE = b"D"
FAILED = b"F"
BATCHED = b"B"
WAITING = ord("W")
PENDING = ord("P")

_U64 = struct.Struct(">Q")
_ACTIVE = struct.Struct(">cBBQ")  # state, failures, prio, seq-or-deadline
_COUNTERS = struct.Struct(">6Q")
_OLD_COUNTERS = struct.Struct(">5Q")

u64 = _U64.pack
from_u64 = _U64.unpack_from


def host_id(host: str) -> bytes:
    """The 8-byte key of a host."""
    return u64(farmhash.fingerprint64(host))


def state_key(fp: int) -> bytes:
    return STATE + fp.to_bytes(8, "big")


def queue_key(hid: bytes, prio: int, seq: int) -> bytes:
    return QUEUE + hid + bytes((prio,)) + seq.to_bytes(8, "big")


def lease_key(deadline_ms: int, fp: int) -> bytes:
    return LEASE + deadline_ms.to_bytes(8, "big") + fp.to_bytes(8, "big")


def crawled_key(domain_id: bytes, prio: int, fetched_ms: int, fp: int) -> bytes:
    return CRAWLED + domain_id + bytes((prio,)) + fetched_ms.to_bytes(8, "big") + fp.to_bytes(8, "big")


def done_in_crawled_set(prio: int, fetched_ms: int) -> bytes:
    """The state of a done URL that has an ``R`` entry: ``D``, its prio and its fetch time."""
    return DONE + bytes((prio,)) + fetched_ms.to_bytes(8, "big")


def batched_in_crawled_set(prio: int, fetched_ms: int) -> bytes:
    """The state of a URL sent in a batch that has an ``R`` entry: ``B``, its prio and its (last known) fetch
    time (a worker's, or when it was sent)."""
    return BATCHED + bytes((prio,)) + fetched_ms.to_bytes(8, "big")


def in_crawled_set(state: bytes | None) -> bool:
    """Whether ``state`` is that of a done or batched URL with an ``R`` entry."""
    return state is not None and len(state) == 10 and state[:1] in (DONE, BATCHED)


def checkpoint_key(name: str) -> bytes:
    return CHECKPOINT + name.encode()


def failure_key(fp: int) -> bytes:
    return FAILURE + fp.to_bytes(8, "big")


def pack_failure(at: float, failures: int, reason: str) -> bytes:
    """The ``E`` value: when the URL last failed, its failures so far, and why."""
    return int(at * 1000).to_bytes(8, "big") + bytes((min(failures, 255),)) + reason.encode()


def unpack_failure(value: bytes) -> tuple[str, float, int]:
    """(reason, at, failures) of an ``E`` value."""
    return value[9:].decode(errors="replace"), int.from_bytes(value[:8], "big") / 1000.0, value[8]


def throttle_key(fp: int) -> bytes:
    return THROTTLED + fp.to_bytes(8, "big")


def validators_key(fp: int) -> bytes:
    return VALIDATORS + fp.to_bytes(8, "big")


def link_key(fp: int) -> bytes:
    return LINK + fp.to_bytes(8, "big")


def url_value(head: bytes, url: str, hops: int) -> bytes:
    """A ``Q`` (``head``: failures) or ``L`` (failures, prio) value: the URL, after its hop count unless 0."""
    return head + (bytes((0, min(hops, 255))) if hops else b"") + url.encode()


def split_url_value(value: bytes, offset: int) -> tuple[str, int]:
    """(URL, hops) of a ``Q`` (``offset`` 1) or ``L`` (``offset`` 2) value."""
    if len(value) > offset + 1 and value[offset] == 0:
        return value[offset + 2:].decode(), value[offset + 1]
    return value[offset:].decode(), 0


def active(state: int, failures: int, prio: int, number: int) -> bytes:
    """The state value of a waiting (``W``) or pending (``P``) URL."""
    return _ACTIVE.pack(bytes((state,)), min(failures, 255), prio, number)


def parse_active(value: bytes) -> tuple[int, int, int]:
    """(failures, prio, seq-or-deadline) of a ``W`` or ``P`` state value."""
    _, failures, prio, number = _ACTIVE.unpack(value)
    return failures, prio, number


def pack_counters(values: list[int]) -> bytes:
    return _COUNTERS.pack(*values)


def unpack_counters(value: bytes | None) -> list[int]:
    if not value:
        return [0] * 6
    if len(value) == _OLD_COUNTERS.size:
        return [*_OLD_COUNTERS.unpack(value), 0]
    return list(_COUNTERS.unpack(value))


def prefix_end(prefix: bytes) -> bytes | None:
    """The first key after every key that starts with ``prefix`` (None: no such key, all bytes are 0xff)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes((stripped[-1] + 1,))
