"""RedisPool's part of conditional GET: the validators of the URLs a node popped, and how statuses carry them.

``pop.lua`` hands each URL out with its validators (``P v:<bucket>``), so the
crawler's ``validators(url)`` for a URL just popped costs no round trip; they
wait here until it asks, or until the URL's status is given (at most
MAX_HANDED: a URL popped and never asked for goes first).  Any other URL's are
read with one ``HGET``.  ``status.lua`` takes each status's validators as
text: ``"seconds etag"``, ``""`` (none: dropped where kept) or ``"~"`` (leave
them: conditional GET off).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet import defer

from spiderd.core import conditional as cg
from spiderd.frontier.pool.redis.export import fingerprint_hex
from spiderd.frontier.pool.shared import parsed

MAX_HANDED = 100_000
LEAVE = "~"


class Handed:
    """The validators popped for this node's URLs; ``on`` is the pool's ``conditional_get``."""

    def __init__(self, execute: Callable[..., defer.Deferred[Any]], prefix: str, max_url_length: int,
                 on: bool) -> None:
        self._execute = execute
        self._prefix = prefix
        self._max_url_length = max_url_length
        self.on = on
        self._held: dict[str, str] = {}  # popped URL -> its validators' text ('' none)

    def keep(self, flat: list[Any]) -> None:
        """Hold the validators of a pop's answer (``url, is_hub, validators, ...``); the oldest go past MAX_HANDED."""
        if not self.on:
            return
        held = self._held
        for url, validators in zip(flat[::3], flat[2::3]):
            held[url] = validators
        while len(held) > MAX_HANDED:
            del held[next(iter(held))]

    def forget(self, url: str) -> None:
        """``url``'s status is given: nothing more to hold for it."""
        if self._held:
            self._held.pop(url, None)

    def get(self, url: str) -> defer.Deferred[cg.Validators | None]:
        """The validators kept for ``url``: those its pop gave, or else Redis's."""
        held = self._held.pop(url, None)
        if held is not None:
            return defer.succeed(cg.from_text(held))
        u = parsed(url, self._max_url_length)
        if u is None:
            return defer.succeed(None)
        fp = fingerprint_hex(u.url)
        return self._execute("HGET", f"{self._prefix}v:{int(fp[:3], 16)}", fp).addCallback(cg.from_text)

    def arg(self, validators: cg.Validators | None) -> str:
        """status.lua's validators argument for a status that carries ``validators``."""
        if not self.on:
            return LEAVE
        return "" if validators is None else cg.to_text(validators)
