"""Detail pages recrawled on the deployed path (seed 004's ``mod_detail`` in batches): what a recrawl carries, and
its ``DISTRIBUTED_RECRAWL`` setting, which the batcher writes and a worker reads.

A batch of recrawls names its URLs in ``DISTRIBUTED_START_URLS`` as any batch does (a Scrapyd running a Scrapy
project fetches them as it fetches the others), and in one more setting, a JSON object of URL -> what the pool
kept of its previous fetch::

    DISTRIBUTED_RECRAWL={"https://shop.example/item/1": {"fetched_at": 1700000000.0, "etag": "\\"v1\\"",
                                                       "last_modified": 1699990000}}

``fetched_at`` is the previous fetch (Unix seconds: when a worker last fetched the page, or, if none said, when
it was sent in a batch); ``etag`` and ``last_modified`` (Unix seconds) are the validators of that fetch, each
null where none was kept.  A spiderd worker fetches such a URL conditionally (If-None-Match, If-Modified-Since):
a 304 is done and unchanged, with no item line; a 200's item says ``"recrawl": true`` and
``"previous_fetched_at"``.  Sans I/O.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterable

from spiderd.core import jsontext
from spiderd.core.conditional import MAX_ETAG, Validators, parse_etag

SETTING = "DISTRIBUTED_RECRAWL"
PREFIX = SETTING + "="
_MAX_SECONDS = 2**32 - 1


class RecrawlError(ValueError):
    """A ``DISTRIBUTED_RECRAWL`` value a worker cannot take; the message starts with the setting's name."""


@dataclass(frozen=True, slots=True)
class Recrawl:
    """A page sent again: its URL, its previous fetch (Unix seconds) and the validators kept of it (or None)."""

    url: str
    fetched_at: float
    validators: Validators | None = None

    def entry(self) -> dict[str, Any]:
        """Its value in the setting's object."""
        v = self.validators
        return {"fetched_at": self.fetched_at, "etag": v.etag if v else None,
                "last_modified": v.last_modified if v else None}


def setting_value(recrawls: Iterable[Recrawl]) -> str:
    """The ``DISTRIBUTED_RECRAWL`` value of ``recrawls`` (compact JSON, in their order)."""
    return json.dumps({r.url: r.entry() for r in recrawls}, separators=(",", ":"))


def entry_bytes(recrawl: Recrawl) -> int:
    """What ``recrawl`` adds to the setting, in bytes (its key, its value, the separators)."""
    return len(json.dumps({recrawl.url: recrawl.entry()}, separators=(",", ":")).encode())


def parse(raw: str, max_entries: int) -> dict[str, Recrawl]:
    """The recrawls of a ``DISTRIBUTED_RECRAWL`` value; raises :class:`RecrawlError` naming what is wrong."""
    try:
        value = jsontext.loads(raw)
    except ValueError as e:
        raise RecrawlError(f"{SETTING} is invalid: not JSON ({e})") from None
    if not isinstance(value, dict):
        raise RecrawlError(f'{SETTING} is invalid: expected a JSON object {{"URL": {{"fetched_at": seconds, '
                           '"etag": ..., "last_modified": seconds}}}}')
    if len(value) > max_entries:
        raise RecrawlError(f"{SETTING} is invalid: {len(value)} URLs, at most {max_entries} in one job")
    return {url: _recrawl(url, entry) for url, entry in value.items()}


def _recrawl(url: str, entry: Any) -> Recrawl:
    if not isinstance(entry, dict):
        raise RecrawlError(f"{SETTING} is invalid: the value of {url[:200]!r} is not a JSON object")
    fetched_at = _seconds(entry.get("fetched_at"))
    if fetched_at is None:
        raise RecrawlError(f"{SETTING} is invalid: {url[:200]!r} has no fetched_at (Unix seconds)")
    etag, last_modified = entry.get("etag"), entry.get("last_modified")
    if etag is not None and (not isinstance(etag, str) or parse_etag(etag) is None):
        raise RecrawlError(f"{SETTING} is invalid: the etag of {url[:200]!r} is not an entity tag (printable "
                           f"ASCII without spaces, at most {MAX_ETAG} characters)")
    date = _seconds(last_modified)
    if last_modified is not None and not date:
        raise RecrawlError(f"{SETTING} is invalid: the last_modified of {url[:200]!r} is not Unix seconds")
    validators = None
    if etag is not None or date:
        validators = Validators(etag, int(date) if date else None)
    return Recrawl(url, fetched_at, validators)


def _seconds(value: Any) -> float | None:
    """``value`` as Unix seconds (a finite number from 0 to 2**32 - 1), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value) if 0 <= value <= _MAX_SECONDS else None
