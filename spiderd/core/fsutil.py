"""Small durable-file helpers shared by the spools and the job store (blocking: call them from a thread)."""

from __future__ import annotations

import os


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
