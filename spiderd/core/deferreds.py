"""A Deferred chain's result as a Deferred of its own.

A chain of plain callbacks (no generator) returns the Deferred it began with, and a Deferred whose callback
returned another Deferred is ``called`` while it waits for that one: :func:`apart` gives the callers of such a
chain what ``inlineCallbacks`` gave them, a Deferred that fires once the result is in, whose ``cancel`` cancels
what the chain waits on."""

from __future__ import annotations

from typing import Any, TypeVar

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

T = TypeVar("T")


def apart(d: Deferred[T]) -> Deferred[T]:
    """``d`` itself when its result is in; else a Deferred of its own that fires with it (cancelling it cancels
    ``d``, which forwards the cancel to whatever ``d`` waits on)."""
    if d.called and not d.paused:
        return d
    outer: Deferred[T] = Deferred(lambda _: d.cancel())
    d.addCallbacks(_fire, _fail, callbackArgs=(outer,), errbackArgs=(outer,))
    return outer


def _fire(result: Any, outer: Deferred[Any]) -> None:
    if not outer.called:
        outer.callback(result)


def _fail(failure: Failure, outer: Deferred[Any]) -> None:
    if not outer.called:  # (else it was cancelled, and failed with CancelledError at once)
        outer.errback(failure)
