"""The test harness's Redis Cluster: three real masters that cover every slot, and a master killed and restarted."""

from __future__ import annotations

from pathlib import Path

from . import services
from .rediscluster import RedisCluster


def test_three_masters_cover_every_slot_and_a_killed_master_comes_back(tmp_path: Path) -> None:
    """The cluster starts ok with three masters of contiguous slot ranges; a killed master restarts with its data."""
    services.need_redis_cluster_tools()
    cluster = RedisCluster(tmp_path).start()
    try:
        assert [cluster.master_of(slot) for slot in (0, 5460, 5461, 10922, 10923, 16383)] == [0, 0, 1, 1, 2, 2]
        assert "cluster_slots_assigned:16384" in cluster.cli(cluster.ports[0], "CLUSTER", "INFO")
        port = cluster.ports[cluster.master_of(12182)]  # the slot of "foo"
        assert cluster.cli(port, "SET", "foo", "kept") == "OK"
        cluster.kill(cluster.master_of(12182))
        assert cluster.cli(port, "GET", "foo") == ""
        cluster.restart(cluster.ports.index(port))
        assert cluster.cli(port, "GET", "foo") == "kept"
    finally:
        cluster.stop()
    assert all(cluster.cli(p, "PING") == "" for p in cluster.ports)
