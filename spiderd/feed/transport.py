"""How the shipper reaches a remote target: the options of ``[feed]`` that say whom to trust, and a blocking
:class:`Session` per upload (FTP, FTPS: :mod:`spiderd.feed.ftpsession`; SFTP: :mod:`spiderd.feed.sftpsession`).

A session works in one directory of the target (``makedirs_cwd``) and names files in it; every method blocks (the
shipper runs them on its lane) and an :class:`Abort` breaks it from another thread.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Protocol

from spiderd.core.feeduri import Target
from spiderd.feed.errors import FeedError


@dataclass(frozen=True, slots=True)
class TransportOptions:
    """``[feed]``'s trust settings: ``ca_file`` (PEM CAs for FTPS; "": the system's), ``insecure`` (FTPS
    certificates not checked: an explicit choice), ``known_hosts`` (OpenSSH's format, for SFTP host keys),
    ``ssh_key`` (a private key for SFTP, besides the URI's password), and the network ``timeout``."""

    ca_file: str = ""
    insecure: bool = False
    known_hosts: str = ""
    ssh_key: str = ""
    timeout: float = 60.0


class Abort:
    """Breaks a blocking transfer from another thread: flags it, shuts its sockets down, runs its closers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closers: list[Callable[[], object]] = []
        self.is_set = False

    def register(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.is_set:
                _shutdown(sock)

    def on_abort(self, close: Callable[[], object]) -> None:
        """Call ``close`` (from the aborting thread) when the transfer is aborted, at once if it is already."""
        with self._lock:
            self._closers.append(close)
            if self.is_set:
                close()

    def set(self) -> None:
        with self._lock:
            self.is_set = True
            for sock in self._sockets:
                _shutdown(sock)
            for close in self._closers:
                close()

    def check(self) -> None:
        if self.is_set:
            raise FeedError("upload aborted")


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class Session(Protocol):
    """One connection to a remote target, in one directory; blocking."""

    def makedirs_cwd(self, directory: str) -> None:
        """Create ``directory`` (and its parents) if missing; later names are in it."""

    def size(self, name: str) -> int | None:
        """The size of ``name``: None if absent, -1 if it exists but the server does not say its size."""

    def store(self, name: str, source: Any) -> None:
        """Write ``name`` from ``source`` (``read(size)``), replacing it if it exists (temp names only)."""

    def retrieve(self, name: str) -> bytes:
        """The content of ``name`` (small files: a manifest)."""

    def rename(self, old: str, new: str) -> None:
        """Rename ``old`` to ``new`` (``new`` is absent: the caller checked)."""

    def delete(self, name: str) -> None:
        """Remove ``name``; absent is fine."""

    def quit(self) -> None:
        """Say goodbye, after a good transfer (never raises)."""

    def close(self) -> None:
        """Close at once (never raises)."""


def open_session(target: Target, options: TransportOptions, abort: Abort, reactor: Any = None) -> Session:
    """A logged-in session with ``target``'s host; FeedTrustError if it is not proven to be the configured one.
    ``reactor`` runs the SFTP client (this thread waits on it)."""
    if target.scheme == "sftp":
        from spiderd.feed.sftpsession import SFTPSession

        return SFTPSession.open(target, options, abort, reactor)
    from spiderd.feed.ftpsession import FTPSession

    return FTPSession.open(target, options, abort)


class Reader:
    """A file whose reads stop once the upload is aborted."""

    def __init__(self, f: BinaryIO, abort: Abort) -> None:
        self._f, self._abort = f, abort

    def read(self, size: int = -1) -> bytes:
        self._abort.check()
        return self._f.read(size)
