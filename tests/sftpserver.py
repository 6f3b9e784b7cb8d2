"""A real SFTP server on 127.0.0.1 for the feed tests: Twisted Conch's SSH server with its SFTP subsystem over a
directory (paths from the server's root map into it), one user with a password, an ECDSA host key, and a
``known_hosts`` file naming it.  It runs on the test's reactor."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec
from twisted.conch.avatar import ConchUser
from twisted.conch.interfaces import IConchUser
from twisted.conch.ssh import factory, filetransfer, keys, session
from twisted.conch.unix import SFTPServerForUnixConchUser
from twisted.cred import checkers, portal
from twisted.internet import defer
from twisted.python import components
from twisted.python.filepath import FilePath
from zope.interface import implementer

USER = "spark"
PASSWORD = "s3cr:t/pw%"


class _Avatar(ConchUser):
    """A user whose files are the server's directory, run as the test's own user."""

    def __init__(self, server: SFTPd) -> None:
        super().__init__()
        self.server = server
        self.channelLookup[b"session"] = session.SSHSession
        self.subsystemLookup[b"sftp"] = filetransfer.FileTransferServer

    def getHomeDir(self) -> FilePath[str]:
        return FilePath(str(self.server.root))

    def _runAsUser(self, f: Any, *args: Any, **kw: Any) -> Any:
        """``f(*args, **kw)``, or each (f, args, kw) of a list of them (as Conch's own test avatar)."""
        calls = f if isinstance(f, (list, tuple)) else [(f, args, kw)]
        result = None
        for call in calls:
            result = call[0](*(call[1] if len(call) > 1 else ()), **(call[2] if len(call) > 2 else {}))
        return result


class _Files(SFTPServerForUnixConchUser):
    """The directory's files; paths from ``/`` map into it; a write may drop the connection when told to."""

    def _absPath(self, path: Any) -> str:
        text = path.decode() if isinstance(path, bytes) else path
        return os.path.join(str(self.avatar.server.root), text.lstrip("/"))

    def openFile(self, filename: Any, flags: int, attrs: Any) -> Any:
        opened = super().openFile(filename, flags, attrs)
        server = self.avatar.server
        write = opened.writeChunk

        def writeChunk(offset: int, data: bytes) -> Any:
            server.stored.append(os.path.basename(self._absPath(filename)))
            if server.behaviour.get("drop") and offset > 10000:
                self.avatar.conn.transport.loseConnection()
                return defer.Deferred()  # never answered: the connection is gone
            return write(offset, data)

        opened.writeChunk = writeChunk
        return opened

    def renameFile(self, oldpath: Any, newpath: Any) -> Any:
        self.avatar.server.renamed.append((os.path.basename(self._absPath(oldpath)),
                                           os.path.basename(self._absPath(newpath))))
        return super().renameFile(oldpath, newpath)


components.registerAdapter(_Files, _Avatar, filetransfer.ISFTPServer)


@implementer(portal.IRealm)
class _Realm:
    def __init__(self, server: SFTPd) -> None:
        self.server = server

    def requestAvatar(self, avatar_id: Any, mind: Any, *interfaces: Any) -> Any:
        return IConchUser, _Avatar(self.server), lambda: None


def new_host_key() -> keys.Key:
    return keys.Key(ec.generate_private_key(ec.SECP256R1()))


class SFTPd:
    """Conch's SSH server with SFTP on 127.0.0.1 (``listen`` on a reactor; ``stop`` closes it)."""

    def __init__(self, root: Path, host_key: keys.Key | None = None) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.host_key = host_key or new_host_key()
        self.behaviour: dict[str, Any] = {}
        self.stored: list[str] = []
        self.renamed: list[tuple[str, str]] = []
        self.port = 0
        self._port: Any = None

    def factory(self) -> factory.SSHFactory:
        made = factory.SSHFactory()
        checker = checkers.InMemoryUsernamePasswordDatabaseDontUse(**{USER: PASSWORD.encode()})
        made.portal = portal.Portal(_Realm(self), [checker])
        made.publicKeys = {self.host_key.sshType(): self.host_key.public()}
        made.privateKeys = {self.host_key.sshType(): self.host_key}
        return made

    def listen(self, reactor: Any, port: int = 0) -> SFTPd:
        self._port = reactor.listenTCP(port, self.factory(), interface="127.0.0.1")
        self.port = self._port.getHost().port
        return self

    def stop(self) -> Any:
        return defer.maybeDeferred(self._port.stopListening) if self._port is not None else None

    def known_hosts(self, path: Path, key: keys.Key | None = None, port: int | None = None) -> str:
        """A known_hosts file naming this server (or ``key``) as OpenSSH writes it."""
        public = (key or self.host_key).public().toString("openssh").decode()
        path.write_text(f"[127.0.0.1]:{port or self.port} {public}\n")
        return str(path)

    def uri(self, path: str) -> str:
        from urllib.parse import quote

        return f"sftp://{USER}:{quote(PASSWORD, safe='')}@127.0.0.1:{self.port}{path}"
