"""The bounded host -> address table of per-IP politeness (the frontier's pool and the worker's slots).

Each host maps to the key of its group (its address, as the caller keys it), the hosts told last at the end;
``trim`` forgets those told longest ago, down to a bound, but never the hosts the caller still needs (a broad
crawl meets millions of hosts once: their addresses must not pile up).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable


class AddressTable(OrderedDict[str, str]):
    """host -> its group's key, in the order told (the last told last)."""

    def tell(self, host: str, key: str | None) -> None:
        """``host`` is in group ``key`` from now on, the last told; None: on its own (forgotten)."""
        if key is None:
            self.pop(host, None)
        else:
            self[host] = key
            self.move_to_end(host)

    def trim(self, kept: int, needed: Callable[[str], bool]) -> None:
        """Forget the hosts told longest ago down to ``kept`` entries, skipping those ``needed(host)`` keeps."""
        excess = len(self) - kept
        if excess > 0:
            for host in list(itertools.islice((h for h in self if not needed(h)), excess)):
                del self[host]
