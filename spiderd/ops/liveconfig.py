"""The running configuration, and every change made to it while the node runs (a reload, the sites API).

A change is a whole new :class:`~spiderd.config.settings.Settings`, validated as at the start (the file, the command
line's overrides and the sites overlay: :func:`spiderd.config.settings.from_dict`, on a lane, never on the reactor).
:meth:`LiveConfig.apply` puts into effect what a running node can take (:mod:`spiderd.config.changes`): the sites'
rules in place (the parse pool's :class:`~spiderd.fetch.extract.Rules`, which the crawler, the batcher, the render
modes and the API all hold, and the fetcher's per-site headers, proxies and cookies), the seeds and hubs, and
through its tuners the other live keys (the hosts' politeness: the pool's, the worker's, the sub-requests').  It
drops no connection, lease or fetch in flight: pages parsed from then on use the new rules.  It logs the keys that
changed and those that need a restart; the status (``GET /api/status``, ``config``) shows them, and the last
refused change with its error.  Changes are made one at a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from spiderd.config import settings as cfg
from spiderd.config.changes import changed_keys, changed_sites, needs_restart, touches
from spiderd.config.overlay import merge_sites
from spiderd.core.blocking import Lane

if TYPE_CHECKING:
    from spiderd.core.rules import Site
    from spiderd.fetch.extract import Rules
    from spiderd.frontier.seeds import SeedService

log = Logger()
Validate = Callable[[], cfg.Settings]  # builds the new settings (on the lane); raises ConfigError
Who = tuple[str, str]  # who made a change (a user name, "SIGHUP"), and how ("put", "delete", "reload")
Tuner = Callable[[cfg.Settings, list[str]], object]  # told each applied change: the new settings, the changed keys


class LiveConfig(Service):
    """The node's running settings and the parts that take a change live (see the module's docstring); a service
    (its name: ``config``) for its lane."""

    name = "config"  # type: ignore[assignment]  # Service declares it None

    def __init__(self, settings: cfg.Settings, clock: IReactorTime, lane: Lane, rules: Rules,
                 followers: Sequence[Callable[[tuple[Site, ...]], object]] = (), seeds: SeedService | None = None,
                 renders: bool = False, tuners: Sequence[Tuner] = (), live_keys: frozenset[str] = frozenset()) -> None:
        """``followers``: the parts told the new sites besides ``rules`` (the fetcher's ``set_sites``, the sitemap
        reader's); ``renders``: the node runs a render pool (a site may switch to rendering without a restart);
        ``tuners``: the parts told each applied change (see :func:`on_keys`); ``live_keys``: the keys the node takes
        live besides LIVE_KEYS (those of the parts it runs, such as a sitemap reader's; a site's key by its name)."""
        self.settings = self.started = settings
        self._clock = clock
        self.lane = lane
        self._rules = rules
        self._followers = tuple(followers)
        self._seeds = seeds
        self._renders = renders
        self._tuners = tuple(tuners)
        self._live_keys = live_keys
        self._lock = defer.DeferredLock()
        self.error: str | None = None  # the last refused change's error, until a change is applied
        self.error_at: float | None = None
        self.changed_at: float | None = None
        self.listeners: list[Callable[[cfg.Settings, list[str], Who], Any]] = []  # called after each applied change

    def startService(self) -> None:
        super().startService()
        self.lane.start()

    def stopService(self) -> None:
        super().stopService()
        self.lane.stop()

    @property
    def rules(self) -> Rules:
        """The rules pages are parsed with, as they are now."""
        return self._rules

    def change(self, validate: Validate, why: str, seeds: bool = False,
               who: Who = ("SIGHUP", "reload")) -> Deferred[list[str]]:
        """Validate new settings on the lane, then apply them (with ``seeds``: load seeds and hubs again, as a
        reload does); fires with the changed keys, or fails with the ConfigError (the running settings kept)."""
        return self._lock.run(self._change, validate, why, seeds, who)

    @defer.inlineCallbacks
    def _change(self, validate: Validate, why: str, seeds: bool, who: Who) -> Any:
        try:
            fresh = yield self.lane.run(validate)
        except cfg.ConfigError as e:
            self.refused(str(e), why)
            raise
        keys = self.apply(fresh, why, who)
        if seeds and self._seeds is not None:
            yield self._seeds.load(fresh.pool.seeds, fresh.pool.hubs, fresh.pool.hub_refresh_span)
        return keys

    def refused(self, error: str, why: str) -> None:
        """A change was refused: the running settings stay; the error is logged and shown in the status."""
        self.error, self.error_at = error, self._clock.seconds()
        log.error("{why} refused: configuration error: {error}; the running configuration is kept", why=why,
                  error=error)

    def apply(self, fresh: cfg.Settings, why: str, who: Who = ("SIGHUP", "reload")) -> list[str]:
        """Put ``fresh`` into effect as far as a running node can; the keys that changed."""
        keys = changed_keys(self.settings, fresh)
        if changed_sites(keys):
            self._rules.replace(fresh.sites)
            for follow in self._followers:
                follow(fresh.sites)
        for tune in self._tuners:
            tune(fresh, keys)
        self.settings, self.error, self.error_at = fresh, None, None
        self.changed_at = self._clock.seconds()
        later = [key for key in keys if self._needs_restart(key)]
        log.info("{why}: {changed}; {later}; site rules {digest}", why=why,
                 changed="changed: " + ", ".join(keys) if keys else "nothing changed",
                 later="needs a restart: " + ", ".join(later) if later else "no restart needed",
                 digest=self._rules.digest)
        for listener in self.listeners:
            listener(fresh, keys, who)
        return keys

    def site_tables(self) -> dict[str, dict[str, Any]]:
        """Every site's table as it is in force (the file's, or the overlay's), by name, in order."""
        settings = self.settings
        tables, _ = merge_sites(list(settings.raw.get("sites", [])), settings.overlay, settings.source)
        return {site.name: {**table, "name": site.name} for site, table in zip(settings.sites, tables)}

    def restart_needed(self) -> list[str]:
        """The keys changed since the start that the node takes only at its next start."""
        return [key for key in changed_keys(self.started, self.settings) if self._needs_restart(key)]

    def _needs_restart(self, key: str) -> bool:
        if touches([key], self._live_keys):
            return False
        if key.startswith("sites.") and key.endswith(".render") and not self._renders:
            name = key[len("sites."):].rpartition(".")[0]
            return any(site.name == name and site.render != "never" for site in self.settings.sites)
        return needs_restart(key)

    def status(self) -> dict[str, Any]:
        """The ``config`` part of the status: the file, the rules' version, the last change or refusal."""
        return {"source": self.settings.source, "rules": self._rules.digest, "sites": len(self.settings.sites),
                "changed_at": self.changed_at, "error": self.error, "error_at": self.error_at,
                "restart_needed": self.restart_needed()}


def on_keys(wanted: frozenset[str], apply: Callable[[cfg.Settings], object], what: str) -> Tuner:
    """A tuner that calls ``apply`` with the new settings when one of the ``wanted`` keys changed (as
    :func:`~spiderd.config.changes.touches` reads them); a failure (of the Deferred it returns) is logged."""
    def tune(fresh: cfg.Settings, keys: list[str]) -> None:
        if touches(keys, wanted):
            d = defer.maybeDeferred(apply, fresh)
            d.addErrback(lambda f: log.failure("Applying the new {what} failed", f, what=what))
    return tune
