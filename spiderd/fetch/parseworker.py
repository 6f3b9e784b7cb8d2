"""A parse worker: a child process that runs :func:`spiderd.fetch.extract.extract` for the parse pool.

The wire is a pipe each way carrying frames: a 4-byte big-endian length, then a
``marshal`` payload (the same interpreter is on both ends).  The parent first
sends ``("init", sites, max_url_length, max_path_depth, max_links, anchors, page_robots)``; the child
answers ``("ready", pid)``.  The rules change at run time: ``("rules", digest, sites)`` gives the child another
version, ``("use", digest)`` parses the next requests with it, ``("forget", digest)`` drops one (the parent keeps
at most a few per child).  The child answers each request
``(id, url, body, content_type, kind, fetched_at, status, preset, robots_tag)`` in order with
``(id, lists, details, item, skipped, error, list_anchors, detail_anchors, list_xpaths, detail_xpaths,
noindex, nofollow, canonical, compressed, digest, line)`` (the fields of :class:`~spiderd.fetch.extract.Extracted`,
in order): when ``preset`` is not None (and the page is not ``noindex``) the child also XZ-compresses the body for
the page store, so that CPU work runs in the parse processes too, as do the content digest (``digest``, computed by
``extract``) and the item's JSON line (``line``: :func:`~spiderd.core.itemline.json_line`, the bytes its items file
gets).  The child exits at end of input.

A request's frame carries its body after the marshal payload, not in it (the payload holds the body's length in
its place: :func:`request_frame`, :func:`message_from`), so the parent writes the page into the pipe as it has it,
with one ``writev``, instead of copying it into a marshal buffer and then into a frame (about 10 us of the
reactor's process a 40 KB page).

To keep the parent's share of a page small, the child grows its pipes to
1 MiB (the parent writes pages in few system calls, and reads answers in few) and flushes answers in
batches: when no request is waiting, or every FLUSH_INTERVAL while busy.  It
runs at a lower priority so the reactor process wins the CPU when every core
is parsing, keeps freed memory in its heap for the next page (glibc's mallopt:
lzma's buffers were otherwise faulted in afresh for every page), and it ignores SIGINT and SIGTERM: the parent ends it by closing
its stdin (or, at a deadline, with SIGKILL).

Nothing here imports Twisted: the child stays small and starts fast.
"""

from __future__ import annotations

import dataclasses
import marshal
import os
import select
import signal
import struct
import sys
import time
from collections import deque
from typing import IO, Any

from spiderd.core.compression import compress
from spiderd.core.memory import keep_heap
from spiderd.core.itemline import json_line
from spiderd.fetch.extract import MAX_LINKS, Extracted, Rules, extract
from spiderd.fetch.pagerobots import PageRobots
from spiderd.core.rules import Field, Site

HEADER = struct.Struct(">I")
MAX_MESSAGE = 64 * 1024 * 1024
PIPE_SIZE = 1024 * 1024
READ_SIZE = 1024 * 1024
WRITE_BUFFER = 256 * 1024
FLUSH_INTERVAL = 0.002
NICE = 10


class FrameError(ValueError):
    """A frame longer than the limit: the stream cannot be trusted any more."""


def frame(message: Any) -> bytes:
    """One message as a length-prefixed marshal frame."""
    payload = marshal.dumps(message)
    return HEADER.pack(len(payload)) + payload


def request_frame(request_id: int, url: str, body: bytes, *rest: Any) -> list[bytes]:
    """A page request's frame as the buffers to write (``rest``: the request's fields after its body): its
    marshal payload, with the body's length in the body's place, then the body itself (not copied)."""
    head = marshal.dumps((request_id, url, len(body), *rest))
    return [HEADER.pack(len(head) + len(body)), head, body]


