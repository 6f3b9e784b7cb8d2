"""The pool contract of seed 000, run on every backend."""

from __future__ import annotations

from typing import Any

import pytest
from zope.interface.verify import verifyObject

from spiderd import status
from spiderd.interfaces import IURLPool

from .helpers import result


def drain(pool: Any, count: int = 100) -> dict[str, bool]:
    return result(pool.pop(count))


def test_provides_interface(make_pool: Any) -> None:
    """Every backend provides IURLPool."""
    assert verifyObject(IURLPool, make_pool())


def test_add_dedups_and_pop_leases(make_pool: Any) -> None:
    """A URL is queued once; a popped URL is pending and not queued again."""
    pool = make_pool()
    assert result(pool.add("http://a.example/1")) is True
    assert result(pool.add("http://A.example:80/1#x")) is False
    assert drain(pool) == {"http://a.example/1": False}
    assert result(pool.add("http://a.example/1")) is False
    stats = result(pool.stats())
    assert (stats["waiting"], stats["pending"]) == (0, 1)


def test_done_is_final_unless_always(make_pool: Any) -> None:
    """200 is done; a done URL is not added again, unless always=True."""
    pool = make_pool()
    pool.add("http://a.example/1")
    drain(pool)
    pool.set_status("http://a.example/1", 200)
    assert result(pool.add("http://a.example/1")) is False
    assert result(pool.stats())["done"] == 1
    assert result(pool.add("http://a.example/1", always=True)) is True
    stats = result(pool.stats())
    assert (stats["done"], stats["waiting"]) == (0, 1)


@pytest.mark.parametrize("code", [404, 410, status.ROBOTS_DENIED, status.TOO_LARGE])
def test_final_failures(make_pool: Any, code: int) -> None:
    """404, 410 and spiderd's final codes fail a URL at once."""
    pool = make_pool()
    pool.add("http://a.example/1")
    drain(pool)
    pool.set_status("http://a.example/1", code)
    assert result(pool.stats())["failed"] == 1
    assert drain(pool) == {}
    assert result(pool.add("http://a.example/1")) is False


@pytest.mark.parametrize("code", [500, 503, 403, status.TIMEOUT, status.CONNECT_REFUSED])
def test_retried_until_threshold(make_pool: Any, clock: Any, code: int) -> None:
    """Other codes and network errors are retried failure_threshold times, then final (seed: count > threshold)."""
    pool = make_pool(failure_threshold=3)
    pool.add("http://a.example/1")
    for attempt in range(4):
        assert drain(pool) == {"http://a.example/1": False}, attempt
        pool.set_status("http://a.example/1", code)
        clock.advance(1)
    assert drain(pool) == {}
    stats = result(pool.stats())
    assert (stats["failed"], stats["waiting"], stats["pending"]) == (1, 0, 0)


def test_expired_lease_handed_out_again(make_pool: Any, clock: Any) -> None:
    """A pending URL whose lease expired is handed out again without being re-added."""
    pool = make_pool(pending_threshold=30)
    pool.add("http://a.example/1")
    assert drain(pool) == {"http://a.example/1": False}
    clock.advance(29)
    assert drain(pool) == {}
    clock.advance(2)
    assert drain(pool) == {"http://a.example/1": False}
    pool.set_status("http://a.example/1", 200)
    stats = result(pool.stats())
    assert (stats["pending"], stats["done"], stats["waiting"]) == (0, 1, 0)


def test_late_status_after_expiry(make_pool: Any, clock: Any) -> None:
    """A status arriving after the lease expired still finishes the URL, which leaves the queue."""
    pool = make_pool(pending_threshold=30)
    pool.add("http://a.example/1")
    drain(pool)
    clock.advance(31)
    assert result(pool.next_due()) == 0
    pool.set_status("http://a.example/1", 200)
    assert drain(pool) == {}
    stats = result(pool.stats())
    assert (stats["waiting"], stats["pending"], stats["done"]) == (0, 0, 1)


def test_hubs_once_per_span(make_pool: Any, clock: Any) -> None:
    """Hubs come out flagged, at most once per refresh span, and take at most hub_percent of a pop."""
    pool = make_pool(concurrency=10)
    pool.set_hubs([f"http://h{i}.example/" for i in range(4)], 60)
    pool.addmany([f"http://a.example/{i}" for i in range(10)])
    first = result(pool.pop(4, hub_percent=50))
    assert sum(first.values()) == 2 and len(first) == 4
    for url in first:
        pool.set_status(url, 200)
    second = result(pool.pop(10, hub_percent=50))
    assert sum(second.values()) == 2
    for url in second:
        pool.set_status(url, 200)
    assert sum(result(pool.pop(10)).values()) == 0
    clock.advance(61)
    assert sum(result(pool.pop(10)).values()) == 4


def test_list_before_detail(make_pool: Any) -> None:
    """Within a host, list URLs (the higher queue) come before detail URLs (the lower queue)."""
    pool = make_pool(concurrency=10)
    pool.addmany([f"http://a.example/d{i}" for i in range(3)], detail=True)
    pool.addmany([f"http://a.example/l{i}" for i in range(2)])
    assert list(drain(pool, 2)) == ["http://a.example/l0", "http://a.example/l1"]


