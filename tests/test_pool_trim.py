"""Trimming the mapped LevelDB tables out of the resident set."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from twisted.internet.task import Clock

from spiderd.frontier.pool import open_leveldb_pool
from spiderd.frontier.pool.trim import mapped_tables, trim

from .helpers import result


def rss_file_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssFile:"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and madvise are Linux's")
def test_trim_unmaps_table_pages_and_the_pool_still_reads_them(tmp_path: Path) -> None:
    """After trim, the tables' pages leave the resident set, and every URL is still there."""
    pool = open_leveldb_pool(str(tmp_path / "pool"), Clock(), trim=lambda: None)
    urls = [f"http://h{i % 50}.example/page/{i}?q={'x' * 40}" for i in range(60000)]
    for i in range(0, len(urls), 1000):
        pool.addmany(urls[i : i + 1000])
    pool.compact()  # the data now lives in table files, which LevelDB maps
    for url in urls[::7]:
        assert result(pool.why(url))["state"] == "waiting"
    assert mapped_tables(str(tmp_path / "pool")), "LevelDB mapped no table"
    before = rss_file_kb()
    assert trim(str(tmp_path / "pool")) > 0
    assert rss_file_kb() < before
    assert all(result(pool.why(url))["state"] == "waiting" for url in urls[::13])
    assert result(pool.stats())["waiting"] == len(urls)
    pool.close()
