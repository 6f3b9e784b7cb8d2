"""SIGHUP (``systemctl reload spiderd``): seeds and hubs again from the configuration file, and log files reopened.

The file is read and validated again as at the start; a bad one is one error
line, and the running configuration stays.  Only ``pool.seeds``, ``pool.hubs``
and ``pool.hub_refresh_span`` take effect: every other change needs a restart.
twistd's own log file (``--logfile``), if one is in use, is reopened, so that
logrotate can move it away first (twistd's SIGUSR1 *rotates* it instead).
The handler is installed only when asked (``twistd`` runs; tests building
services directly do not), once the reactor runs, and removed at stop.  The
file is read, parsed and validated (TOML, XPath compilation) on a lane of its
own, never on the reactor thread.
"""

from __future__ import annotations

import os
import signal
from types import FrameType
from typing import TYPE_CHECKING, Any

from twisted.application.service import Service
from twisted.internet import defer
from twisted.logger import Logger

from spiderd.config import settings as cfg
from spiderd.config.sections import SpiderdSection
from spiderd.core.blocking import Lane
from spiderd.core.logfiles import reopen_log_files
from spiderd.core.reactors import INodeReactor

if TYPE_CHECKING:
    from spiderd.frontier.seeds import SeedService

log = Logger()


class ReloadService(Service):
    """Reloads on SIGHUP; ``reload()`` does the same when called (tests, or another trigger)."""

    name = "reload"  # type: ignore[assignment]  # Service declares it None

    def __init__(self, reactor: INodeReactor, source: str, node: SpiderdSection, lane: Lane,
                 seeds: SeedService | None = None, install: bool = True) -> None:
        """``source``: the configuration file; ``node``: the running ``[spiderd]`` section (what the command line
        may have set, which a reload keeps)."""
        self._reactor = reactor
        self._lane = lane
        self._source = source
        self._node = node
        self._seeds = seeds
        self._install = install
        self._previous: Any = None  # the SIGHUP handler before ours
        self._installed = False

    def startService(self) -> None:
        super().startService()
        self._lane.start()
        if self._install:
            self._reactor.callWhenRunning(self._install_handler)

    def stopService(self) -> None:
        super().stopService()
        if self._installed:
            signal.signal(signal.SIGHUP, self._previous or signal.SIG_DFL)
            self._installed = False
        self._lane.stop()

    def _install_handler(self) -> None:
        if self.running:
            self._previous = signal.signal(signal.SIGHUP, self._on_signal)
            self._installed = True

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._reactor.callFromThread(self._reload_logged)

    def _reload_logged(self) -> None:
        self.reload().addErrback(lambda f: log.failure("Reload (SIGHUP) failed", f))

    def reload(self) -> defer.Deferred[bool]:
        """Reopen the log files, then load seeds and hubs from the file; fires with False if the file was bad."""
        reopened = reopen_log_files()
        source = self._source
        d = self._lane.run(_read, source, self._overrides())
        return d.addCallback(self._apply, source, reopened)

    def _apply(self, fresh: cfg.Settings | str | None, source: str, reopened: int) -> Any:
        if fresh is None:
            log.info("Reload (SIGHUP): {reopened} log files reopened; no configuration file to read ({source})",
                     reopened=reopened, source=source)
            return True
        if isinstance(fresh, str):
            log.error("Reload (SIGHUP) refused: configuration error: {error}; the running configuration is kept",
                      error=fresh)
            return False
        if self._seeds is None:
            log.info("Reload (SIGHUP): {source} is valid; no seeds in the {role} role; {reopened} log files reopened",
                     source=source, role=self._node.role, reopened=reopened)
            return True
        log.info("Reload (SIGHUP): {seeds} seeds and {hubs} hubs from {source}; {reopened} log files reopened "
                 "(other changes need a restart)", seeds=len(fresh.pool.seeds), hubs=len(fresh.pool.hubs), source=source,
                 reopened=reopened)
        d = defer.maybeDeferred(self._seeds.load, fresh.pool.seeds, fresh.pool.hubs, fresh.pool.hub_refresh_span)
        return d.addCallback(lambda _: True)

    def _overrides(self) -> dict[str, Any]:
        """What the command line set (and a reload cannot change): taken from the running settings."""
        s = self._node
        return {"spiderd.role": s.role, "spiderd.data_dir": s.data_dir, "spiderd.exit_when_done": s.exit_when_done}


def _read(source: str, overrides: dict[str, Any]) -> cfg.Settings | str | None:
    """Thread: the file's settings, the configuration error as text, or None when there is no file."""
    if not os.path.isfile(source):
        return None
    try:
        return cfg.load(source, overrides)
    except cfg.ConfigError as e:
        return str(e)

