"""SIGHUP (``systemctl reload spiderd``): the whole configuration file read again, and log files reopened.

The file is read and validated again as at the start (with the command line's overrides and the sites overlay); a
bad one is one error line, shown in the status too, and the running configuration stays.  A valid one is put into
effect by :class:`~spiderd.ops.liveconfig.LiveConfig` as far as a running node can take it (the sites, the seeds and
hubs); the log names the keys that changed and those that need a restart.  twistd's own log file (``--logfile``),
if one is in use, is reopened, so that logrotate can move it away first (twistd's SIGUSR1 *rotates* it instead).
The handler is installed only when asked (``twistd`` runs; tests building services directly do not), once the
reactor runs, and removed at stop.  The file is read, parsed and validated (TOML, XPath compilation) on the live
configuration's lane, never on the reactor thread.
"""

from __future__ import annotations

import os
import signal
from types import FrameType
from typing import Any

from twisted.application.service import Service
from twisted.internet import defer
from twisted.logger import Logger

from spiderd.config import settings as cfg
from spiderd.core.logfiles import reopen_log_files
from spiderd.core.reactors import INodeReactor
from spiderd.ops.liveconfig import LiveConfig

log = Logger()


class ReloadService(Service):
    """Reloads on SIGHUP; ``reload()`` does the same when called (tests, or another trigger)."""

    name = "reload"  # type: ignore[assignment]  # Service declares it None

    def __init__(self, reactor: INodeReactor, live: LiveConfig, install: bool = True) -> None:
        """``live``: the running configuration (its file, what the command line set, its sites overlay)."""
        self._reactor = reactor
        self._live = live
        self._install = install
        self._previous: Any = None  # the SIGHUP handler before ours
        self._installed = False

    def startService(self) -> None:
        super().startService()
        if self._install:
            self._reactor.callWhenRunning(self._install_handler)

    def stopService(self) -> None:
        super().stopService()
        if self._installed:
            signal.signal(signal.SIGHUP, self._previous or signal.SIG_DFL)
            self._installed = False

    def _install_handler(self) -> None:
        if self.running:
            self._previous = signal.signal(signal.SIGHUP, self._on_signal)
            self._installed = True

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._reactor.callFromThread(self._reload_logged)

    def _reload_logged(self) -> None:
        self.reload().addErrback(lambda f: log.failure("Reload (SIGHUP) failed", f))

    def reload(self) -> defer.Deferred[bool]:
        """Reopen the log files, then apply the file again; fires with False if the file was bad."""
        reopened = reopen_log_files()
        running = self._live.settings
        source = running.source
        if not os.path.isfile(source):
            log.info("Reload (SIGHUP): {reopened} log files reopened; no configuration file to read ({source})",
                     reopened=reopened, source=source)
            return defer.succeed(True)
        log.info("Reload (SIGHUP): reading {source}; {reopened} log files reopened", source=source, reopened=reopened)
        why = "Reload (SIGHUP)"
        live = self._live  # the overlay is read when the change's turn comes (a sites API change may go first)
        d = live.change(lambda: _read(source, _overrides(running), live.settings.overlay), why, seeds=True)
        return d.addCallbacks(lambda _: True, _refused)


def _refused(failure: Any) -> bool:
    """A bad file: False (LiveConfig logged it and shows it in the status); other failures go on."""
    failure.trap(cfg.ConfigError)
    return False


def _read(source: str, overrides: dict[str, Any], overlay: Any) -> cfg.Settings:
    """Thread: the file's settings, with the command line's overrides and the sites overlay over them."""
    return cfg.load(source, overrides, overlay)


def _overrides(settings: cfg.Settings) -> dict[str, Any]:
    """What the command line set (and a reload cannot change): taken from the running settings."""
    s = settings.spiderd
    return {"spiderd.role": s.role, "spiderd.data_dir": s.data_dir, "spiderd.exit_when_done": s.exit_when_done}
