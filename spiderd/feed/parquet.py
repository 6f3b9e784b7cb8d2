"""The feed as Parquet (``[items] format = "parquet"``, needs pyarrow: ``pip install 'spiderd[parquet]'``).

A worker job's items are written as JSON lines as ever (the exactly-once machinery is unchanged); when the job
ships, its file is converted into one Parquet file (``<job>.parquet`` beside it, its FEED_URI's ``.jl`` ending as
``.parquet``) with the feed's declared schema (:mod:`spiderd.feed.schema`), typed:

=================  ==================  ===================================================
Spark type          Arrow / Parquet     columns
=================  ==================  ===================================================
STRING              string              the site's fields, ``url``, ``digest``
ARRAY<STRING>       list<string>        fields with ``all = true``
BIGINT              int64               ``urlhash`` (signed, as in the JSON lines)
INT                 int32               ``status``
DOUBLE              double              ``fetched_at``
BOOLEAN             bool                ``rendered`` (sites that render)
=================  ==================  ===================================================

and ``_extra``: a JSON string of whatever an item holds beyond its columns (or a value that does not fit its
column's type), null when nothing.  The file's key-value metadata holds ``spiderd.schema_version`` (this is
version 1) and ``spiderd.columns`` (the declared columns as JSON).  Compression: zstd.
"""

from __future__ import annotations

import json
import os
from typing import Any

from spiderd.core.fsutil import fsync_dir, fsync_file
from spiderd.feed.errors import BadFeedError
from spiderd.feed.schema import fits

SCHEMA_VERSION = 1
EXTENSION = ".parquet"
EXTRA = "_extra"
ROWS_PER_GROUP = 50_000


def require() -> None:
    """ImportError unless pyarrow is installed."""
    import pyarrow  # noqa: F401


def is_parquet(name: str) -> bool:
    return name.endswith(EXTENSION)


def parquet_uri(feed_uri: str) -> str:
    """A job's feed URI with its ``.jl`` (``.jsonl``, ``.json``) name ending as ``.parquet``."""
    for suffix in (".jl", ".jsonl", ".json"):
        if feed_uri.endswith(suffix):
            return feed_uri[: -len(suffix)] + EXTENSION
    return feed_uri + EXTENSION


def arrow_schema(columns: list[tuple[str, str]]) -> Any:
    """The Arrow schema of the declared columns (Spark types), ``_extra`` last, with spiderd's metadata."""
    import pyarrow as pa

    types = {"STRING": pa.string(), "ARRAY<STRING>": pa.list_(pa.string()), "BIGINT": pa.int64(),
             "INT": pa.int32(), "DOUBLE": pa.float64(), "BOOLEAN": pa.bool_()}
    fields = [pa.field(name, types[kind]) for name, kind in columns] + [pa.field(EXTRA, pa.string())]
    metadata = {"spiderd.schema_version": str(SCHEMA_VERSION), "spiderd.columns": json.dumps(columns)}
    return pa.schema(fields, metadata=metadata)


def convert(source: str, target: str, columns: list[tuple[str, str]], compression: str = "zstd") -> int:
    """Blocking: the JSON-lines file ``source`` as the Parquet file ``target`` (written as ``target.tmp``, fsynced,
    renamed); the number of rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = arrow_schema(columns)
    temp = target + ".tmp"
    rows = 0
    with pq.ParquetWriter(temp, schema, compression=compression) as writer, open(source, "rb") as f:
        batch: list[dict[str, Any]] = []
        for line in f:
            batch.append(_row(json.loads(line), columns))
            if len(batch) >= ROWS_PER_GROUP:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                rows, batch = rows + len(batch), []
        if batch or not rows:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            rows += len(batch)
    fsync_file(temp)
    os.replace(temp, target)
    fsync_dir(os.path.dirname(target) or ".")
    return rows


def _row(item: dict[str, Any], columns: list[tuple[str, str]]) -> dict[str, Any]:
    """One item as a row: each column's value if it fits its type, the rest in ``_extra``."""
    row: dict[str, Any] = {}
    rest = dict(item)
    for name, kind in columns:
        value = rest.get(name)
        if value is None or fits(value, kind):
            row[name] = value
            rest.pop(name, None)
        else:
            row[name] = None
    row[EXTRA] = json.dumps(rest, ensure_ascii=False, sort_keys=True) if rest else None
    return row


def validate_parquet(path: str) -> int:
    """The rows of a Parquet file that reads back whole; BadFeedError otherwise."""
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        rows = parquet.metadata.num_rows
        for group in range(parquet.num_row_groups):
            parquet.read_row_group(group)
    except Exception as e:  # pyarrow raises its own ArrowInvalid, OSError...
        raise BadFeedError(f"not a readable Parquet file: {e}") from None
    return int(rows)
