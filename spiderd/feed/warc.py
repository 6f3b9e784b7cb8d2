"""WARC records of fetched answers (warcio), the check a WARC feed file must pass, and the cut of a torn one.

Each fetched answer becomes a ``response`` record (the status line, the headers, the body; WARC-Payload-Digest
and WARC-Block-Digest in SHA-1 base32, as Common Crawl writes them) and a ``request`` record (the GET that was
sent, WARC-Concurrent-To the response), each record its own gzip member, so a reader may seek to any record
and a torn file can be cut back to its last whole one.  The fetcher hands on the body as decoded (gzip or
deflate inflated, chunks joined): as StormCrawler's WARC module does, the response's ``Content-Encoding``,
``Transfer-Encoding`` and ``Content-Length`` are kept as ``X-Crawler-<name>`` and a ``Content-Length`` of the
stored body is set, so the record reads as what it holds; a truncated body says ``WARC-Truncated: length``.

So that a file replays (pywb, OpenWayback), every HTTP answer of a fetch is archived: each robots.txt answer
(with the first page fetched after it) and each redirect of a chain (its 3xx ``response``, then the next hop's);
a 304 to a conditional fetch is a ``revisit`` record of the server-not-modified profile, with
``WARC-Refers-To-Target-URI`` and, where the previous capture's time is known (a worker's recrawl),
``WARC-Refers-To-Date``.

A page rendered in a headless browser (:mod:`spiderd.engine.render`) keeps both: the ``response`` record is the main
document as it was fetched, and a ``conversion`` record (``WARC-Refers-To`` the response) holds the rendered DOM.

warcio is optional (``pip install 'spiderd[warc]'``): :func:`require` says so clearly when it is missing.
"""

from __future__ import annotations

import io
import os
import zlib
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

from twisted.logger import Logger

from spiderd import __version__
from spiderd.feed.errors import BadFeedError

log = Logger()

EXTENSION = ".warc.gz"
MISSING = "WARC output needs the warcio package: pip install 'spiderd[warc]' (or pip install warcio)"
WARC_VERSION = "1.0"  # what Common Crawl writes and every reader takes
NOT_MODIFIED = 304
REVISIT_NOT_MODIFIED = "http://netpreserve.org/warc/1.0/revisit/server-not-modified"
_DECODED = frozenset({"content-encoding", "transfer-encoding", "content-length"})
_GZIP = b"\x1f\x8b"


def available() -> bool:
    """True if warcio can be imported."""
    try:
        import warcio  # noqa: F401
    except ImportError:
        return False
    return True


def require() -> None:
    """RuntimeError with :data:`MISSING` if warcio is not installed."""
    if not available():
        raise RuntimeError(MISSING)


def is_warc(name: str) -> bool:
    """True if the feed file ``name`` is a WARC file (by its name)."""
    return name.endswith(EXTENSION)


def warc_date(seconds: float) -> str:
    """``2024-01-02T03:04:05Z`` (WARC 1.0's WARC-Date, to the second)."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def warcinfo_record(filename: str) -> bytes:
    """The gzip member of a file's opening ``warcinfo`` record."""
    from warcio.warcwriter import WARCWriter

    out = io.BytesIO()
    writer = WARCWriter(out, gzip=True, warc_version=WARC_VERSION)
    info = {"software": f"spiderd/{__version__}", "format": "WARC File Format 1.0",
            "conformsTo": "http://bibnum.bnf.fr/WARC/WARC_ISO_28500_version1_latestdraft.pdf"}
    writer.write_record(writer.create_warcinfo_record(filename, info))
    return out.getvalue()


def answer_records(result: Any) -> bytes:
    """The gzip members of the records of a FetchResult: first those of the answers fetched on the way
    (``previous``: robots.txt, each redirect), then, if it has an HTTP answer, its ``request`` and ``response``
    (a 304: a ``revisit`` record instead)."""
    from warcio.warcwriter import WARCWriter

    out = io.BytesIO()
    writer = WARCWriter(out, gzip=True, warc_version=WARC_VERSION)
    for answer in [*getattr(result, "previous", ()), result]:
        if answer.headers is not None:
            _write_answer(writer, answer)
    return out.getvalue()


def _write_answer(writer: Any, result: Any) -> None:
    from warcio.statusandheaders import StatusAndHeaders

    url = result.final_url
    body = bytes(result.body)
    when = {"WARC-Date": warc_date(result.fetched_at or _now())}
    response_headers = dict(when)
    if result.error == "truncated":
        response_headers["WARC-Truncated"] = "length"
    status = StatusAndHeaders(f"{result.status} {result.phrase}".rstrip(), _stored_headers(result.headers, len(body)),
                              protocol=result.http_version)
    if result.status == NOT_MODIFIED:
        response = _revisit(writer, url, status, response_headers, getattr(result, "previous_fetch", None))
    else:
        response = writer.create_warc_record(url, "response", payload=io.BytesIO(body), length=len(body),
                                             http_headers=status, warc_headers_dict=response_headers)
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    sent = StatusAndHeaders(f"GET {target} HTTP/1.1", [("Host", parts.netloc.rpartition("@")[2])]
                            + list(result.request_headers), is_http_request=True)
    request = writer.create_warc_record(url, "request", http_headers=sent, warc_headers_dict=dict(when))
    writer.write_request_response_pair(request, response)  # warcio writes the response first
    if result.rendered is not None:
        writer.write_record(_conversion(writer, url, result.rendered, response, when))


