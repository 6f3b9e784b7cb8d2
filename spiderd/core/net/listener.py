"""Listening for both HTTP APIs (the node's and the worker's): a Twisted server endpoint string, opened at once.

The string is checked at load (:mod:`spiderd.config.listen`): ``tcp:6810:interface=127.0.0.1:backlog=1024``,
``tcp6:...``, ``unix:/run/spiderd/api.sock`` or a socket systemd hands over, ``systemd:domain=INET:index=0``.
Each of these listens synchronously in Twisted, so a taken address fails the start at once, naming the keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IListeningPort, IProtocolFactory
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core.net.serving import BACKLOG, HEADER_TIMEOUT, IDLE_TIMEOUT
from spiderd.core.reactors import IServingClock

log = Logger()


@dataclass(frozen=True, slots=True)
class Listen:
    """Where an API listens (a server endpoint string) and how long a connection may take over its headers or
    stay idle (seconds)."""

    endpoint: str = f"tcp:6810:interface=127.0.0.1:backlog={BACKLOG}"
    header_timeout: float = HEADER_TIMEOUT
    idle_timeout: float = IDLE_TIMEOUT


class Listener:
    """One API's listening port: ``label`` names the API in logs, ``keys`` the settings that chose the address."""

    def __init__(self, reactor: IServingClock, endpoint: str, label: str, keys: str) -> None:
        self._reactor = reactor
        self.endpoint = endpoint
        self.label = label
        self.keys = keys
        self.port: IListeningPort | None = None

    def open(self, factory: IProtocolFactory) -> IListeningPort:
        """Listen now (once); raises the endpoint's error (CannotListenError, a missing systemd socket) after
        logging it."""
        if self.port is None:
            try:
                endpoint = serverFromString(self._reactor, self.endpoint)
            except (IndexError, KeyError):  # systemd's socket looked up by index or name: not passed
                error = ValueError(f"{self.endpoint}: systemd passed no such socket (is the socket unit active, and "
                                   "spiderd started by it in the foreground?)")
                self._failed(error)
                raise error from None
            self.port = self._at_once(endpoint.listen(factory))
        return self.port

    def _at_once(self, listening: Deferred[IListeningPort]) -> IListeningPort:
        """The port of a listen that fired already (every kind spiderd takes does), or its error raised."""
        box: list[IListeningPort | Failure] = []
        listening.addBoth(box.append)
        assert box, f"{self.endpoint!r} did not listen at once"
        if isinstance(box[0], Failure):
            self._failed(box[0].value)
            box[0].raiseException()
        assert not isinstance(box[0], Failure)
        return box[0]

    def _failed(self, error: BaseException) -> None:
        log.error("{label}: cannot listen on {endpoint} ({keys}): {error}", label=self.label, endpoint=self.endpoint,
                  keys=self.keys, error=str(error))

    def close(self) -> Deferred[None] | None:
        """Stop listening (None when not listening)."""
        port, self.port = self.port, None
        return port.stopListening() if port is not None else None

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) of a TCP port (known once listening, even when port 0 was asked)."""
        assert self.port is not None, f"the {self.label} is not listening"
        host = self.port.getHost()
        assert isinstance(host, (IPv4Address, IPv6Address)), f"the {self.label} listens on {host}, not TCP"
        return host.host, host.port

    @property
    def url(self) -> str:
        """``http://HOST:PORT/`` for a TCP port, ``unix:PATH`` for a UNIX socket."""
        assert self.port is not None, f"the {self.label} is not listening"
        host = self.port.getHost()
        if isinstance(host, UNIXAddress):
            name = host.name
            return "unix:" + (name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name))
        address, port = self.address
        return f"http://{f'[{address}]' if ':' in address else address}:{port}/"

