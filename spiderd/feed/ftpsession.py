"""FTP and FTPS sessions (ftplib, blocking) for the shipper's uploads.

FTPS is explicit TLS: ``AUTH TLS`` on the control connection before the login (so the password never crosses
in the clear), then ``PROT P`` so every data connection is TLS too.  The server's certificate is checked against
the system's CAs (or ``[feed] ca_file``) and must name the URI's host; ``[feed] insecure = true`` skips the check,
an explicit choice.  A certificate that does not check is a :class:`~spiderd.feed.errors.FeedTrustError`.
"""

from __future__ import annotations

import ftplib
import io
import posixpath
import socket
import ssl
from typing import Any, Callable

from spiderd.core.feeduri import Target
from spiderd.feed.errors import FeedTrustError
from spiderd.feed.transport import Abort, TransportOptions


class _FTP(ftplib.FTP):
    """ftplib.FTP whose control and data sockets an Abort can shut down."""

    def __init__(self, abort: Abort, timeout: float, **kwargs: Any) -> None:
        super().__init__(timeout=timeout, **kwargs)
        self._abort = abort

    def connect(self, *args: Any, **kwargs: Any) -> str:
        welcome = super().connect(*args, **kwargs)
        assert self.sock is not None  # connect has made it
        self._abort.register(self.sock)
        return welcome

    def ntransfercmd(self, cmd: str, rest: Any = None) -> tuple[socket.socket, int | None]:
        conn, size = super().ntransfercmd(cmd, rest)  # FTPS: already wrapped in TLS
        self._abort.register(conn)
        return conn, size


    def storbinary(self, cmd: str, fp: Any, blocksize: int = 65536, callback: Any = None, rest: Any = None) -> str:
        """ftplib's, except that a TLS data connection the server closes without TLS's goodbye (pyftpdlib and
        others do) is not an error: the server's answer and the size check after it say whether all arrived."""
        self.voidcmd("TYPE I")
        with self.transfercmd(cmd, rest) as conn:
            while block := fp.read(blocksize):
                conn.sendall(block)
            if isinstance(conn, ssl.SSLSocket):
                try:
                    conn.unwrap()
                except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
                    pass
        return self.voidresp()


class _FTPS(_FTP, ftplib.FTP_TLS):
    """Explicit FTPS whose TLS sockets an Abort can shut down too."""

    def auth(self) -> str:
        answer: str = super().auth()
        assert self.sock is not None  # (connected)
        self._abort.register(self.sock)
        return answer


def tls_context(options: TransportOptions) -> ssl.SSLContext:
    """The client context of FTPS: the system's CAs (or ``ca_file``), the host name checked; or, ``insecure``,
    nothing checked."""
    context = ssl.create_default_context(cafile=options.ca_file or None)
    if options.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class FTPSession:
    """A logged-in FTP (or FTPS) connection, in one directory."""

    def __init__(self, ftp: ftplib.FTP) -> None:
        self._ftp = ftp

    @classmethod
    def open(cls, target: Target, options: TransportOptions, abort: Abort) -> FTPSession:
        ftp: _FTP = (_FTPS(abort, options.timeout, context=tls_context(options)) if target.scheme == "ftps"
                     else _FTP(abort, options.timeout))
        try:
            ftp.connect(target.host, target.port)
            _trusted(ftp.login, target, target.user, target.password)  # FTPS: AUTH TLS first; anonymous without a user
            if isinstance(ftp, _FTPS):
                ftp.prot_p()
            ftp.set_pasv(True)
            ftp.voidcmd("TYPE I")
        except BaseException:
            ftp.close()
            raise
        return cls(ftp)

    def makedirs_cwd(self, directory: str) -> None:
        try:
            self._ftp.cwd(directory)
            return
        except ftplib.error_perm:
            pass
        parts = directory.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            try:
                self._ftp.mkd("/" + "/".join(parts[:i]))
            except ftplib.error_perm:
                pass  # exists already (or cwd below says why not)
        self._ftp.cwd(directory)

    def size(self, name: str) -> int | None:
        try:
            found = self._ftp.size(name)
            return -1 if found is None else found
        except ftplib.error_perm as e:
            code = str(e)[:3]
            if code == "550":
                return None
            if code not in ("500", "501", "502", "504"):
                raise
        return -1 if name in self._names() else None

    def _names(self) -> set[str]:
        try:
            return {posixpath.basename(n) for n in self._ftp.nlst()}
        except ftplib.error_perm:  # "550 no files" on some servers
            return set()

    def store(self, name: str, source: Any) -> None:
        self._ftp.storbinary("STOR " + name, source)

    def retrieve(self, name: str) -> bytes:
        out = io.BytesIO()
        self._ftp.retrbinary("RETR " + name, out.write)
        return out.getvalue()

    def rename(self, old: str, new: str) -> None:
        self._ftp.rename(old, new)

    def delete(self, name: str) -> None:
        try:
            self._ftp.delete(name)
        except ftplib.error_perm as e:
            if str(e)[:3] != "550":
                raise

    def quit(self) -> None:
        try:
            self._ftp.quit()
        except ftplib.all_errors + (AttributeError,):
            pass

    def close(self) -> None:
        self._ftp.close()


def _trusted(call: Callable[..., Any], target: Target, *args: Any) -> Any:
    """``call(*args)``, a certificate that does not check raised as FeedTrustError."""
    try:
        return call(*args)
    except ssl.SSLCertVerificationError as e:
        raise FeedTrustError(f"{target.host_port}: the TLS certificate does not check ({e.verify_message}); set "
                             "[feed] ca_file to the CA that signed it (or insecure = true, not checking it)") from None
