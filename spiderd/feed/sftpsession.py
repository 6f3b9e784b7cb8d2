"""SFTP sessions for the shipper's uploads: Twisted Conch's SFTP client on the reactor, driven from the shipper's
lane by a blocking facade (each step is ``blockingCallFromThread``), so the upload never blocks the reactor and
the lane's thread does the file reading.

The server's host key must be in ``[feed] known_hosts`` (OpenSSH's format, ``[host]:port`` for a port other than
22): an unknown or changed key is a :class:`~spiderd.feed.errors.FeedTrustError`, never accepted.  The user logs in
with the URI's password, or with ``[feed] ssh_key``.  Needs Twisted's ``conch`` extra
(``pip install 'spiderd[sftp]'``).
"""

from __future__ import annotations

import posixpath
from typing import Any, Callable

from twisted.conch.client.knownhosts import KnownHostsFile
from twisted.conch.error import HostKeyChanged
from twisted.conch.ssh import channel, common, connection, filetransfer, keys, transport, userauth
from twisted.internet import defer, error, protocol
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFromThreads
from twisted.internet.threads import blockingCallFromThread
from twisted.python.filepath import FilePath
from twisted.python.failure import Failure

from spiderd.core.feeduri import Target
from spiderd.feed.errors import FeedError, FeedTrustError
from spiderd.feed.transport import Abort, TransportOptions

CHUNK = 32 * 1024  # bytes in one SFTP write (OpenSSH's server takes up to 256 KiB)
WINDOW = 16  # writes in flight at once


def require() -> None:
    """ImportError unless Conch can run (it needs Twisted's ``conch`` extra: bcrypt)."""
    import bcrypt  # noqa: F401  (twisted.conch.ssh.keys needs it)


def known_host_name(host: str, port: int) -> bytes:
    """The name ``known_hosts`` files this host under: ``host``, or ``[host]:port`` when the port is not 22."""
    return (host if port == 22 else f"[{host}]:{port}").encode("utf-8")


def check_known(options: TransportOptions, target: Target) -> None:
    """FeedTrustError unless ``known_hosts`` is set and names the target's host (blocking: reads the file)."""
    if not options.known_hosts:
        raise FeedTrustError(f"{target.host_port}: SFTP needs [feed] known_hosts, the host keys to trust")
    name = known_host_name(target.host, target.port)
    hosts = KnownHostsFile.fromPath(FilePath(options.known_hosts))
    if not any(entry.matchesHost(name) for entry in hosts.iterentries()):
        raise FeedTrustError(f"{target.host_port}: no host key for {name.decode()} in {options.known_hosts} "
                             "(add it: ssh-keyscan, or the server's public host key)")


class _Transport(transport.SSHClientTransport):
    """Checks the host key against known_hosts, then logs in and opens the SFTP channel."""

    factory: _Factory

    def verifyHostKey(self, hostKey: bytes, fingerprint: bytes) -> Deferred[Any]:
        f = self.factory
        name = known_host_name(f.target.host, f.target.port)
        try:
            hosts = KnownHostsFile.fromPath(FilePath(f.options.known_hosts))
            known = hosts.hasHostKey(name, keys.Key.fromString(hostKey))
        except HostKeyChanged:
            return self._refuse(f"{f.target.host_port}: the SSH host key CHANGED (not the one in "
                                f"{f.options.known_hosts}): refused")
        if not known:
            return self._refuse(f"{f.target.host_port}: its SSH host key ({fingerprint.decode()}) is not in "
                                f"{f.options.known_hosts}: refused")
        return defer.succeed(True)

    def _refuse(self, why: str) -> Deferred[Any]:
        """The host key does not check: the upload fails with why (the transport then disconnects)."""
        error = FeedTrustError(why)
        self.factory.fail(error)
        return defer.fail(error)

    def connectionSecure(self) -> None:
        self.requestService(_Auth(self.factory, _Connection(self.factory)))

    def receiveError(self, reasonCode: int, description: bytes) -> None:
        self.factory.fail(FeedError(f"SSH: {description.decode('utf-8', 'replace')}"))

    def connectionLost(self, reason: Failure | None = None) -> None:
        super().connectionLost(reason)
        why = reason.getErrorMessage() if reason is not None else "closed"
        self.factory.fail(FeedError(f"SSH connection lost: {why}"))


