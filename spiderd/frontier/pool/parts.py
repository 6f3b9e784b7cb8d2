"""A pool answered through its parts: what the embedded pool (KVPool) and the Redis pool (RedisPool) do alike.

Each backend is made of the same six parts, built over its own shared state
(the embedded pool's KVState, the Redis pool's channel) and handed to
:class:`PartsPool`, which passes each call of the pool's contracts to the part
that answers it.  A backend answers the rest itself: counts, seeds, host
policy, closing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from twisted.internet.defer import Deferred

from spiderd.contracts.pool import ExportReader, IBatchLedger, IURLPoolAdmin
from spiderd.core.conditional import Validators
from spiderd.core.recrawls import Recrawl


class Queues(Protocol):
    """Adding URLs, leasing them, the hubs."""

    def add(self, url: str, always: bool = False, detail: bool = False) -> Deferred[bool]: ...

    def addmany(self, urls: Iterable[str], always: bool = False, detail: bool = False,
                parent: str | None = None) -> Deferred[int]: ...

    def within_hops(self, parent: str, urls: Sequence[str]) -> Deferred[list[str]]: ...

    def pop(self, count: int, hub_percent: int = 50) -> Deferred[dict[str, bool]]: ...

    def set_hubs(self, urls: Iterable[str], refresh_span: float) -> Deferred[None]: ...


class Statuses(Protocol):
    """The status recorder: outcomes, redirect claims, validators, checkpoints."""

    def claim(self, url: str, by: str | None = None) -> Deferred[bool]: ...

    def fetched(self, url: str, elapsed: float | None = None) -> Deferred[None]: ...

    def set_status(self, url: str, status_code: int, reason: str | None = None) -> Deferred[None]: ...

    def throttle(self, url: str, until: float, status_code: int, reason: str | None = None) -> Deferred[None]: ...

    def set_statuses(self, statuses: Iterable[tuple[Any, ...]],
                     checkpoint: tuple[str, int] | None = None) -> Deferred[None]: ...

    def validators(self, url: str) -> Deferred[Validators | None]: ...

    def checkpoint(self, name: str) -> Deferred[int | None]: ...

    def drop_checkpoint(self, name: str) -> Deferred[None]: ...


class Crawled(Protocol):
    """Seed 004: recrawl of the crawled sets, the linkbase, one-shot claims."""

    def recrawl(self, cutoffs: Sequence[tuple[str, str, float]], limit: int) -> Deferred[int]: ...

    def recrawl_batched(self, cutoffs: Sequence[tuple[str, str, float]], limit: int) -> Deferred[list[Recrawl]]: ...

    def batched_fetched(self, pages: Iterable[Recrawl]) -> Deferred[int]: ...

    def add_links(self, parent: str, urls: Sequence[str], anchors: Sequence[str] = (),
                  xpaths: Sequence[str] = ()) -> Deferred[int]: ...

    def claim_once(self, name: str, ttl: float) -> Deferred[bool]: ...


class Content(Protocol):
    """Content digests: which URL first gave each page content."""

    def claim_content(self, digest: str, url: str) -> Deferred[bool]: ...


class PartsPool:
    """The pool's contracts, each call passed to the part that answers it: ``queues``, ``statuses`` (the status
    recorder), ``ledger`` (the batch ledger), ``crawled`` (seed 004), ``content`` (digests), ``admin``."""

    def __init__(self, queues: Queues, statuses: Statuses, ledger: IBatchLedger, crawled: Crawled, content: Content,
                 admin: IURLPoolAdmin) -> None:
        self.queues = queues
        self.statuses = statuses
        self.ledger = ledger
        self.crawled = crawled
        self.content = content
        self.admin = admin

    # -- the queue (IURLQueue), hubs (ISeedLists) -------------------------------------

    def add(self, url: str, always: bool = False, detail: bool = False) -> Deferred[bool]:
        return self.queues.add(url, always, detail)

    def addmany(self, urls: Iterable[str], always: bool = False, detail: bool = False,
                parent: str | None = None) -> Deferred[int]:
        return self.queues.addmany(urls, always, detail, parent)

    def within_hops(self, parent: str, urls: Sequence[str]) -> Deferred[list[str]]:
        return self.queues.within_hops(parent, urls)

    def set_hubs(self, urls: Iterable[str], refresh_span: float) -> Deferred[None]:
        return self.queues.set_hubs(urls, refresh_span)

    # -- statuses and pops (ILeases), checkpoints (ICheckpoints) ----------------------

    def pop(self, count: int, hub_percent: int = 50) -> Deferred[dict[str, bool]]:
        return self.queues.pop(count, hub_percent)

    def claim(self, url: str, by: str | None = None) -> Deferred[bool]:
        return self.statuses.claim(url, by)

    def fetched(self, url: str, elapsed: float | None = None) -> Deferred[None]:
        return self.statuses.fetched(url, elapsed)

    def set_status(self, url: str, status_code: int, reason: str | None = None) -> Deferred[None]:
        return self.statuses.set_status(url, status_code, reason)

    def throttle(self, url: str, until: float, status_code: int, reason: str | None = None) -> Deferred[None]:
        return self.statuses.throttle(url, until, status_code, reason)

    def set_statuses(self, statuses: Iterable[tuple[Any, ...]],
                     checkpoint: tuple[str, int] | None = None) -> Deferred[None]:
        return self.statuses.set_statuses(statuses, checkpoint)

    def validators(self, url: str) -> Deferred[Validators | None]:
        return self.statuses.validators(url)

    def checkpoint(self, name: str) -> Deferred[int | None]:
        return self.statuses.checkpoint(name)

    def drop_checkpoint(self, name: str) -> Deferred[None]:
        return self.statuses.drop_checkpoint(name)

    # -- the batch ledger (IBatchLedger) ----------------------------------------------

    def seen_filter(self, urls: Iterable[str]) -> Deferred[list[str]]:
        return self.ledger.seen_filter(urls)

    def seen_add(self, urls: Iterable[str]) -> Deferred[int]:
        return self.ledger.seen_add(urls)

    def next_batch(self, count: int = 1) -> Deferred[int]:
        return self.ledger.next_batch(count)

    # -- recrawl (IRecrawl), linkbase (ILinkbase), claims (IClaims) -------------------

    def recrawl(self, cutoffs: Sequence[tuple[str, str, float]], limit: int) -> Deferred[int]:
        return self.crawled.recrawl(cutoffs, limit)

    def recrawl_batched(self, cutoffs: Sequence[tuple[str, str, float]], limit: int) -> Deferred[list[Recrawl]]:
        return self.crawled.recrawl_batched(cutoffs, limit)

    def batched_fetched(self, pages: Iterable[Recrawl]) -> Deferred[int]:
        return self.crawled.batched_fetched(pages)

    def add_links(self, parent: str, urls: Sequence[str], anchors: Sequence[str] = (),
                  xpaths: Sequence[str] = ()) -> Deferred[int]:
        return self.crawled.add_links(parent, urls, anchors, xpaths)

    def claim_once(self, name: str, ttl: float) -> Deferred[bool]:
        return self.crawled.claim_once(name, ttl)

    def claim_content(self, digest: str, url: str) -> Deferred[bool]:
        return self.content.claim_content(digest, url)

    # -- admin (IURLPoolAdmin) --------------------------------------------------------

    def why(self, url: str) -> Deferred[dict[str, Any]]:
        return self.admin.why(url)

    def hosts(self, limit: int = 50) -> Deferred[list[dict[str, Any]]]:
        return self.admin.hosts(limit)

    def export(self, chunk: int = 1000) -> ExportReader:
        return self.admin.export(chunk)

    def import_states(self, records: Iterable[Any]) -> Deferred[dict[str, Any]]:
        return self.admin.import_states(records)
