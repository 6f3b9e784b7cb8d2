"""pyftpdlib on 127.0.0.1 for the feed tests: plain FTP, or explicit FTPS (TLS_FTPHandler, pyOpenSSL) with a
certificate of the test's own CA."""

from __future__ import annotations

import logging
import threading
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pyftpdlib.authorizers import DummyAuthorizer
from pyftpdlib.handlers import DTPHandler, FTPHandler, TLS_DTPHandler, TLS_FTPHandler
from pyftpdlib.ioloop import IOLoop
from pyftpdlib.servers import FTPServer
from twisted.internet import reactor

logging.getLogger("pyftpdlib").addHandler(logging.NullHandler())  # keeps pyftpdlib from configuring logging
logging.getLogger("pyftpdlib").setLevel(logging.WARNING)

USER = "spark"
PASSWORD = "p@ss:w/rd%"


class Recording:
    """Records STOR/RNFR/RNTO names; may block a STOR, and uses a DTP handler that may drop it."""

    seen: list[tuple[str, str]]
    behaviour: dict[str, Any]

    def pre_process_command(self, line: str, cmd: str, arg: str) -> Any:
        if cmd in ("STOR", "APPE", "RNFR", "RNTO", "DELE"):
            self.seen.append((cmd, arg))
        release = self.behaviour.get("block")
        if cmd == "STOR" and release is not None:
            reactor.callFromThread(self.behaviour["entered"].callback, None)
            release.wait(30)  # a safety net so a broken test cannot hang the server thread
        return super().pre_process_command(line, cmd, arg)


class Dropping:
    """Once part of an upload has arrived, closes the control connection (``drop``) or, once, the data connection
    alone (``drop_data``), when told to."""

    def handle_read(self) -> None:
        super().handle_read()  # type: ignore[misc]
        behaviour = self.cmd_channel.behaviour  # type: ignore[attr-defined]
        if behaviour.get("drop") and self.tot_bytes_received > 10000:  # type: ignore[attr-defined]
            self.cmd_channel.close()  # type: ignore[attr-defined]
        elif behaviour.get("drop_data") and self.tot_bytes_received > 10000:  # type: ignore[attr-defined]
            behaviour["drop_data"] = False
            self.close()  # type: ignore[attr-defined]

    handle_read_event = handle_read  # pyftpdlib calls this alias


class RecordingHandler(Recording, FTPHandler):
    """Plain FTP."""


class DroppingDTP(Dropping, DTPHandler):
    """Plain FTP's data connection."""


class TLSRecordingHandler(Recording, TLS_FTPHandler):
    """Explicit FTPS; TLS required on the control and the data connections."""

    tls_control_required = True
    tls_data_required = True


class TLSDroppingDTP(Dropping, TLS_DTPHandler):
    """FTPS's data connection."""


class FTPd:
    """pyftpdlib on 127.0.0.1 in a thread: ``spark`` with a password (home ``spark/``) and anonymous (``anon/``)."""

    def __init__(self, root: Path, port: int = 0, certfile: str = "") -> None:
        self.home, self.anon = root / "spark", root / "anon"
        self.home.mkdir(parents=True, exist_ok=True)
        self.anon.mkdir(parents=True, exist_ok=True)
        self.seen: list[tuple[str, str]] = []
        self.behaviour: dict[str, Any] = {}
        self.scheme = "ftps" if certfile else "ftp"
        base, dtp = (TLSRecordingHandler, TLSDroppingDTP) if certfile else (RecordingHandler, DroppingDTP)
        extra = {"certfile": certfile, "ssl_context": None} if certfile else {}
        handler = type("Handler", (base,), {
            "authorizer": self._authorizer(), "seen": self.seen, "behaviour": self.behaviour,
            "dtp_handler": dtp, "timeout": 30, **extra})
        self.server = FTPServer(("127.0.0.1", port), handler, ioloop=IOLoop())
        self.port = self.server.address[1]
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="test-ftpd", daemon=True)
        self._thread.start()

    def _authorizer(self) -> DummyAuthorizer:
        authorizer = DummyAuthorizer()
        authorizer.add_user(USER, PASSWORD, str(self.home), perm="elradfmwMT")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # write access for anonymous warns
            authorizer.add_anonymous(str(self.anon), perm="elradfmwMT")
        return authorizer

    def _serve(self) -> None:
        while not self._stopping.is_set():
            self.server.ioloop.loop(0.02, blocking=False)
        self.server.close_all()

    def stop(self) -> None:
        """Close every socket and join the thread (idempotent)."""
        self._stopping.set()
        self._thread.join()

    def uri(self, path: str, anonymous: bool = False) -> str:
        """A feed URI for ``path`` on this server."""
        creds = "" if anonymous else f"{USER}:{quote(PASSWORD, safe='')}@"
        return f"{self.scheme}://{creds}127.0.0.1:{self.port}{path}"

    def stored(self) -> list[str]:
        """STOR arguments seen."""
        return [arg for cmd, arg in self.seen if cmd == "STOR"]


