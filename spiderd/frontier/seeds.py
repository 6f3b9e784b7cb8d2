"""Seeds and hubs: put into the pool when the node starts, and again on a reload (SIGHUP)."""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Generator, Sequence

from twisted.application.service import Service
from twisted.internet import defer, task
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from spiderd.contracts.pool import ISeedLists
from spiderd.core.blocking import Lane
from spiderd.core.fsutil import write_atomically
from spiderd.core.urllist import URLList
from spiderd.store.interfaces import IPageStore

log = Logger()

SLICE = 100  # seeds added to the pool in one reactor turn (500,000: 5,000 turns; 500 a turn held it 100-250 ms, loaded)


@defer.inlineCallbacks
def add_in_slices(pool: ISeedLists, urls: Sequence[str], clock: IReactorTime,
                  always: bool = False) -> Generator[Deferred[Any], Any, int]:
    """Add ``urls`` to ``pool`` SLICE at a time, a reactor turn between two slices (a list of at most SLICE is
    added at once): a node with hundreds of thousands of seeds answers and fetches while they go in. Fires with
    how many were queued."""
    added = 0
    for start in range(0, len(urls), SLICE):
        if start:
            yield task.deferLater(clock, 0, lambda: None)
        added += yield pool.addmany(urls[start:start + SLICE], always=always)
    return added



class SeedService(Service):
    """Adds the configured seeds (known ones are skipped, as any add) and sets the hubs.

    Hubs added at run time (``add_hubs``, from the API) are kept beside the
    configured ones: the pool's hub set is replaced as a whole, by the configured
    hubs plus those.  With ``state_path``, the added hubs are written there
    (JSON, atomically) before ``add_hubs`` fires, and read back at start, so a
    restart keeps them; that file work runs on ``lane`` (needed with ``state_path``).  With a page store, every hub is also recorded in its
    ``crawler_hub`` table (seed 000).
    """

    name = "seeds"  # type: ignore[assignment]  # Service declares it None

    def __init__(self, pool: ISeedLists, seeds: Sequence[str], hubs: Sequence[str], hub_refresh_span: float,
                 store: IPageStore | None = None, state_path: str | None = None, lane: Lane | None = None,
                 clock: IReactorTime | None = None) -> None:
        if state_path and lane is None:
            raise ValueError("a SeedService with a state_path needs a lane for its file")
        if clock is None:
            from twisted.internet import reactor as clock
        self._clock: IReactorTime = clock  # type: ignore[assignment]
        self._pool = pool
        self._lane = lane
        self._store = store
        self._state_path = state_path
        self.ready: defer.Deferred[Any] | None = None
        self._seeds = URLList.of(seeds)  # compact (hundreds of thousands of seeds), read a slice at a time
        self._hubs = list(hubs)
        self._added_hubs: list[str] = []
        self._span = hub_refresh_span
        self.loaded: list[Callable[[], object]] = []  # told after each load, once the seeds are in the pool

    def startService(self) -> Any:
        """Restore the added hubs, then load; ``ready`` fires once the pool has them (the crawl starts after)."""
        super().startService()
        if self._lane is not None:
            self._lane.start()
        self.ready = self._restore().addCallback(lambda _: self.load())
        self.ready.addErrback(lambda f: log.failure("Seeds and hubs not loaded", f))
        return self.ready

    def stopService(self) -> Any:
        super().stopService()
        if self._lane is not None:
            self._lane.stop()  # a save already asked for is written first

    @defer.inlineCallbacks
    def _restore(self) -> Any:
        if self._state_path and self._lane is not None:
            self._added_hubs = yield self._lane.run(_read_hubs, self._state_path)

    @defer.inlineCallbacks
    def load(self, seeds: Sequence[str] | None = None, hubs: Sequence[str] | None = None,
             hub_refresh_span: float | None = None) -> Generator[Deferred[Any], Any, int]:
        """(Re)load seeds and hubs into the pool; the values given replace the configured ones first."""
        if seeds is not None:
            self._seeds = URLList.of(seeds)
        if hubs is not None:
            self._hubs = list(hubs)
        if hub_refresh_span is not None:
            self._span = hub_refresh_span
        added: int = yield add_in_slices(self._pool, self._seeds, self._clock)
        yield self._pool.set_seeds(self._seeds)  # for the seed timer (Redis: added to seed 002's spider.seed.urls)
        yield self._pool.set_hubs(self.hubs, self._span)
        self._record(self.hubs)
        log.info("Seeds: {added} of {count} added; {hubs} hubs every {span}s",
                 added=added, count=len(self._seeds), hubs=len(self.hubs), span=self._span)
        for hook in self.loaded:
            hook()
        return added

    @property
    def seeds(self) -> list[str]:
        """The configured seeds (given to the pool's ``set_seeds``: the seed timer injects its ``seed_urls()``)."""
        return list(self._seeds)

    @property
    def hubs(self) -> list[str]:
        """The configured hubs, then those added at run time (without repeats)."""
        return list(dict.fromkeys(self._hubs + self._added_hubs))

    @defer.inlineCallbacks
    def add_hubs(self, urls: Sequence[str], hub_refresh_span: float | None = None) -> Generator[Deferred[Any], Any, int]:
        """Add hubs at run time (a new ``hub_refresh_span`` applies to every hub, until the process ends);
        fires with how many are new, once they are saved."""
        before = set(self.hubs)
        new = [u for u in dict.fromkeys(urls) if u not in before]
        self._added_hubs.extend(new)
        if hub_refresh_span is not None:
            self._span = hub_refresh_span
        if new and self._state_path and self._lane is not None:
            data = json.dumps({"added_hubs": self._added_hubs}, indent=0).encode()
            yield self._lane.run(write_atomically, self._state_path, data)
        self._record(new)
        yield self._pool.set_hubs(self.hubs, self._span)
        return len(new)

    def _record(self, hubs: list[str]) -> None:
        """Hubs into the store's crawler_hub table, in the background (a store that is down retries)."""
        if self._store is not None and hubs:
            d = defer.maybeDeferred(self._store.save_hubs, hubs)
            d.addErrback(lambda f: log.failure("Hubs not recorded in the page store", f))


def _read_hubs(path: str) -> list[str]:
    """The hubs saved by ``add_hubs`` (none if the file is missing; a damaged file is logged and set aside)."""
    try:
        with open(path, encoding="utf-8") as f:
            hubs = json.load(f)["added_hubs"]
        if not isinstance(hubs, list) or not all(isinstance(u, str) for u in hubs):
            raise ValueError("added_hubs is not a list of URLs")
        return hubs
    except FileNotFoundError:
        return []
    except (ValueError, KeyError, TypeError, OSError) as e:
        log.error("Hubs added at run time: {path} is unreadable ({why}); moved aside, starting without them",
                  path=path, why=str(e))
        os.replace(path, path + ".bad")
        return []
