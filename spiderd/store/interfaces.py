"""The page store's contract (SQLite, MySQL, MySQL shards)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from zope.interface import Interface

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from spiderd.store.base import ItemRow


class IPageStore(Interface):
    """Where fetched pages go (seed 000's ``crawler_html`` and ``crawler_hub``)."""

    # Read by the crawler and the status API (annotations for type checkers; zope's verifyObject skips them).
    preset: int  # the XZ preset pages are compressed with
    pending: int  # pages accepted but not yet committed: a back-pressure signal
    where: str  # where the pages go, fit for logs (never a password)
    item_table: bool  # each page's item goes in crawler_item too (save's ``item``)

    def save(url: str, urlhash: int, html: bytes, hub: bool = False, compressed: bytes | None = None,
             digest: str | None = None, item: ItemRow | None = None) -> Deferred[None]:
        """Queue a page (and, if ``hub``, its URL as a hub) for a batched write; fires once it is committed.

        ``compressed``, when given, is the page already XZ-compressed at ``preset`` (by a parse worker);
        ``digest``: its content digest (spiderd.core.digest; the ``digest`` column); ``item``: its item's row of
        ``crawler_item``, written in the page's transaction where ``item_table`` is on."""

    def save_hubs(urls: Iterable[str]) -> Deferred[int]:
        """Record hub URLs, ignoring those already stored; fires with the number added."""

    def get(urlhash: int) -> Deferred[tuple[str, bytes] | None]:
        """Fires with (url, html bytes) or None."""

    def count() -> Deferred[int]:
        """Fires with the number of stored pages."""

    def hubs() -> Deferred[list[str]]:
        """Fires with the stored hub URLs, oldest first."""

    def flush() -> Deferred[Any]:
        """Write the queued pages now; fires once each of them is committed or failed."""
