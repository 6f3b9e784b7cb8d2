"""The embedded pool's crawled sets, linkbase and one-shot claims (seed 004): a part of KVPool.

Crawled sets.  A page whose (registered domain, kind) is recrawled (the
``recrawl`` pairs) keeps, once done, an ``R`` domain-id prio fetch-ms fp key
holding its URL, so the keys of one domain and kind sort by fetch time; its
state becomes ``D`` prio fetch-ms so that the entry can be found and dropped
when the URL is queued again.  That costs a 26-byte key, the URL and 9 more
bytes of state per such page (about 110 bytes for a 70-character URL before
LevelDB's compression; 38 more bytes on disk than a done URL's 16 after it, for
100,000 shop URLs) on top of any done URL's; pages of other domains and kinds
keep nothing more.  ``recrawl`` walks each (domain, kind) range from its
oldest entry up to the cut-off time and puts those pages back in their queues,
like ``add(always=True)``.

Detail pages sent in batches (seed 004's ``mod_detail`` where workers fetch
them) of a domain whose detail pages are recrawled have a set of their own (prio
``SENT``, 2): ``seen_add`` gives such a URL an ``R`` entry scored when it was sent
and the state ``B`` prio time; ``batched_fetched`` (the worker's fetch) moves it to
the fetch's time; ``recrawl_batched`` takes those older than a cut-off and scores
them as sent again now, for the batcher.

Linkbase.  ``K`` fp -> URL, parent URL, anchor text and the link element's
path in the parent (``xpath``, seed 004's linkinfo) of the page that linked to
it first (see :func:`link_value`; entries written before the path was kept
have none, and read with ``xpath`` ""); off unless ``linkbase``; with ``linkbase_max`` it stops
adding once that many entries exist (first discoveries are kept, nothing is
evicted).  Claims (``claim_once``) live in memory: one process owns the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Sequence

from twisted.internet import defer
from zope.interface import implementer

from spiderd.contracts.pool import ILinkbase
from spiderd.core import conditional as cg
from spiderd.core.recrawls import Recrawl
from spiderd.core.deadlines import Deadlines
from spiderd.core.linkinfo import clean_anchor, clean_xpath
from spiderd.core.urls import host_of, registered_domain
from spiderd.frontier.pool import keys as k
from spiderd.frontier.pool.shared import parsed

if TYPE_CHECKING:
    from spiderd.frontier.pool.kvcore import KVState

KINDS = {"list": 0, "detail": 1}
DETAIL = KINDS["detail"]
SENT = 2  # the crawled set (``R`` range) of the detail pages sent in batches, apart from those fetched here
LINK_FIELDS = ("parent", "anchor", "xpath")


def link_value(url: str, parent: str, anchor: str | None, xpath: str | None) -> str:
    """A linkbase entry (both backends): URL, parent, anchor and xpath, one per line; a path that is not one
    line of at most MAX_XPATH characters is left out ("", see :mod:`spiderd.core.linkinfo`)."""
    return "\n".join((url, parent, clean_anchor(anchor), clean_xpath(xpath)))


def link_info(value: str) -> dict[str, str]:
    """``parent``, ``anchor`` and ``xpath`` of a linkbase entry; one written without an xpath has ""."""
    fields = value.split("\n", 3)[1:]
    return dict(zip(LINK_FIELDS, fields + [""] * (len(LINK_FIELDS) - len(fields))))


def parallel(values: Sequence[str], count: int) -> list[str]:
    """``values`` for ``count`` links: cut, or padded with ""."""
    return [*values[:count], *[""] * (count - len(values))]


def recrawl_pairs(pairs: Iterable[tuple[str, str]]) -> dict[str, frozenset[int]]:
    """``{domain: prios}`` from (registered domain, kind) pairs."""
    found: dict[str, set[int]] = {}
    for domain, kind in pairs:
        found.setdefault(domain, set()).add(KINDS[kind])
    return {domain: frozenset(prios) for domain, prios in found.items()}


@implementer(ILinkbase)
class CrawledSets:
    """KVPool's part for seed 004, over the pool's ``state``: crawled sets scored by fetch time (of the
    ``recrawl`` pairs), recrawl, the linkbase (when ``linkbase``), claim_once."""

    def __init__(self, state: KVState, recrawl: Iterable[tuple[str, str]], linkbase: bool, linkbase_max: int) -> None:
        self._state = state
        self._kv = state.kv
        self._clock = state.clock
        self._counters = state.counters
        self.kept = recrawl_pairs(recrawl)  # {registered domain: prios} whose done pages are kept
        self._cursors: dict[bytes, bytes] = {}  # (domain, kind) prefix -> just past the last entry taken
        self._linkbase = linkbase
        self._linkbase_max = linkbase_max or 2**62
        self._links = 0
        self._claims: Deadlines[str] = Deadlines()
        self.resync()

    def resync(self) -> None:
        """The linkbase's count as the store has it, the recrawl walks from the start of their sets (at open,
        and after a write the store refused)."""
        self._links = k.from_u64(self._kv.get(k.LINK_COUNT, k.u64(0)))[0]
        self._cursors.clear()

    # -- crawled sets ----------------------------------------------------------------

    def done_state(self, batch: Any, url: str, host: str, fp: int, prio: int) -> bytes:
        """The done state of a URL, with an ``R`` entry when its domain and kind are recrawled."""
        domain = registered_domain(host) if self.kept else ""
        if prio not in self.kept.get(domain, ()):
            return k.DONE
        fetched_ms = int(self._clock.seconds() * 1000)
        self._put(batch, domain, prio, fetched_ms, fp, url)
        return k.done_in_crawled_set(prio, fetched_ms)

    def batched_state(self, batch: Any, url: str, host: str, fp: int) -> bytes:
        """The state of a detail URL sent in a batch, with an ``R`` entry (scored now) when its domain's detail
        pages are recrawled: ``recrawl_batched`` sends it again once its interval has passed."""
        domain = registered_domain(host) if self.kept else ""
        if DETAIL not in self.kept.get(domain, ()):
            return k.BATCHED
        sent_ms = int(self._clock.seconds() * 1000)
        self._put(batch, domain, SENT, sent_ms, fp, url)
        return k.batched_in_crawled_set(SENT, sent_ms)

    def _put(self, batch: Any, domain: str, prio: int, fetched_ms: int, fp: int, url: str) -> None:
        """Write the ``R`` entry of ``url``; a walk goes back to it if it sorts before where the last one stopped
        (the clock went back)."""
        key = k.crawled_key(k.host_id(domain), prio, fetched_ms, fp)
        batch.put(key, url.encode())
        prefix = key[:10]
        if self._cursors.get(prefix, key) > key:
            self._cursors[prefix] = key

    def recrawled(self, host: str, prio: int) -> bool:
        """True if the pages of ``host``'s registered domain and kind ``prio`` are recrawled (kept in a crawled set)."""
        return bool(self.kept) and prio in self.kept.get(registered_domain(host), ())

    def forget(self, batch: Any, host: str, fp: int, state: bytes) -> None:
        """Drop the ``R`` entry of a done URL being queued again."""
        if len(state) > 1:
            prio, fetched_ms = state[1], int.from_bytes(state[2:], "big")
            batch.delete(k.crawled_key(k.host_id(registered_domain(host)), prio, fetched_ms, fp))

    def recrawl(self, cutoffs: Sequence[tuple[str, str, float]], limit: int) -> defer.Deferred[int]:
        """Queue again up to ``limit`` pages of each (domain, kind) set fetched at or before its cut-off time."""
        batch = self._kv.write_batch()
        slots: dict[str, Any] = {}
        queued = 0
        for domain, kind, cutoff in cutoffs:
            if queued >= limit:
                break
            queued += self._recrawl_range(batch, domain, KINDS[kind], cutoff, limit - queued, slots)
        self._state.commit(batch, slots.values())
        return defer.succeed(queued)

    def _recrawl_range(self, batch: Any, domain: str, prio: int, cutoff: float, limit: int,
                       slots: dict[str, Any]) -> int:
        prefix = k.CRAWLED + k.host_id(domain) + bytes((prio,))
        stop = prefix + k.u64(max(0, int(cutoff * 1000) + 1))
        queued = 0
        for key, value in self._kv.iterator(start=max(prefix, self._cursors.get(prefix, prefix)), stop=stop):
            self._cursors[prefix] = key + b"\x00"
            batch.delete(key)
            fp = int.from_bytes(key[18:], "big")
            if self._kv.get(k.state_key(fp)) != k.done_in_crawled_set(prio, int.from_bytes(key[10:18], "big")):
                continue  # stale: never left by this pool, but harmless
            url = value.decode()
            host = host_of(url)
            slot = slots.get(host) or self._state.slot(host)
            slots[host] = slot
            self._counters[2] -= 1
            self._state.enqueue(batch, url, fp, slot, prio, 0)
            queued += 1
            if queued >= limit:
                break
        return queued

    def recrawl_batched(self, cutoffs: Sequence[tuple[str, str, float]], limit: int) -> defer.Deferred[list[Recrawl]]:
        """Up to ``limit`` detail pages sent in batches, of each domain's set (its cut-off for "detail"), last
        fetched (or sent) at or before the cut-off; each is scored as sent now."""
        batch = self._kv.write_batch()
        now_ms = int(self._clock.seconds() * 1000)
        out: list[Recrawl] = []
        for domain, kind, cutoff in cutoffs:
            if len(out) >= limit:
                break
            if kind == "detail":
                self._batched_range(batch, domain, cutoff, now_ms, limit - len(out), out)
        if out:
            batch.write()
        return defer.succeed(out)

    def _batched_range(self, batch: Any, domain: str, cutoff: float, now_ms: int, limit: int,
                       out: list[Recrawl]) -> None:
        prefix = k.CRAWLED + k.host_id(domain) + bytes((SENT,))
        stop = prefix + k.u64(max(0, int(cutoff * 1000) + 1))
        taken = 0
        for key, value in self._kv.iterator(start=max(prefix, self._cursors.get(prefix, prefix)), stop=stop):
            self._cursors[prefix] = key + b"\x00"
            batch.delete(key)
            fp, fetched_ms = int.from_bytes(key[18:], "big"), int.from_bytes(key[10:18], "big")
            if self._kv.get(k.state_key(fp)) != k.batched_in_crawled_set(SENT, fetched_ms):
                continue  # stale: never left by this pool, but harmless
            url = value.decode()
            self._rescore(batch, domain, fp, url, now_ms)
            out.append(Recrawl(url, fetched_ms / 1000.0, cg.unpack(self._kv.get(k.validators_key(fp)))))
            taken += 1
            if taken >= limit:
                break

    def _rescore(self, batch: Any, domain: str, fp: int, url: str, fetched_ms: int) -> None:
        """A batched page's ``R`` entry and state at ``fetched_ms`` (its old entry is deleted by the caller)."""
        self._put(batch, domain, SENT, fetched_ms, fp, url)
        batch.put(k.state_key(fp), k.batched_in_crawled_set(SENT, fetched_ms))

    def batched_fetched(self, pages: Iterable[Recrawl]) -> defer.Deferred[int]:
        """A worker fetched batched pages: each one kept in a crawled set is scored by its fetch and keeps the
        validators given (with ``conditional_get``; None drops them)."""
        batch = self._kv.write_batch()
        recorded = 0
        for page in pages:
            u = parsed(page.url, self._state.max_url_length)
            state = None if u is None else self._kv.get(k.state_key(u.fingerprint))
            if u is None or state is None or state[:1] != k.BATCHED or len(state) != 10:
                continue
            domain, old_ms = registered_domain(u.host), int.from_bytes(state[2:], "big")
            batch.delete(k.crawled_key(k.host_id(domain), SENT, old_ms, u.fingerprint))
            self._rescore(batch, domain, u.fingerprint, u.url, int(page.fetched_at * 1000))
            if self._state.conditional_get:
                key = k.validators_key(u.fingerprint)
                if page.validators is None:
                    batch.delete(key)
                else:
                    batch.put(key, cg.pack(page.validators))
            recorded += 1
        if recorded:
            batch.write()
        return defer.succeed(recorded)

    # -- linkbase ---------------------------------------------------------------------

    def add_links(self, parent: str, urls: Sequence[str], anchors: Sequence[str] = (),
                  xpaths: Sequence[str] = ()) -> defer.Deferred[int]:
        """Record how ``urls`` were first found (``parent``, anchor text, link path); fires with the number recorded."""
        if not self._linkbase or self._links >= self._linkbase_max:
            return defer.succeed(0)
        batch = self._kv.write_batch()
        added = 0
        for url, anchor, xpath in zip(urls, parallel(anchors, len(urls)), parallel(xpaths, len(urls))):
            u = parsed(url)
            if u is None or self._kv.get(k.link_key(u.fingerprint)) is not None:
                continue
            batch.put(k.link_key(u.fingerprint), link_value(u.url, parent, anchor, xpath).encode())
            added += 1
            if self._links + added >= self._linkbase_max:
                break
        if added:
            self._links += added
            batch.put(k.LINK_COUNT, k.u64(self._links))
            batch.write()
        return defer.succeed(added)

    def link_of(self, fp: int) -> dict[str, str]:
        """``why``'s linkbase part of the URL of fingerprint ``fp`` (nothing when it has no entry)."""
        value = self._kv.get(k.link_key(fp))
        return {} if value is None else link_info(value.decode())

    # -- claims -----------------------------------------------------------------------

    def claim_once(self, name: str, ttl: float) -> defer.Deferred[bool]:
        """True for the first claim of ``name`` within ``ttl`` seconds (one process: no lock to take)."""
        now = self._clock.seconds()
        self._claims.expire(now)  # by a heap of deadlines: one more host's claim costs O(log hosts), not a copy
        if name in self._claims:
            return defer.succeed(False)
        self._claims.set(name, now + ttl)
        return defer.succeed(True)
