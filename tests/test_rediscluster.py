"""The test harness's Redis Cluster: three real masters that cover every slot, and a master killed and restarted."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import services
from .rediscluster import WAITAOF_SERVER, RedisCluster, waitaof_server


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


def fake_server(tmp_path: Path, version: str) -> str:
    """A script that answers ``--version`` as redis-server ``version`` does."""
    script = tmp_path / f"redis-server-{version}"
    script.write_text(f"#!/bin/sh\necho 'Redis server v={version} sha=00000000:0 malloc=jemalloc-5.3.0 bits=64'\n")
    script.chmod(0o755)
    return str(script)


def test_waitaof_server_is_a_redis_72_or_later_or_a_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$SPIDERD_REDIS_SERVER_72 names the server for "aof" if it is 7.2 or later; else None and why, naming it."""
    recent = fake_server(tmp_path, "7.2.4")
    monkeypatch.setenv(WAITAOF_SERVER, recent)
    assert waitaof_server() == (recent, "")
    old = fake_server(tmp_path, "7.0.15")
    monkeypatch.setenv(WAITAOF_SERVER, old)
    server, why = waitaof_server()
    assert server is None and f"{old} is Redis 7.0" in why and WAITAOF_SERVER in why, why
    monkeypatch.setenv(WAITAOF_SERVER, str(tmp_path / "missing"))
    server, why = waitaof_server()
    assert server is None and "missing" in why, why
