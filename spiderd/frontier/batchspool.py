"""The batcher's spool on disk: the open batch (``open.jl``, one URL a line) and each sealed batch
(``batch-<n>.json``) until a target accepted it.  Blocking file work: the batcher runs it on its lane."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field

from twisted.internet.interfaces import IDelayedCall

from spiderd.core import recrawls
from spiderd.core.fsutil import unlink_quietly, write_many_atomically


@dataclass
class Batch:
    """A sealed batch: its number, its URLs and spider, its spool file and its sending state; a batch of recrawls
    (seed 004's mod_detail) has each URL's previous fetch too, sent as DISTRIBUTED_RECRAWL."""

    number: int
    urls: list[str]
    spider: str = ""
    recrawls: list[recrawls.Recrawl] = field(default_factory=list)
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # the same at every resend: run once
    attempts: int = 0
    path: str = ""
    timer: IDelayedCall | None = field(default=None, repr=False)


def open_path(directory: str) -> str:
    """The file of the open batch."""
    return os.path.join(directory, "open.jl")


def append_lines(path: str, lines: list[str]) -> None:
    """Add ``lines`` to the open batch's file; one the disk refused in part (a full disk) is cut back, so that
    the next lines do not follow half of one."""
    data = memoryview("".join(line + "\n" for line in lines).encode("utf-8"))
    with open(path, "ab", buffering=0) as f:
        size = f.seek(0, os.SEEK_END)
        try:
            while data:
                data = data[f.write(data) :]
        except OSError:
            f.truncate(size)
            raise


def remove(path: str) -> None:
    """Drop an accepted batch's file (none if it was never written)."""
    if path:
        unlink_quietly(path)


def write_sealed(directory: str, batches: list[Batch], rest: list[str]) -> None:
    """Write the sealed ``batches`` and the open batch's ``rest`` in one atomic step; sets each batch's path."""
    files = []
    for batch in batches:
        batch.path = os.path.join(directory, f"batch-{batch.number}.json")
        data: dict[str, object] = {"batch": batch.number, "spider": batch.spider, "job_id": batch.job_id,
                                   "urls": batch.urls}
        if batch.recrawls:
            data["recrawl"] = {r.url: r.entry() for r in batch.recrawls}
        files.append((batch.path, json.dumps(data).encode()))
    files.append((open_path(directory), "".join(u + "\n" for u in rest).encode()))
    write_many_atomically(files)


def read_spool(directory: str) -> tuple[list[Batch], list[str]]:
    """The spooled batches, and the open batch's URLs (minus those already in a batch)."""
    spooled = []
    for name in sorted(os.listdir(directory)):
        if name.startswith("batch-") and name.endswith(".json"):
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            batch = Batch(int(data["batch"]), list(data["urls"]), str(data.get("spider", "")), path=path)
            if data.get("recrawl"):
                kept = recrawls.parse(json.dumps(data["recrawl"]), len(data["recrawl"]))
                batch.recrawls = [kept[url] for url in batch.urls if url in kept]
            batch.job_id = str(data.get("job_id", "")) or batch.job_id
            spooled.append(batch)
    in_batches = {url for batch in spooled for url in batch.urls}
    open_urls: list[str] = []
    if os.path.exists(open_path(directory)):
        with open(open_path(directory), encoding="utf-8") as f:
            lines = f.read().split("\n")
        # the last line is torn if the process died while appending: keep only complete lines
        open_urls = [u for u in lines[:-1] if u and u not in in_batches]
    return spooled, list(dict.fromkeys(open_urls))