def message_from(payload: bytes) -> Any:
    """The message of a frame's payload; a page request's body (after its marshal payload) put back in its place."""
    message = marshal.loads(payload)  # (it reads the marshal payload and ignores the body after it)
    if type(message) is tuple and len(message) > 2 and type(message[0]) is int and type(message[2]) is int:
        size = message[2]  # a page request (a control message's tag is a str; a body in the payload, bytes)
        return (message[0], message[1], payload[len(payload) - size:] if size else b"", *message[3:])
    return message


class FrameDecoder:
    """Splits a byte stream into frames (the parent side, fed from ``childDataReceived``)."""

    def __init__(self, max_length: int = MAX_MESSAGE) -> None:
        self.max_length = max_length
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The payloads completed by ``data``; raises :class:`FrameError` on an oversized frame."""
        buffer = self._buffer
        buffer += data
        payloads = []
        offset = 0
        while len(buffer) - offset >= HEADER.size:
            (length,) = HEADER.unpack_from(buffer, offset)
            if length > self.max_length:
                raise FrameError(f"frame of {length} bytes exceeds {self.max_length}")
            end = offset + HEADER.size + length
            if end > len(buffer):
                break
            payloads.append(bytes(buffer[offset + HEADER.size : end]))
            offset = end
        del buffer[:offset]
        return payloads


def init_message(rules: Rules, max_links: int = MAX_LINKS) -> tuple[Any, ...]:
    """The first message to a worker: the compiled sites as plain data, and the limits."""
    return ("init", plain_sites(rules.sites), rules.max_url_length, rules.max_path_depth, max_links, rules.anchors,
            rules.page_robots.as_tuple())


def rules_message(rules: Rules) -> tuple[Any, ...]:
    """Another version of the sites for a running worker, kept under its digest (``("use", digest)`` picks it)."""
    return ("rules", rules.digest, plain_sites(rules.sites))


def rules_from(message: tuple[Any, ...]) -> tuple[Rules, int]:
    """The Rules and max_links of an init message."""
    tag, sites, max_url_length, max_path_depth, max_links, anchors, (nofollow, meta, canonical, agents) = message
    if tag != "init":
        raise ValueError(f"expected an init message, got {tag!r}")
    page_robots = PageRobots(nofollow, meta, canonical, tuple(agents))
    return Rules(sites_from(sites), max_url_length, max_path_depth, anchors, page_robots), max_links


def plain_sites(sites: tuple[Site, ...]) -> list[dict[str, Any]]:
    """The sites as plain data (a message's)."""
    return [dataclasses.asdict(site) for site in sites]


def sites_from(plain: list[dict[str, Any]]) -> tuple[Site, ...]:
    """The sites of :func:`plain_sites`'s plain data."""
    return tuple(Site(**{**site, "fields": tuple(Field(**f) for f in site["fields"])}) for site in plain)


class Versions:
    """The child's versions of the rules by digest, and the one requests are parsed with (``use``)."""

    def __init__(self, rules: Rules) -> None:
        self.current = rules
        self._by_digest = {rules.digest: rules}

    def control(self, message: tuple[Any, ...]) -> None:
        """Apply a ``rules``, ``use`` or ``forget`` message (the parent keeps the same table, so they agree)."""
        tag, digest = message[0], message[1]
        if tag == "rules":
            self._by_digest[digest] = self.current.with_sites(sites_from(message[2]))
        elif tag == "use":
            self.current = self._by_digest[digest]
        elif tag == "forget":
            self._by_digest.pop(digest, None)
        else:
            raise ValueError(f"unknown message {tag!r}")


def answer(rules: Rules, max_links: int, request: tuple[Any, ...]) -> tuple[Any, ...]:
    """The answer tuple to one request."""
    request_id, url, body, content_type, kind, fetched_at, status, preset, robots_tag = request
    return (request_id, *parsed(rules, max_links, url, body, content_type, kind, fetched_at, status, preset,
                                robots_tag))


def parsed(rules: Rules, max_links: int, url: str, body: bytes, content_type: str | None, kind: str,
           fetched_at: float, status: int, preset: int | None, robots_tag: str | None) -> tuple[Any, ...]:
    """The fields of the page's :class:`~spiderd.fetch.extract.Extracted`, in order; with ``preset`` (and the page
    not ``noindex``) ``compressed`` is the body XZ-compressed for the store; ``line`` is the item's JSON line."""
    result = extract(url, body, content_type, kind, fetched_at, status, rules, max_links, robots_tag)
    compressed = compress(body, preset) if preset is not None and not result.noindex else None
    line = json_line(result.item) if result.item is not None else None
    return (result.lists, result.details, result.item, result.skipped, result.error,
            result.list_anchors, result.detail_anchors, result.list_xpaths, result.detail_xpaths,
            result.noindex, result.nofollow, result.canonical, compressed, result.digest, line)


def extracted_from(message: tuple[Any, ...]) -> Extracted:
    """The Extracted of an answer tuple (without its id)."""
    return Extracted(*message[1:])  # the answer's fields are Extracted's, in order


class Input:
    """Blocking frame reader on a file descriptor, with big reads and a look at whether more is waiting."""

    def __init__(self, fd: int, max_length: int = MAX_MESSAGE) -> None:
        self.fd = fd
        self._decoder = FrameDecoder(max_length)
        self._payloads: deque[bytes] = deque()

    def next(self) -> Any:
        """The next message, or None at end of input (a partial last frame is dropped)."""
        while not self._payloads:
            data = os.read(self.fd, READ_SIZE)
            if not data:
                return None
            self._payloads.extend(self._decoder.feed(data))
        return message_from(self._payloads.popleft())

    def waiting(self) -> bool:
        """True when another request can be read without blocking."""
        return bool(self._payloads) or bool(select.select([self.fd], [], [], 0)[0])


def write_message(stream: IO[bytes], message: Any) -> None:
    """Write one frame (unflushed); an unmarshallable answer is replaced by an error answer."""
    try:
        data = frame(message)
    except ValueError:
        data = frame((message[0], [], [], None, 0, "internal-error", [], [], [], [], False, False, None, None, None,
                      None))
    stream.write(data)


def serve(stdin: Input, stdout: IO[bytes]) -> int:
    """Answer requests until end of input; the exit status.

    Answers are flushed when no request is waiting, or every FLUSH_INTERVAL while busy, so the
    parent wakes up once per batch of answers rather than once per page.
    """
    init = stdin.next()
    if init is None:
        return 0
    rules, max_links = rules_from(init)
    versions = Versions(rules)
    write_message(stdout, ("ready", os.getpid()))
    stdout.flush()
    flushed = time.monotonic()
    while (request := stdin.next()) is not None:
        if isinstance(request[0], str):
            versions.control(request)
            continue
        write_message(stdout, answer(versions.current, max_links, request))
        now = time.monotonic()
        if now - flushed >= FLUSH_INTERVAL or not stdin.waiting():
            stdout.flush()
            flushed = now
    stdout.flush()
    return 0


def main() -> int:
    """The child's entry point: frames go to the real stdout; stray prints go to stderr."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when we stop: EOF on stdin
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _lower_priority()
    keep_heap()  # lzma's buffers reused, not faulted in afresh for every page
    grow_pipe(0)
    grow_pipe(1)  # answers too: a batch of them goes out without waiting for the parent to read
    out = os.fdopen(os.dup(1), "wb", buffering=WRITE_BUFFER)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return serve(Input(0), out)


def _lower_priority() -> None:
    """Let the reactor process win the CPU when it wakes up, even with every core parsing."""
    try:
        os.nice(NICE)
    except OSError:
        pass


def grow_pipe(fd: int, size: int = PIPE_SIZE) -> None:
    """Make the pipe on ``fd`` hold many pages, so the parent writes them in few system calls (Linux only)."""
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size)
    except (ImportError, AttributeError, OSError):  # not Linux, not a pipe, or above pipe-max-size
        pass


if __name__ == "__main__":
    sys.exit(main())
