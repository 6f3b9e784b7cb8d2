"""Small helpers shared by the tests."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure

T = TypeVar("T")

BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def rules_of(raw: dict[str, Any]) -> Any:
    """The parse rules (spiderd.fetch.parsepool.parse_rules) of a configuration given as a dict."""
    from spiderd.config.settings import from_dict
    from spiderd.fetch.parsepool import parse_rules

    settings = from_dict(raw)
    return parse_rules(settings.sites, settings.pool, settings.fetch)


def node_toml(sections: dict[str, dict[str, Any]], sites: list[dict[str, Any]]) -> str:
    """A node's configuration file: each of ``sections`` as a table, then each of ``sites`` as a ``[[sites]]`` table
    (a dict within is an inline table)."""
    tables = [(f"[{name}]", keys) for name, keys in sections.items()] + [("[[sites]]", site) for site in sites]
    return "".join(head + "\n" + "".join(f"{_toml_key(k)} = {_toml_value(v)}\n" for k, v in keys.items())
                   for head, keys in tables)


def _toml_key(key: str) -> str:
    return key if BARE_KEY.fullmatch(key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    """JSON's form of a string, number, boolean or list, which TOML reads alike; a dict as an inline table."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)


def result(d: "Deferred[T]") -> T:
    """The result of a Deferred that has already fired (raises its failure otherwise)."""
    box: list[Any] = []
    d.addBoth(box.append)
    assert box, "the Deferred has not fired"
    if isinstance(box[0], Failure):
        box[0].raiseException()
    return box[0]


class TurnClock(Clock):
    """A Clock whose advance runs only the calls due when it starts, as one turn of the reactor does (a plain
    Clock also runs the calls those schedule for now)."""

    def advance(self, amount: float) -> None:
        self.rightNow += amount
        for call in [c for c in self.calls if c.getTime() <= self.seconds()]:
            self.calls.remove(call)
            call.called = 1
            call.func(*call.args, **call.kw)


class ClockedReactor:
    """The real reactor for I/O, with time taken from a Clock: timeouts fire when the test advances it."""

    def __init__(self, reactor: Any, clock: Any) -> None:
        from zope.interface import directlyProvides, providedBy

        self._reactor = reactor
        self.clock = clock
        self.callLater = clock.callLater
        self.seconds = clock.seconds
        self.getDelayedCalls = clock.getDelayedCalls
        directlyProvides(self, providedBy(reactor))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reactor, name)


needs_affinity = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux's sched_setaffinity and 2 CPUs this process may run on",
)


@contextmanager
def pinned_to_one_cpu() -> Iterator[None]:
    """This thread pinned to the first CPU of its affinity (as ``taskset -c`` pins a process), then restored."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)
