"""Shared fixtures: an injected clock and the pool backends the contract tests run on."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest
from twisted.internet.task import Clock

from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool import KVPool, open_leveldb_pool, open_memory_pool

PoolFactory = Callable[..., Any]


@pytest.fixture
def clock() -> Clock:
    """A Clock standing in for the reactor's time."""
    clock = Clock()
    clock.advance(1_000_000)
    return clock


@pytest.fixture(params=["memory", "leveldb"])
def make_pool(request: pytest.FixtureRequest, clock: Clock, tmp_path: Any) -> Iterator[PoolFactory]:
    """A factory of pools of one backend; calling it again reopens the same storage where it can."""
    opened: list[KVPool] = []

    def factory(delay: float = 0.0, concurrency: int = 1, **options: Any) -> KVPool:
        options.setdefault("pending_threshold", 60.0)
        politeness = Politeness(delay=delay, concurrency=concurrency, overrides=options.pop("overrides", {}))
        if request.param == "memory":
            pool = open_memory_pool(clock, politeness=politeness, **options)
        else:
            for old in opened:
                old.close()
            pool = open_leveldb_pool(str(tmp_path / "pool"), clock, politeness=politeness, **options)
        opened.append(pool)
        return pool

    factory.backend = request.param  # type: ignore[attr-defined]
    yield factory
    for pool in opened:
        pool.close()
