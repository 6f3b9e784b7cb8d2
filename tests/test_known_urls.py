"""KnownURLs: a node's bounded memory of the URLs the shared pool knows."""

from __future__ import annotations

from twisted.internet.task import Clock

from spiderd.frontier.pool.options import PoolOptions
from spiderd.frontier.pool.redis.known import KnownURLs
from spiderd.frontier.pool.redis.partitioned import make_cluster_pool


def test_unknown_keeps_order_and_counts_skips() -> None:
    known = KnownURLs(10)
    known.remember(["b", "d"], "p:", "1")
    assert known.unknown(["a", "b", "c", "d", "e"]) == ["a", "c", "e"]
    assert known.skipped == 2


def test_least_recently_used_go_first() -> None:
    known = KnownURLs(3)
    known.remember(["a", "b", "c"], "p:", "1")
    known.unknown(["a"])  # used: kept longer than b
    known.remember(["d"], "p:", "1")
    assert known.unknown(["a", "b", "c", "d"]) == ["b"] and len(known) == 3


def test_size_0_remembers_nothing() -> None:
    known = KnownURLs(0)
    known.remember(["a"], "p:", "1")
    assert known.unknown(["a"]) == ["a"] and len(known) == 0


def test_a_new_epoch_of_any_partition_forgets_all() -> None:
    """A partition that lost its data (another epoch) empties the memory; others' epochs are their own."""
    known = KnownURLs(10)
    known.remember(["a"], "p0:", "1")
    known.remember(["b"], "p1:", "7")  # another partition's epoch: nothing lost
    assert known.unknown(["a", "b"]) == []
    known.remember(["c"], "p1:", "8")
    assert known.unknown(["a", "b", "c"]) == ["a", "b"]
    known.remember([], "p0:", "1")
    assert known.unknown(["c"]) == []


def test_a_clusters_partitions_share_one() -> None:
    """The partitions of a cluster pool share one memory of the configured size (not connected: no cluster needed)."""
    pool, _ = make_cluster_pool("redis+cluster://127.0.0.1:1/", Clock(), PoolOptions.of(redis_known_urls=7),
                                prefix="p:")
    assert len({id(part.known) for part in pool.parts}) == 1 and pool.parts[0].known.size == 7
