"""Blocking uploads of one feed file to its :class:`~spiderd.core.feeduri.Target`: over FTP, or into a local
directory (run them in a thread).

Uploads go to ``.<name>.part`` in the target directory (hidden, and not ``*.jl``, so neither a Spark glob nor
Hadoop's input listing sees it), then are renamed to the final name.  An existing final name is never overwritten:
:class:`~spiderd.feed.errors.FeedExistsError` (batch numbers are unique, so a clash is a bug or a misconfigured
template).  An :class:`Abort` breaks a transfer from another thread.
"""

from __future__ import annotations

import filecmp
import ftplib
import os
import posixpath
import shutil
import socket
import threading
from typing import Any, BinaryIO, Callable

from spiderd.core.feeduri import Target
from spiderd.core.fsutil import fsync_dir, unlink_quietly
from spiderd.feed.errors import FeedError, FeedExistsError


class Abort:
    """Breaks a blocking transfer from another thread: flags it and shuts its sockets down."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.is_set = False

    def register(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.is_set:
                _shutdown(sock)

    def set(self) -> None:
        with self._lock:
            self.is_set = True
            for sock in self._sockets:
                _shutdown(sock)

    def check(self) -> None:
        if self.is_set:
            raise FeedError("upload aborted")


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _FTP(ftplib.FTP):
    """ftplib.FTP whose control and data sockets an Abort can shut down."""

    def __init__(self, abort: Abort, timeout: float) -> None:
        super().__init__(timeout=timeout)
        self._abort = abort

    def connect(self, *args: Any, **kwargs: Any) -> str:
        welcome = super().connect(*args, **kwargs)
        assert self.sock is not None  # connect has made it
        self._abort.register(self.sock)
        return welcome

    def ntransfercmd(self, cmd: str, rest: Any = None) -> tuple[socket.socket, int | None]:
        conn, size = super().ntransfercmd(cmd, rest)
        self._abort.register(conn)
        return conn, size


class _Reader:
    """A file whose reads stop once the upload is aborted."""

    def __init__(self, f: BinaryIO, abort: Abort) -> None:
        self._f, self._abort = f, abort

    def read(self, size: int = -1) -> bytes:
        self._abort.check()
        return self._f.read(size)


def upload(local_path: str, target: Target, *, timeout: float = 60.0, abort: Abort | None = None,
           renamed_before: bool = False, before_rename: Callable[[], None] = lambda: None) -> None:
    """Blocking: put ``local_path`` at ``target`` under its temp name, then rename it to the final name.

    ``renamed_before`` says an earlier attempt sent the rename (``before_rename`` runs just before
    it does), so a final file equal to ours is our own upload, not a clash.
    """
    abort = abort or Abort()
    if target.scheme == "file":
        _upload_file(local_path, target, renamed_before, before_rename)
    else:
        _upload_ftp(local_path, target, timeout, abort, renamed_before, before_rename)


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


def _upload_ftp(local: str, target: Target, timeout: float, abort: Abort,
                renamed_before: bool, before_rename: Callable[[], None]) -> None:
    size = os.path.getsize(local)
    ftp = _FTP(abort, timeout)
    try:
        ftp.connect(target.host, target.port)
        ftp.login(target.user, target.password)  # anonymous when there is no user
        ftp.set_pasv(True)
        ftp.voidcmd("TYPE I")
        _ftp_makedirs_cwd(ftp, target.directory)
        if _ftp_already_there(ftp, target, size, renamed_before):
            return
        with open(local, "rb") as f:
            ftp.storbinary("STOR " + target.temp_name, _Reader(f, abort))
        stored = _ftp_size(ftp, target.temp_name)
        if stored not in (size, -1):
            raise FeedError(f"{target}: the server holds {stored} bytes of {size}")
        if _ftp_size(ftp, target.name) is not None:
            raise FeedExistsError(f"{target} appeared during the upload; not overwritten")
        before_rename()
        ftp.rename(target.temp_name, target.name)
        _quietly(ftp.quit)
    finally:
        ftp.close()


def _ftp_already_there(ftp: ftplib.FTP, target: Target, size: int, renamed_before: bool) -> bool:
    """True if an earlier attempt's rename went through; FeedExistsError if another file has the name."""
    found = _ftp_size(ftp, target.name)
    if found is None:
        return False
    if renamed_before and found in (size, -1) and _ftp_size(ftp, target.temp_name) is None:
        return True
    raise FeedExistsError(f"{target} already exists; not overwritten")


def _ftp_size(ftp: ftplib.FTP, name: str) -> int | None:
    """The size of ``name`` in the current directory, -1 if it exists but SIZE is unsupported, None if absent."""
    try:
        found = ftp.size(name)
        return -1 if found is None else found
    except ftplib.error_perm as e:
        code = str(e)[:3]
        if code == "550":
            return None
        if code not in ("500", "501", "502", "504"):
            raise
    return -1 if name in _ftp_names(ftp) else None


def _ftp_names(ftp: ftplib.FTP) -> set[str]:
    try:
        return {posixpath.basename(n) for n in ftp.nlst()}
    except ftplib.error_perm:  # "550 no files" on some servers
        return set()


def _ftp_makedirs_cwd(ftp: ftplib.FTP, directory: str) -> None:
    try:
        ftp.cwd(directory)
        return
    except ftplib.error_perm:
        pass
    parts = directory.strip("/").split("/")
    for i in range(1, len(parts) + 1):
        try:
            ftp.mkd("/" + "/".join(parts[:i]))
        except ftplib.error_perm:
            pass  # exists already (or cwd below says why not)
    ftp.cwd(directory)


def _quietly(call: Callable[[], Any]) -> None:
    try:
        call()
    except ftplib.all_errors + (AttributeError,):
        pass
