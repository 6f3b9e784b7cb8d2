"""Small durable-file helpers shared by the spools and the job store (blocking: call them from a thread)."""

from __future__ import annotations

import os


def write_atomically(path: str, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new content, never a mix."""
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, "." + os.path.basename(path) + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(directory)


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
