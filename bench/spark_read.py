"""Spark reads a crawl's output three ways: the JSON-lines feed with its declared schema, the Parquet feed, and the
WARC files through warcio in ``mapPartitions``; it joins items to pages by ``urlhash``.

Needs Java (``java`` on PATH or JAVA_HOME; Spark 4 wants 17 or later), pyspark, warcio and pyarrow; it checks for
them first and says what is missing.  Without ``--feeds``/``--parquet``, it makes the output itself: two crawls of
the bundled demo site (1,000 detail pages, 404s, 500s and redirects among them) with the all role and its own
worker, one with ``[items] format = "both"`` (JSON lines and WARC), one with ``"parquet"``.

    .venv/bin/python bench/spark_read.py [--keep] [--feeds DIR --parquet DIR]

Ends with ``RESULT spark_corrupt=... spark_rows_json=... spark_rows_parquet=... spark_warc_responses=...
spark_joined=...``.  docs/guide/feed.md shows the same reading code.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def missing() -> list[str]:
    """What this benchmark needs and does not find."""
    gone = []
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        gone.append("Java 17+ (apt-get install openjdk-17-jre-headless)")
    for module, package in (("pyspark", "pyspark"), ("warcio", "warcio"), ("pyarrow", "pyarrow")):
        if importlib.util.find_spec(module) is None:
            gone.append(f"{package} (pip install {package})")
    return gone


# -- making the output ------------------------------------------------------------------------------------


def crawl_child(data_dir: str, feed_format: str) -> None:
    """In a child process: the demo crawl with ``[items] format = feed_format``, to its end."""
    from twisted.internet import reactor

    from spiderd.demo import config as demo
    from spiderd.tap import build

    settings = demo.fresh({"spiderd.data_dir": data_dir, "items.format": feed_format})
    service = build(settings, reactor, demo_site=True)  # type: ignore[arg-type]
    reactor.callWhenRunning(service.startService)
    reactor.addSystemEventTrigger("before", "shutdown", service.stopService)
    reactor.run()  # exit_when_done: the node stops once the crawl is done and its feeds are shipped


def crawl(work: str, feed_format: str) -> str:
    """The feeds directory of a demo crawl with ``feed_format`` (its log beside it)."""
    data_dir = os.path.join(work, f"crawl-{feed_format}")
    started = time.monotonic()
    with open(data_dir + ".log", "w") as log:
        subprocess.run([sys.executable, __file__, "--crawl-child", data_dir, feed_format], check=True,
                       stdout=log, stderr=subprocess.STDOUT, timeout=900)
    print(f"crawl ({feed_format}): {time.monotonic() - started:.0f} s, log {data_dir}.log")
    return os.path.join(data_dir, "feeds")


# -- reading it with Spark (the guide's code) --------------------------------------------------------------


def warc_responses(files: Iterator[tuple[str, bytes]]) -> Iterator[tuple[int, str, int, int]]:
    """mapPartitions: each WARC response record as (urlhash, target URI, HTTP status, body bytes)."""
    from warcio.archiveiterator import ArchiveIterator

    from spiderd.core.urls import fingerprint, to_signed64

    for _, data in files:
        for record in ArchiveIterator(io.BytesIO(data)):
            if record.rec_type == "response":
                uri = record.rec_headers.get_header("WARC-Target-URI")
                body = record.content_stream().read()
                yield to_signed64(fingerprint(uri)), uri, int(record.http_headers.get_statuscode()), len(body)


def read(spark: Any, feeds: str, parquet_feeds: str, ddl: str) -> dict[str, int]:
    """The three reads and the join; the counts."""
    items = (spark.read.schema(ddl + ", _corrupt_record STRING")
             .option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", "_corrupt_record")
             .json(os.path.join(feeds, "*.jl")).cache())
    corrupt = items.filter(items["_corrupt_record"].isNotNull()).count()
    rows_json = items.count()
    rows_parquet = spark.read.parquet(os.path.join(parquet_feeds, "*.parquet")).count()
    pages = (spark.sparkContext.binaryFiles(os.path.join(feeds, "*.warc.gz"))
             .mapPartitions(warc_responses).toDF(["urlhash", "uri", "http_status", "bytes"]))
    responses = pages.count()
    joined = items.join(pages.dropDuplicates(["urlhash"]), "urlhash").count()
    return {"spark_corrupt": corrupt, "spark_rows_json": rows_json, "spark_rows_parquet": rows_parquet,
            "spark_warc_responses": responses, "spark_joined": joined}


def spark_session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the executors import spiderd and warcio too
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local mode: loopback only
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("spiderd-feed")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
             .config("spark.driver.memory", "1g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--feeds", help="a directory of *.jl and *.warc.gz feed files (default: crawl the demo)")
    parser.add_argument("--parquet", help="a directory of *.parquet feed files (default: crawl the demo)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--crawl-child", nargs=2, metavar=("DATA_DIR", "FORMAT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.crawl_child:
        crawl_child(*args.crawl_child)
        return 0
    gone = missing()
    if gone:
        print("bench/spark_read.py needs: " + "; ".join(gone))
        print("RESULT spark_skipped=1")
        return 2
    from spiderd.demo import config as demo
    from spiderd.feed.schema import ddl

    print("load before:", os.getloadavg())
    work = tempfile.mkdtemp(prefix="spiderd-spark-")
    try:
        feeds = args.feeds or crawl(work, "both")
        parquet_feeds = args.parquet or crawl(work, "parquet")
        started = time.monotonic()
        spark = spark_session()
        try:
            counts = read(spark, feeds, parquet_feeds, ddl(demo.settings({}).sites))
        finally:
            spark.stop()
        print(f"Spark: {time.monotonic() - started:.0f} s; load after: {os.getloadavg()}")
    finally:
        if args.keep:
            print("kept", work)
        else:
            shutil.rmtree(work, True)
    print("RESULT " + " ".join(f"{k}={v}" for k, v in counts.items()))
    return 0 if counts["spark_corrupt"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
