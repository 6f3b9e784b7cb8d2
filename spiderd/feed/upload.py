"""Blocking uploads of one feed file to its :class:`~spiderd.core.feeduri.Target`: over FTP, FTPS or SFTP (a
:class:`~spiderd.feed.transport.Session`), or into a local directory (run them in a thread).

Uploads go to ``.<name>.part`` in the target directory (hidden, and not ``*.jl``, so neither a Spark glob nor
Hadoop's input listing sees it), then are renamed to the final name.  An existing final name is never overwritten:
:class:`~spiderd.feed.errors.FeedExistsError` (batch numbers are unique, so a clash is a bug or a misconfigured
template).  An :class:`Abort` breaks a transfer from another thread.
"""

from __future__ import annotations

import filecmp
import os
import shutil
from typing import Any, Callable

from spiderd.core.feeduri import Target
from spiderd.core.fsutil import fsync_dir, unlink_quietly
from spiderd.feed.errors import FeedError, FeedExistsError
from spiderd.feed.transport import Abort, Reader, Session, TransportOptions, open_session


def upload(local_path: str, target: Target, *, options: TransportOptions = TransportOptions(),
           abort: Abort | None = None, renamed_before: bool = False,
           before_rename: Callable[[], None] = lambda: None, reactor: Any = None) -> None:
    """Blocking: put ``local_path`` at ``target`` under its temp name, then rename it to the final name.

    ``renamed_before`` says an earlier attempt sent the rename (``before_rename`` runs just before
    it does), so a final file equal to ours is our own upload, not a clash.  ``reactor`` runs the SFTP client.
    """
    abort = abort or Abort()
    if target.scheme == "file":
        _upload_file(local_path, target, renamed_before, before_rename)
    else:
        _upload_remote(open_session(target, options, abort, reactor), local_path, target, abort, renamed_before,
                       before_rename)


def _upload_file(local: str, target: Target, renamed_before: bool, before_rename: Callable[[], None]) -> None:
    os.makedirs(target.directory, exist_ok=True)
    final = os.path.join(target.directory, target.name)
    temp = os.path.join(target.directory, target.temp_name)
    if os.path.exists(final):
        if renamed_before and filecmp.cmp(local, final, shallow=False):
            unlink_quietly(temp)
            return
        raise FeedExistsError(f"{target} already exists; not overwritten")
    _copy_no_follow(local, temp)
    before_rename()
    _link_no_overwrite(temp, final, target)
    fsync_dir(target.directory)


def _copy_no_follow(local: str, temp: str) -> None:
    """Copy ``local`` to a new ``temp`` and fsync it; a symbolic link (or anything) already at ``temp`` is
    removed first, never written through."""
    unlink_quietly(temp)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with open(fd, "wb") as out, open(local, "rb") as source:
        shutil.copyfileobj(source, out, 1024 * 1024)
        out.flush()
        os.fsync(out.fileno())


def _link_no_overwrite(temp: str, final: str, target: Target) -> None:
    """Rename ``temp`` to ``final`` unless ``final`` exists (atomically where hard links work)."""
    try:
        os.link(temp, final)
    except FileExistsError:
        unlink_quietly(temp)
        raise FeedExistsError(f"{target} already exists; not overwritten") from None
    except OSError:
        if os.path.exists(final):
            raise FeedExistsError(f"{target} already exists; not overwritten") from None
        os.replace(temp, final)
        return
    os.unlink(temp)


def _upload_remote(session: Session, local: str, target: Target, abort: Abort, renamed_before: bool,
                   before_rename: Callable[[], None]) -> None:
    size = os.path.getsize(local)
    try:
        session.makedirs_cwd(target.directory)
        if _already_there(session, target, size, renamed_before):
            return
        with open(local, "rb") as f:
            session.store(target.temp_name, Reader(f, abort))
        stored = session.size(target.temp_name)
        if stored not in (size, -1):
            raise FeedError(f"{target}: the server holds {stored} bytes of {size}")
        if session.size(target.name) is not None:
            raise FeedExistsError(f"{target} appeared during the upload; not overwritten")
        before_rename()
        session.rename(target.temp_name, target.name)
        session.quit()
    finally:
        session.close()


def _already_there(session: Session, target: Target, size: int, renamed_before: bool) -> bool:
    """True if an earlier attempt's rename went through; FeedExistsError if another file has the name."""
    found = session.size(target.name)
    if found is None:
        return False
    if renamed_before and found in (size, -1) and session.size(target.temp_name) is None:
        return True
    raise FeedExistsError(f"{target} already exists; not overwritten")