def test_delay_and_turns(make_pool: Any, clock: Any) -> None:
    """With a delay, each host gives one URL per delay; a big host does not starve a small one."""
    pool = make_pool(delay=2.0)
    pool.addmany([f"http://big.example/{i}" for i in range(1000)])
    pool.addmany(["http://small.example/1", "http://small.example/2"])
    popped = drain(pool)
    assert sorted(popped) == ["http://big.example/0", "http://small.example/1"]
    for url in popped:
        pool.set_status(url, 200)
    assert drain(pool) == {}
    assert result(pool.next_due()) == pytest.approx(2.0)
    clock.advance(2)
    assert sorted(drain(pool)) == ["http://big.example/1", "http://small.example/2"]


def test_concurrency_without_delay(make_pool: Any) -> None:
    """A delay of 0 with concurrency 64 hands out 64 URLs of one host at once, and more as they finish."""
    pool = make_pool(delay=0.0, concurrency=64)
    pool.addmany([f"http://one.example/{i}" for i in range(200)])
    first = drain(pool, 100)
    assert len(first) == 64
    assert drain(pool, 100) == {}
    for url in list(first)[:10]:
        pool.set_status(url, 200)
    assert len(drain(pool, 100)) == 10


def test_crawl_delay_raises_host_delay(make_pool: Any, clock: Any) -> None:
    """A robots.txt Crawl-delay raises a host's delay above the configured one."""
    pool = make_pool(delay=0.0, concurrency=4)
    pool.set_host_delay("a.example", 5.0)
    pool.addmany([f"http://a.example/{i}" for i in range(5)])
    assert len(drain(pool)) == 1
    clock.advance(4.9)
    assert drain(pool) == {}
    clock.advance(0.2)
    assert len(drain(pool)) == 1


def test_per_host_overrides(make_pool: Any) -> None:
    """Configured per-host concurrency applies to that host only."""
    pool = make_pool(concurrency=1, overrides={"fast.example": (0.0, 3)})
    pool.addmany([f"http://fast.example/{i}" for i in range(5)] + [f"http://slow.example/{i}" for i in range(5)])
    popped = drain(pool)
    assert sum(u.startswith("http://fast") for u in popped) == 3
    assert sum(u.startswith("http://slow") for u in popped) == 1


def test_bad_input_rejected_and_counted(make_pool: Any) -> None:
    """Bad URLs never raise: they are rejected with a reason and counted."""
    pool = make_pool()
    bad = ["ftp://a.example/", "http:///x", "x" * 5000, "http://a.example:0x50/", "", None, 42]
    assert result(pool.addmany(bad)) == 0
    assert result(pool.add("javascript:void(0)")) is False
    pool.set_status("mailto:x@y", 200)
    rejected = result(pool.stats())["rejected"]
    assert sum(rejected.values()) == len(bad) + 2
    assert {"bad-scheme", "no-host", "too-long", "not-a-string"} <= set(rejected)


def test_addmany_accepts_a_single_string(make_pool: Any) -> None:
    """addmany with a str adds that one URL (the seed warns and does the same)."""
    pool = make_pool()
    assert result(pool.addmany("http://a.example/1")) == 1


def test_status_of_redirect_target(make_pool: Any) -> None:
    """A status for a URL the pool never handed out (a redirect target) records it, and takes it out of the queue."""
    pool = make_pool()
    pool.add("http://a.example/target")
    pool.set_status("http://a.example/target", 200)
    pool.set_status("http://b.example/unknown", 200)
    assert drain(pool) == {}
    stats = result(pool.stats())
    assert (stats["done"], stats["waiting"]) == (2, 0)


def test_size_empty_and_max_host(make_pool: Any) -> None:
    """size, empty and the largest host follow the waiting URLs."""
    pool = make_pool()
    assert result(pool.empty()) is True
    pool.addmany([f"http://a.example/{i}" for i in range(3)] + ["http://b.example/1"])
    assert result(pool.size()) == 4
    assert result(pool.empty()) is False
    stats = result(pool.stats())
    assert stats["max_host"] == ["a.example", 3] and stats["hosts"] == 2


def test_why(make_pool: Any) -> None:
    """why() tells a URL's state, failures and host."""
    pool = make_pool()
    pool.add("http://a.example/1")
    assert result(pool.why("http://a.example/1"))["state"] == "waiting"
    drain(pool)
    pool.set_status("http://a.example/1", 503)
    answer = result(pool.why("http://a.example/1"))
    assert (answer["state"], answer["failures"], answer["host"]) == ("waiting", 1, "a.example")
    assert result(pool.why("ftp://x"))["state"] == "rejected"
    assert result(pool.why("http://never.example/"))["state"] == "unknown"


