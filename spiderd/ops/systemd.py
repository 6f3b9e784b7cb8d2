"""systemd integration without a dependency: sd_notify readiness, watchdog and stopping.

The protocol is one datagram per message to the AF_UNIX socket named by
``$NOTIFY_SOCKET`` (``@`` starts an abstract name).  ``READY=1`` is sent once
every other service has started (this service is added last, so it starts
last and stops first), ``WATCHDOG=1`` every half of ``$WATCHDOG_USEC`` from
the reactor (a stuck reactor stops the pings and systemd restarts the unit),
``STOPPING=1`` when the stop begins.  Without ``$NOTIFY_SOCKET`` it does nothing.
"""

from __future__ import annotations

import os
import socket
from typing import Callable

from twisted.application.service import Service
from twisted.internet import task
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

log = Logger()


def notify(message: str, path: str | None = None) -> bool:
    """Send one sd_notify datagram; False (and a log line) if it could not be sent."""
    path = path if path is not None else os.environ.get("NOTIFY_SOCKET", "")
    if not path:
        return False
    address = "\0" + path[1:] if path.startswith("@") else path
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.setblocking(False)
            s.sendto(message.encode(), address)
        return True
    except OSError as e:
        log.warn("sd_notify to {path} failed: {error}", path=path, error=e)
        return False


class SystemdNotifier(Service):
    """READY=1 at start, WATCHDOG=1 from the reactor, STOPPING=1 at stop; STATUS= lines from ``status``."""

    name = "systemd"  # type: ignore[assignment]  # Service declares it None

    def __init__(self, clock: IReactorTime, environ: dict[str, str] | None = None,
                 status: Callable[[], str] | None = None, healthy: Callable[[], bool] | None = None) -> None:
        env = os.environ if environ is None else environ
        self._path = env.get("NOTIFY_SOCKET", "")
        self._watchdog_usec = int(env.get("WATCHDOG_USEC", "0") or 0)
        self._status = status
        self._healthy = healthy  # False: no WATCHDOG=1, so systemd restarts a node whose loop is failing
        self._loop = task.LoopingCall(self._ping)
        self._loop.clock = clock

    def startService(self) -> None:
        super().startService()
        if not self._path:
            return
        notify("READY=1\nSTATUS=" + (self._status() if self._status else "running"), self._path)
        if self._watchdog_usec:
            self._loop.start(self._watchdog_usec / 2e6, now=True).addErrback(lambda f: log.failure("watchdog", f))

    def stopService(self) -> None:
        super().stopService()
        if self._loop.running:
            self._loop.stop()
        if self._path:
            notify("STOPPING=1", self._path)

    def _ping(self) -> None:
        if self._healthy is not None and not self._healthy():
            log.warn("Not feeding systemd's watchdog: the node is failing (see the errors above)")
            return
        message = "WATCHDOG=1"
        if self._status is not None:
            try:
                message += "\nSTATUS=" + self._status()
            except Exception:
                log.failure("status for systemd")
        notify(message, self._path)
