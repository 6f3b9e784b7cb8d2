"""Small durable-file helpers shared by the spools and the job store (blocking: call them from a thread)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import IO, Any

from twisted.internet.defer import Deferred


def write_atomically(path: str, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new content, never a mix."""
    write_many_atomically([(path, data)], mode)


def write_many_atomically(files: list[tuple[str, bytes]], mode: int = 0o600) -> None:
    """Replace each path with its data, as :func:`write_atomically` does, with one fsync per directory."""
    for path, data in files:
        tmp = _tmp(path)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    for path, _ in files:
        os.replace(_tmp(path), path)
    for directory in dict.fromkeys(os.path.dirname(path) or "." for path, _ in files):
        fsync_dir(directory)


def _tmp(path: str) -> str:
    return os.path.join(os.path.dirname(path) or ".", "." + os.path.basename(path) + ".tmp")


def fsync_dir(directory: str) -> None:
    """Make a rename, a creation or an unlink in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: str) -> None:
    """Flush a file's content to disk."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def unlink_quietly(path: str) -> bool:
    """Remove ``path``; False if it was not there."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


class LaneFile:
    """A file written from the reactor through a lane (one thread, in order): ``open`` creates or empties it,
    a failed write is remembered and raised by ``close``, which fsyncs the file and its directory; ``discard``
    removes it.  ``_open``, ``_write``, ``_close`` and ``_discard`` run on the lane; a subclass may give
    ``_opened`` (what the file starts with) and ``_encode`` (the bytes or text of what ``_write`` is given)."""

    binary = True  # False: text in UTF-8

    def __init__(self, path: str, io: Callable[..., Deferred[Any]]) -> None:
        self.path = path
        self._io = io
        self._file: IO[Any] | None = None
        self._error: BaseException | None = None

    def _open(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._file = open(self.path, "wb") if self.binary else open(self.path, "w", encoding="utf-8")
        self._opened(self._file)

    def _opened(self, file: IO[Any]) -> None:
        """What a new file starts with (nothing)."""

    def _encode(self, data: Any) -> Any:
        return data

    def _write(self, data: Any) -> None:
        try:
            assert self._file is not None, "written before it was opened"
            self._file.write(self._encode(data))
        except Exception as e:  # remembered, raised by close
            self._error = self._error or e

    def _close(self) -> None:
        if self._file is None:
            return
        try:
            if self._error is not None:
                raise self._error
            self._file.flush()
            os.fsync(self._file.fileno())
        finally:
            self._file.close()
            self._file = None
        fsync_dir(os.path.dirname(self.path))

    def _discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        unlink_quietly(self.path)
