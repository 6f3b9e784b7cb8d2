"""The bounded host tables of politeness (the frontier's pool and the worker's slots): a host's address (per-IP
politeness) and its robots.txt Crawl-delay.

Each host maps to a value (the key of its group: its address, as the caller keys it; or a delay), the hosts told
last at the end;
``trim`` forgets those told longest ago, down to a bound, but never the hosts the caller still needs (a broad
crawl meets millions of hosts once: their addresses must not pile up).

A caller that knows when a host starts and stops being needed ``pin``\\ s it (it leaves the order, and the bound
counts it no more) and ``unpin``\\ s it; ``trim`` then pops the order's head, O(1) a host.  A caller that asks
``needed(host)`` instead has its needed hosts moved to the end of the order as ``trim`` meets them, so none is
looked at twice in one pass.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, overload

V = TypeVar("V")


class AddressTable(Generic[V]):
    """host -> its value (its group's key, a delay), in the order told (the last told last), besides the pinned
    hosts'."""

    def __init__(self) -> None:
        self._order: OrderedDict[str, V] = OrderedDict()  # the hosts trim may forget, told longest ago first
        self._pinned: dict[str, V] = {}

    def __len__(self) -> int:
        return len(self._order) + len(self._pinned)

    def __contains__(self, host: object) -> bool:
        return host in self._order or host in self._pinned

    def __iter__(self) -> Iterator[str]:
        yield from self._pinned
        yield from self._order

    @overload
    def get(self, host: str) -> V | None: ...

    @overload
    def get(self, host: str, default: V) -> V: ...

    def get(self, host: str, default: V | None = None) -> V | None:
        """The value of ``host`` (the key of its group), or ``default``."""
        key = self._pinned.get(host)
        return key if key is not None else self._order.get(host, default)

    def tell(self, host: str, key: V | None, pinned: bool = False) -> None:
        """``host``'s value is ``key`` from now on (it is in group ``key``), the last told; None: forgotten (on
        its own). ``pinned``: the caller needs it (see :meth:`pin`)."""
        if key is None:
            self._order.pop(host, None)
            self._pinned.pop(host, None)
        elif pinned or host in self._pinned:
            self._order.pop(host, None)
            self._pinned[host] = key
        else:
            self._order[host] = key
            self._order.move_to_end(host)

    def pin(self, host: str) -> None:
        """Keep ``host``'s key, whatever ``trim`` does, until :meth:`unpin` (nothing if it has none)."""
        key = self._order.pop(host, None)
        if key is not None:
            self._pinned[host] = key

    def unpin(self, host: str) -> None:
        """``host`` may be forgotten again: it goes to the end of the order, as the last told."""
        key = self._pinned.pop(host, None)
        if key is not None:
            self._order[host] = key

    def trim(self, kept: int, needed: Callable[[str], bool] | None = None) -> None:
        """Forget the hosts told longest ago until ``kept`` are left in the order (the pinned ones besides),
        skipping those ``needed(host)`` keeps (they go to the end)."""
        for _ in range(len(self._order)):
            if len(self._order) <= kept:
                return
            host, key = self._order.popitem(last=False)
            if needed is not None and needed(host):
                self._order[host] = key