def _revisit(writer: Any, url: str, status: Any, headers: dict[str, str], previous: float | None) -> Any:
    """A 304's ``revisit`` record (WARC 1.0's server-not-modified profile): the page did not change since the
    capture of ``url`` at ``previous`` (WARC-Refers-To-Date, when known), which a replay serves instead."""
    refers = {**headers, "WARC-Profile": REVISIT_NOT_MODIFIED, "WARC-Refers-To-Target-URI": url}
    if previous is not None:
        refers["WARC-Refers-To-Date"] = warc_date(previous)
    return writer.create_warc_record(url, "revisit", http_headers=status, warc_headers_dict=refers)


def _conversion(writer: Any, url: str, dom: bytes, response: Any, when: dict[str, str]) -> Any:
    """A ``conversion`` record of the DOM a browser rendered of ``response``'s page (WARC-Refers-To it)."""
    refers = {**when, "WARC-Refers-To": response.rec_headers.get_header("WARC-Record-ID")}
    return writer.create_warc_record(url, "conversion", payload=io.BytesIO(dom), length=len(dom),
                                     warc_content_type="text/html; charset=utf-8", warc_headers_dict=refers)


def _stored_headers(headers: list[tuple[str, str]], length: int) -> list[tuple[str, str]]:
    """The answer's headers for a decoded body: the encoding ones kept as ``X-Crawler-*``, the body's length set."""
    kept = [(f"X-Crawler-{name}" if name.lower() in _DECODED else name, value) for name, value in headers]
    return kept + [("Content-Length", str(length))]


def _now() -> float:
    import time

    return time.time()


# -- reading back (on a thread) ---------------------------------------------------------------------


def whole_records(path: str) -> tuple[int, int]:
    """``(records, end)``: how many whole records ``path`` starts with and where the last one ends; stops at the
    first record warcio cannot read (or whose digest is wrong)."""
    from warcio.archiveiterator import ArchiveIterator

    count = end = 0
    with open(path, "rb") as f:
        members = _member_ends(f)
        f.seek(0)
        try:
            records = ArchiveIterator(f, check_digests="raise")
            for record in records:
                record.content_stream().read()
                records.read_to_end(record)
                if records.get_record_offset() + records.get_record_length() not in members:
                    break  # a record that is not a whole gzip member of its own (a torn trailer, say)
                count += 1
                end = records.get_record_offset() + records.get_record_length()
        except Exception as e:  # warcio's ArchiveLoadFailed, zlib errors, a bad digest, EOF in a member
            log.debug("WARC file {path}: no whole record past byte {end} ({error})", path=path, end=end, error=e)
    return count, end


def _member_ends(f: Any) -> set[int]:
    """The offsets where the whole gzip members of ``f`` end (zlib checks each one's CRC and length)."""
    ends: set[int] = set()
    offset = 0  # of ``data``'s first byte
    inflater = zlib.decompressobj(31)
    for chunk in iter(lambda: f.read(1 << 20), b""):
        data = chunk
        while data:
            try:
                inflater.decompress(data)
            except zlib.error:
                return ends
            if not inflater.eof:
                offset += len(data)
                break
            offset += len(data) - len(inflater.unused_data)
            ends.add(offset)
            data, inflater = inflater.unused_data, zlib.decompressobj(31)
    return ends


def validate_warc(path: str) -> int:
    """The number of records of a WARC file warcio reads whole, each its own gzip member with a right digest.

    Raises BadFeedError otherwise (not gzip, a record warcio cannot read, a wrong digest, bytes past the last
    record, no record at all)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if f.read(2) != _GZIP:
            raise BadFeedError("not a gzip-compressed WARC file")
    count, end = whole_records(path)
    if not count:
        raise BadFeedError("no WARC record in the file")
    if end != size:
        raise BadFeedError(f"only {count} whole WARC records, up to byte {end} of {size}")
    return count


def cut_torn(path: str) -> int:
    """Cut ``path`` just after its last whole record (a file a killed run left), durably; the records it keeps."""
    count, end = whole_records(path)
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if end < size:
            log.info("WARC file {path}: {dropped} bytes past the last whole record dropped", path=path,
                     dropped=size - end)
            f.truncate(end)
        os.fsync(f.fileno())
    return count
