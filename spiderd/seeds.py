"""Seeds and hubs: put into the pool when the node starts, and again on a reload (SIGHUP)."""

from __future__ import annotations

from typing import Any, Sequence

from twisted.application.service import Service
from twisted.internet import defer
from twisted.logger import Logger

log = Logger()


class SeedService(Service):
    """Adds the configured seeds (known ones are skipped, as any add) and sets the hubs.

    Hubs added at run time (``add_hubs``, from the API) are kept beside the
    configured ones until the process ends: the pool's hub set is replaced as a
    whole, by the configured hubs plus those.  With a page store, every hub is
    also recorded in its ``crawler_hub`` table (seed 000), which keeps them.
    """

    name = "seeds"

    def __init__(self, pool: Any, seeds: Sequence[str], hubs: Sequence[str], hub_refresh_span: float,
                 store: Any = None) -> None:
        self._pool = pool
        self._store = store
        self._seeds = list(seeds)
        self._hubs = list(hubs)
        self._added_hubs: list[str] = []
        self._span = hub_refresh_span

    def startService(self) -> Any:
        super().startService()
        return self.load()

    @defer.inlineCallbacks
    def load(self, seeds: Sequence[str] | None = None, hubs: Sequence[str] | None = None,
             hub_refresh_span: float | None = None) -> Any:
        """(Re)load seeds and hubs into the pool; the values given replace the configured ones first."""
        if seeds is not None:
            self._seeds = list(seeds)
        if hubs is not None:
            self._hubs = list(hubs)
        if hub_refresh_span is not None:
            self._span = hub_refresh_span
        added = yield self._pool.addmany(self._seeds)
        set_seeds = getattr(self._pool, "set_seeds", None)
        if set_seeds is not None:  # Redis: seed 002's spider.seed.urls, for tools that read it
            yield set_seeds(self._seeds)
        yield self._pool.set_hubs(self.hubs, self._span)
        self._record(self.hubs)
        log.info("Seeds: {added} of {count} added; {hubs} hubs every {span}s",
                 added=added, count=len(self._seeds), hubs=len(self.hubs), span=self._span)
        return added

    @property
    def seeds(self) -> list[str]:
        """The configured seeds (the seed timer injects them again)."""
        return list(self._seeds)

    @property
    def hubs(self) -> list[str]:
        """The configured hubs, then those added at run time (without repeats)."""
        return list(dict.fromkeys(self._hubs + self._added_hubs))

    def add_hubs(self, urls: Sequence[str], hub_refresh_span: float | None = None) -> Any:
        """Add hubs at run time (a new ``hub_refresh_span`` applies to every hub); fires with how many are new."""
        before = set(self.hubs)
        self._added_hubs.extend(u for u in urls if u not in before)
        if hub_refresh_span is not None:
            self._span = hub_refresh_span
        new = len(set(self.hubs) - before)
        self._record(self.hubs)
        return self._pool.set_hubs(self.hubs, self._span).addCallback(lambda _: new)

    def _record(self, hubs: list[str]) -> None:
        """Hubs into the store's crawler_hub table, in the background (a store that is down retries)."""
        if self._store is not None and hubs:
            d = defer.maybeDeferred(self._store.save_hubs, hubs)
            d.addErrback(lambda f: log.failure("Hubs not recorded in the page store", f))