class _Auth(userauth.SSHUserAuthClient):
    """The URI's password, and ``ssh_key`` when set."""

    def __init__(self, factory: _Factory, service: connection.SSHConnection) -> None:
        super().__init__((factory.target.user or "anonymous").encode("utf-8"), service)
        self._factory = factory
        self._key_offered = False
        self._password = factory.target.password

    def getPassword(self, prompt: bytes | None = None) -> Deferred[bytes] | None:
        password, self._password = self._password, ""  # offered once: a wrong one is not tried again and again
        return defer.succeed(password.encode("utf-8")) if password else None

    def getPublicKey(self) -> keys.Key | None:
        path = self._factory.options.ssh_key
        if not path or self._key_offered:
            return None
        self._key_offered = True
        key: keys.Key = keys.Key.fromFile(path).public()
        return key

    def getPrivateKey(self) -> Deferred[keys.Key]:
        return defer.succeed(keys.Key.fromFile(self._factory.options.ssh_key))


class _Connection(connection.SSHConnection):
    def __init__(self, factory: _Factory) -> None:
        super().__init__()
        self._factory = factory

    def serviceStarted(self) -> None:
        self.openChannel(_SFTPChannel(self._factory, conn=self))


class _SFTPChannel(channel.SSHChannel):
    name = b"session"

    def __init__(self, factory: _Factory, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._factory = factory
        self._client: filetransfer.FileTransferClient | None = None

    def channelOpen(self, specificData: bytes) -> None:
        assert self.conn is not None  # (an open channel has its connection)
        d = self.conn.sendRequest(self, b"subsystem", common.NS(b"sftp"), wantReply=True)
        d.addCallbacks(self._subsystem, lambda f: self._factory.fail(FeedError("the server has no SFTP subsystem")))

    def _subsystem(self, _: Any) -> None:
        self._client = filetransfer.FileTransferClient()
        self._client.makeConnection(self)
        self.dataReceived = self._client.dataReceived  # type: ignore[method-assign]
        self._factory.opened(self._client)

    def closed(self) -> None:
        """The channel (or the whole connection) closed: every request waiting for an answer fails now."""
        super().closed()
        if self._client is not None:
            self._client.connectionLost(Failure(error.ConnectionLost("the SFTP channel closed")))
        self._factory.fail(FeedError("the SFTP channel closed"))

    def openFailed(self, reason: Any) -> None:
        self._factory.fail(FeedError(f"SSH channel refused: {reason}"))


class _Factory(protocol.ClientFactory):
    """One connection; ``ready`` fires with the SFTP client, or fails once with why not."""

    protocol = _Transport  # type: ignore[assignment]

    def __init__(self, target: Target, options: TransportOptions) -> None:
        self.target, self.options = target, options
        self.ready: Deferred[filetransfer.FileTransferClient] = Deferred()
        self.transport: Any = None

    def buildProtocol(self, addr: Any) -> Any:
        built = super().buildProtocol(addr)
        self.transport = built
        return built

    def opened(self, client: filetransfer.FileTransferClient) -> None:
        if not self.ready.called:
            self.ready.callback(client)

    def fail(self, error: BaseException) -> None:
        if not self.ready.called:
            self.ready.errback(Failure(error))

    def clientConnectionFailed(self, connector: Any, reason: Failure) -> None:
        self.fail(FeedError(f"cannot connect: {reason.getErrorMessage()}"))


class SFTPSession:
    """A logged-in SFTP connection, in one directory: each method runs its step on the reactor and waits."""

    def __init__(self, reactor: Any, factory: _Factory, client: filetransfer.FileTransferClient,
                 timeout: float) -> None:
        self._reactor, self._factory, self._client, self._timeout = reactor, factory, client, timeout
        self._dir = "/"

    @classmethod
    def open(cls, target: Target, options: TransportOptions, abort: Abort, reactor: Any = None) -> SFTPSession:
        require()
        check_known(options, target)
        if reactor is None:
            from twisted.internet import reactor
        factory = _Factory(target, options)

        def connect() -> Deferred[Any]:
            reactor.connectTCP(target.host, target.port, factory, timeout=options.timeout)
            return factory.ready

        abort.on_abort(lambda: reactor.callFromThread(_drop, factory))
        try:
            client = _call(reactor, options.timeout, connect)
        except BaseException:
            reactor.callFromThread(_drop, factory)
            raise
        return cls(reactor, factory, client, options.timeout)

    def _run(self, step: Callable[..., Deferred[Any]], *args: Any) -> Any:
        return _call(self._reactor, self._timeout, step, *args)

    def _path(self, name: str) -> str:
        return posixpath.join(self._dir, name)

    def makedirs_cwd(self, directory: str) -> None:
        parts = directory.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            try:
                self._run(self._client.makeDirectory, "/" + "/".join(parts[:i]), {})
            except filetransfer.SFTPError:
                pass  # exists already (getAttrs below says if not)
        self._run(self._client.getAttrs, directory)
        self._dir = directory

    def size(self, name: str) -> int | None:
        try:
            attrs = self._run(self._client.getAttrs, self._path(name))
        except filetransfer.SFTPError as e:
            if e.code == filetransfer.FX_NO_SUCH_FILE:
                return None
            raise
        return int(attrs.get("size", -1))

    def store(self, name: str, source: Any) -> None:
        flags = filetransfer.FXF_WRITE | filetransfer.FXF_CREAT | filetransfer.FXF_TRUNC
        handle = self._run(self._client.openFile, self._path(name), flags, {})
        try:
            offset = 0
            while True:
                chunks = []
                for _ in range(WINDOW):
                    data = source.read(CHUNK)
                    if not data:
                        break
                    chunks.append((offset, data))
                    offset += len(data)
                if not chunks:
                    break
                self._run(_write_all, handle, chunks)
        finally:
            self._run(handle.close)

    def retrieve(self, name: str) -> bytes:
        handle = self._run(self._client.openFile, self._path(name), filetransfer.FXF_READ, {})
        data = b""
        try:
            while True:
                try:
                    data += self._run(handle.readChunk, len(data), CHUNK)
                except EOFError:
                    return data
        finally:
            self._run(handle.close)

    def rename(self, old: str, new: str) -> None:
        self._run(self._client.renameFile, self._path(old), self._path(new))

    def delete(self, name: str) -> None:
        try:
            self._run(self._client.removeFile, self._path(name))
        except filetransfer.SFTPError as e:
            if e.code != filetransfer.FX_NO_SUCH_FILE:
                raise

    def quit(self) -> None:
        pass  # closing is the goodbye

    def close(self) -> None:
        self._reactor.callFromThread(_drop, self._factory)


def _write_all(handle: Any, chunks: list[tuple[int, bytes]]) -> Deferred[Any]:
    """The reactor: ``chunks`` written at their offsets, all in flight at once."""
    return defer.gatherResults([handle.writeChunk(offset, data) for offset, data in chunks], consumeErrors=True)


def _call(reactor: IReactorFromThreads, timeout: float, step: Callable[..., Deferred[Any]], *args: Any) -> Any:
    """From the lane: run ``step(*args)`` on the reactor and wait for it, at most ``timeout`` seconds."""

    def run() -> Deferred[Any]:
        d = defer.maybeDeferred(step, *args)
        d.addTimeout(timeout, reactor)  # type: ignore[arg-type]
        return d.addErrback(_first_error)

    return blockingCallFromThread(reactor, run)


def _first_error(failure: Failure) -> Failure:
    """A gatherResults failure as the error inside it."""
    if failure.check(defer.FirstError):
        return failure.value.subFailure  # type: ignore[no-any-return]
    return failure


def _drop(factory: _Factory) -> None:
    if factory.transport is not None and factory.transport.transport is not None:
        factory.transport.transport.loseConnection()

