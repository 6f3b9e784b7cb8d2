"""Seeds and hubs: put into the pool when the node starts."""

from __future__ import annotations

from typing import Any, Sequence

from twisted.application.service import Service
from twisted.internet import defer
from twisted.logger import Logger

log = Logger()


class SeedService(Service):
    """Adds the configured seeds (known ones are skipped, as any add) and sets the hubs."""

    def __init__(self, pool: Any, seeds: Sequence[str], hubs: Sequence[str], hub_refresh_span: float) -> None:
        self._pool = pool
        self._seeds = list(seeds)
        self._hubs = list(hubs)
        self._span = hub_refresh_span

    def startService(self) -> Any:
        super().startService()
        return self.load()

    @defer.inlineCallbacks
    def load(self) -> Any:
        """(Re)load seeds and hubs into the pool."""
        added = yield self._pool.addmany(self._seeds)
        yield self._pool.set_hubs(self._hubs, self._span)
        log.info("Seeds: {added} of {count} added; {hubs} hubs every {span}s",
                 added=added, count=len(self._seeds), hubs=len(self._hubs), span=self._span)