def test_reopen_keeps_everything(make_pool: Any, clock: Any) -> None:
    """After a reopen: waiting URLs wait, done ones stay done, leases come back, hubs keep their span."""
    if make_pool.backend == "memory":
        pytest.skip("the memory backend keeps nothing across a reopen")
    pool = make_pool(concurrency=10)
    pool.addmany([f"http://a.example/{i}" for i in range(5)])
    pool.set_hubs(["http://a.example/hub"], 3600)
    popped = drain(pool, 3)
    assert "http://a.example/hub" in popped
    done = [u for u in popped if not popped[u]][0]
    pool.set_status(done, 200)
    pool = make_pool(concurrency=10)
    pool.set_hubs(["http://a.example/hub"], 3600)
    stats = result(pool.stats())
    assert (stats["waiting"], stats["pending"], stats["done"]) == (4, 0, 1)
    again = drain(pool)
    assert done not in again and "http://a.example/hub" not in again and len(again) == 4


def test_prefix_end_carries() -> None:
    """The end of a key range carries over 0xff bytes (a host id may end in them)."""
    from spiderd.pool.keys import prefix_end

    assert prefix_end(b"Qa") == b"Qb"
    assert prefix_end(b"Q\x01\xff\xff") == b"Q\x02"
    assert prefix_end(b"\xff\xff") is None


def test_host_whose_id_ends_in_ff(make_pool: Any) -> None:
    """A host whose 8-byte id ends in 0xff is popped like any other."""
    from spiderd.pool.keys import host_id

    host = next(f"h{i}.example" for i in range(100000) if host_id(f"h{i}.example").endswith(b"\xff"))
    pool = make_pool()
    pool.add(f"http://{host}/x")
    assert drain(pool) == {f"http://{host}/x": False}


def test_max_urls_per_host(make_pool: Any) -> None:
    """A host with max_urls_per_host URLs waiting takes no more (a link trap cannot fill the pool)."""
    pool = make_pool(max_urls_per_host=3)
    assert result(pool.addmany([f"http://trap.example/cal/{i}" for i in range(10)])) == 3
    assert result(pool.add("http://other.example/1")) is True
    assert result(pool.stats())["rejected"] == {"host-full": 7}


def test_fetched_frees_the_host_slot_but_keeps_the_lease(make_pool: Any, clock: Any) -> None:
    """fetched() lets the host's next URL out while the first is still pending (being processed)."""
    pool = make_pool(concurrency=1)
    pool.addmany(["http://a.example/1", "http://a.example/2"])
    assert list(drain(pool)) == ["http://a.example/1"]
    assert drain(pool) == {}
    pool.fetched("http://a.example/1")
    assert list(drain(pool)) == ["http://a.example/2"]
    assert result(pool.stats())["pending"] == 2
    pool.set_status("http://a.example/1", 200)
    pool.fetched("http://a.example/2")
    pool.fetched("http://a.example/2")  # twice is harmless
    pool.add("http://a.example/3")
    assert list(drain(pool)) == ["http://a.example/3"]
    assert drain(pool) == {}


def test_claim(make_pool: Any, clock: Any) -> None:
    """claim() leases a waiting or unknown URL once; done, failed or leased URLs are not claimed."""
    pool = make_pool(concurrency=5, pending_threshold=30)
    pool.add("http://b.example/w")
    assert result(pool.claim("http://b.example/w")) is True
    assert result(pool.claim("http://b.example/w")) is False
    assert drain(pool) == {}
    assert result(pool.claim("http://b.example/new")) is True
    assert result(pool.stats())["pending"] == 2
    pool.set_status("http://b.example/w", 200)
    assert result(pool.claim("http://b.example/w")) is False
    assert result(pool.claim("ftp://bad")) is False
    clock.advance(31)
    assert drain(pool) == {"http://b.example/new": False}


def test_seen_set_for_batched_urls(make_pool: Any) -> None:
    """seen_filter gives the never-seen URLs (canonical, once); seen_add records them as batched, for good."""
    pool = make_pool()
    pool.add("http://a.example/list")
    fresh = result(pool.seen_filter(["http://a.example/d1", "http://A.example/d1#x", "http://a.example/list", "ftp://x"]))
    assert fresh == ["http://a.example/d1"]
    assert result(pool.seen_add(fresh + ["http://a.example/d2"])) == 2
    assert result(pool.seen_add(["http://a.example/d2"])) == 0
    assert result(pool.seen_filter(["http://a.example/d1", "http://a.example/d3"])) == ["http://a.example/d3"]
    assert result(pool.add("http://a.example/d1")) is False
    assert result(pool.why("http://a.example/d2"))["state"] == "batched"
    assert result(pool.stats())["batched"] == 2


def test_batch_numbers_unique_across_reopen(make_pool: Any) -> None:
    """next_batch hands out fresh numbers, in ranges, and never again after a reopen."""
    pool = make_pool()
    assert result(pool.next_batch()) == 1
    assert result(pool.next_batch(3)) == 2
    assert result(pool.next_batch()) == 5
    if make_pool.backend != "memory":
        pool = make_pool()
        assert result(pool.next_batch()) == 6
