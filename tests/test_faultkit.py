"""bench/faultkit.py's reading of a Redis pool after a fault scenario (the "wrong" invariant of bench/faults.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, Generator

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial.unittest import TestCase

from spiderd.engine.politeness import Politeness
from spiderd.frontier.pool.redis.keys import fingerprint_hex
from spiderd.frontier.pool.redis.link import parse_redis_url

from .test_pool_contract import RedisKeys

BENCH = Path(__file__).resolve().parent.parent / "bench"


def faultkit() -> Any:
    spec = importlib.util.spec_from_file_location("faultkit", BENCH / "faultkit.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("faultkit", module)
    spec.loader.exec_module(module)
    return module


class RedisBatchedTests(RedisKeys, TestCase):
    @defer.inlineCallbacks
    def test_only_batched_urls_are_read(self) -> Generator[Any, Any, None]:
        """The URLs recorded as batched are read back, not those waiting, pending or done."""
        pool = yield self.open_redis(Clock(), Politeness(0.0, 10), {})
        self.addCleanup(pool.close)
        batched = [f"http://b.example/{i}" for i in range(5)]
        yield pool.seen_add(batched)
        yield pool.addmany(["http://a.example/1", "http://a.example/2", "http://a.example/3"])
        popped = yield pool.pop(2)
        assert len(popped) == 2
        yield pool.set_status(list(popped)[0], 200)
        address = parse_redis_url(self.redis_url)
        found = faultkit().redis_batched(address.port, self.prefix, self.namespace, address.host)
        assert found == {int(fingerprint_hex(url), 16) for url in batched}
