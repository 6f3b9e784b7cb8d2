"""The page store's contract (SQLite, MySQL, MySQL shards)."""

from __future__ import annotations

from zope.interface import Interface


class IPageStore(Interface):
    """Where fetched pages go (seed 000's ``crawler_html`` and ``crawler_hub``)."""

    def save(url: str, urlhash: int, html: bytes, hub: bool = False, compressed=None,  # type: ignore[no-untyped-def]
             digest=None):
        """Queue a page (and, if ``hub``, its URL as a hub) for a batched write; fires once it is committed.

        ``compressed``: the page XZ-compressed already; ``digest``: its content digest (the ``digest`` column)."""

    def save_hubs(urls):  # type: ignore[no-untyped-def]
        """Record hub URLs, ignoring those already stored; fires with the number added."""

    def get(urlhash: int):  # type: ignore[no-untyped-def]
        """Fires with (url, html bytes) or None."""

    def count():  # type: ignore[no-untyped-def]
        """Fires with the number of stored pages."""

    def hubs():  # type: ignore[no-untyped-def]
        """Fires with the stored hub URLs, oldest first."""
