"""A real Redis Cluster per test class (started once, stopped at the end, also after a failure), for trial tests."""

from __future__ import annotations

import tempfile
import time
from typing import Any, Callable, Generator

from twisted.internet import defer, reactor, task

from . import services
from .rediscluster import RedisCluster

SETTLE_TIMEOUT = 30.0


class ClusterCase:
    """``self.cluster``: three masters of this class (``replicas`` each), started in setUpClass and stopped in
    tearDownClass."""

    replicas = 0
    server = "redis-server"  # the binary the cluster's nodes run
    cluster: RedisCluster
    _directory: tempfile.TemporaryDirectory[str]

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()  # type: ignore[misc]
        cls.cluster = None  # type: ignore[assignment]
        from .rediscluster import available

        if available() is not None:
            return  # each test skips (or fails under SPIDERD_REQUIRE_SERVICES=1) in setUp
        cls._directory = tempfile.TemporaryDirectory(prefix="spiderd-cluster-")
        cls.cluster = RedisCluster(cls._directory.name, replicas=cls.replicas, server=cls.server).start()

    @classmethod
    def tearDownClass(cls) -> None:
        if cls.cluster is not None:
            cls.cluster.stop()
            cls._directory.cleanup()
        super().tearDownClass()  # type: ignore[misc]

    def setUp(self) -> None:
        services.need_redis_cluster_tools()
        super().setUp()  # type: ignore[misc]
        self.addCleanup(self._masters_up)  # type: ignore[attr-defined]

    def _masters_up(self) -> None:
        """A test that killed a node leaves the next test a whole cluster."""
        for i in range(len(self.cluster.ports)):
            if not self.cluster.running(i):
                self.cluster.restart(i)


@defer.inlineCallbacks
def settle(predicate: Callable[[], bool], what: str, timeout: float = SETTLE_TIMEOUT) -> Generator[Any, Any, None]:
    """Let the reactor run (real network I/O with another process, not a timer of ours) until ``predicate()``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        yield task.deferLater(reactor, 0.01, lambda: None)  # type: ignore[arg-type]
