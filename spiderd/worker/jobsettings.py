"""The Scrapy settings a spiderd job honours, read as Scrapy reads them, and what the worker makes of them.

=================================  ============================================================================
``DISTRIBUTED_START_URLS``         the job's URLs (a JSON list; see :mod:`.validate`)
``FEED_URI``, ``FEEDS``            where the items go: ``FEEDS`` in Scrapy's dict form, one JSON-lines feed
``FEED_FORMAT``                    ``jsonlines`` (or ``jl``), the only format a spiderd job writes
``DOWNLOAD_DELAY``                 seconds between this job's request starts to one host (0-300; not
                                   randomised), on top of the worker's per-host politeness: the larger wins
``CONCURRENT_REQUESTS``            this job's URLs in flight (within the worker's slots)
``CONCURRENT_REQUESTS_PER_DOMAIN`` this job's requests in flight per host (within the worker's per host)
``USER_AGENT``                     this job's requests' user agent, and the robots.txt group they obey
``ROBOTSTXT_OBEY``                 ``False``: this job's requests are not checked against robots.txt
``SPIDERD_SITE_RULES``             the site's extraction rules of the frontier that sent the job (its pages are
                                   extracted with them: :mod:`spiderd.config.jobrules`)
``DISTRIBUTED_RECRAWL``            the job's URLs that are recrawls, with their previous fetch and validators (a
                                   JSON object, see :mod:`spiderd.core.recrawls`): fetched conditionally; a 304
                                   is done with no item line, a 200's item says ``"recrawl": true``
=================================  ============================================================================

Every other setting is ignored: its name is listed in the job's ``ignored_settings`` and logged as a
warning.  A bad value is refused with a message naming the setting, as Scrapy would fail on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from spiderd.core import jsontext, recrawls

HONOURED = ("DISTRIBUTED_START_URLS", "FEED_URI", "FEEDS", "FEED_FORMAT", "DOWNLOAD_DELAY", "CONCURRENT_REQUESTS",
            "CONCURRENT_REQUESTS_PER_DOMAIN", "USER_AGENT", "ROBOTSTXT_OBEY", "SPIDERD_SITE_RULES", recrawls.SETTING)
MAX_DELAY = 300.0  # as the Crawl-delay honoured at most: a job cannot park a host (and its slot) for longer
MAX_CONCURRENCY = 100_000
MAX_USER_AGENT = 512
JSON_LINES = ("jsonlines", "jl")  # Scrapy's names of its JsonLinesItemExporter
FEED_OPTIONS_KEPT = ("format", "encoding")
_TRUE, _FALSE = ("True", "true", "1"), ("False", "false", "0")
MAX_IGNORED = 50  # names listed, at most
MAX_NAME = 100
MAX_RECRAWLS = 1_000_000  # entries of DISTRIBUTED_RECRAWL (a job's URLs are fewer: worker.max_job_urls)


class SettingError(ValueError):
    """A setting's value that a spiderd job cannot take; the message starts with the setting's name."""


@dataclass(frozen=True)
class JobOptions:
    """What a job's honoured settings ask for (0, None or True: not set)."""

    feed_uri: str | None = None
    download_delay: float = 0.0
    concurrent_requests: int = 0
    per_domain: int = 0
    user_agent: str | None = None
    robots: bool = True
    ignored: tuple[str, ...] = ()  # options of its FEEDS entry that a spiderd job does not use
    recrawl: Mapping[str, recrawls.Recrawl] = field(default_factory=dict)  # URL as sent -> its previous fetch

    def fetch_options(self) -> dict[str, Any]:
        """The fetcher's per-request arguments (empty for a job that sets neither)."""
        options: dict[str, Any] = {}
        if self.user_agent is not None:
            options["user_agent"] = self.user_agent
        if not self.robots:
            options["robots"] = False
        return options

    def in_effect(self, config: Any) -> str:
        """The settings that act on the job, within the worker's limits (``config``), for its "started" line."""
        said = []
        if self.concurrent_requests:
            said.append(f"CONCURRENT_REQUESTS={self.concurrent_requests} (the worker runs {config.concurrency} "
                        "URLs at once over all jobs)")
        if self.per_domain:
            said.append(f"CONCURRENT_REQUESTS_PER_DOMAIN={self.per_domain} (the worker's per host: "
                        f"{config.per_host_concurrency})")
        if self.download_delay:
            said.append(f"DOWNLOAD_DELAY={self.download_delay:g} (the worker's per-host delay: "
                        f"{config.per_host_delay:g} s; the larger applies)")
        if self.user_agent is not None:
            said.append(f"USER_AGENT={self.user_agent!r}")
        if not self.robots:
            said.append("ROBOTSTXT_OBEY=False (robots.txt not checked)")
        if self.recrawl:
            said.append(f"{recrawls.SETTING}: {len(self.recrawl)} recrawls (conditional GET; a 304 makes no item)")
        return "; settings: " + ", ".join(said) if said else ""


def split(raw: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The honoured settings, and the names of the others (sorted, at most :data:`MAX_IGNORED`)."""
    honoured = {name: value for name, value in raw.items() if name in HONOURED}
    ignored = sorted(name[:MAX_NAME] for name in raw if name not in HONOURED)
    if len(ignored) > MAX_IGNORED:
        ignored = ignored[:MAX_IGNORED] + [f"... and {len(ignored) - MAX_IGNORED} more"]
    return honoured, ignored


def job_options(settings: Mapping[str, str]) -> JobOptions:
    """Read the honoured settings; raises :class:`SettingError`."""
    feed_uri, ignored = _feed(settings)
    return JobOptions(
        feed_uri=feed_uri,
        download_delay=_delay(settings.get("DOWNLOAD_DELAY")),
        concurrent_requests=_count("CONCURRENT_REQUESTS", settings.get("CONCURRENT_REQUESTS")),
        per_domain=_count("CONCURRENT_REQUESTS_PER_DOMAIN", settings.get("CONCURRENT_REQUESTS_PER_DOMAIN")),
        user_agent=_user_agent(settings.get("USER_AGENT")),
        robots=_bool("ROBOTSTXT_OBEY", settings.get("ROBOTSTXT_OBEY"), True),
        ignored=ignored,
        recrawl=_recrawl(settings.get(recrawls.SETTING)),
    )


def _recrawl(raw: str | None) -> dict[str, recrawls.Recrawl]:
    if raw is None:
        return {}
    try:
        return recrawls.parse(raw, MAX_RECRAWLS)
    except recrawls.RecrawlError as e:
        raise SettingError(str(e)) from None


def _delay(raw: str | None) -> float:
    if raw is None:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= MAX_DELAY:
        raise SettingError(f"DOWNLOAD_DELAY is invalid: expected seconds from 0 to {MAX_DELAY:g}, got {raw!r}")
    return value


def _count(name: str, raw: str | None) -> int:
    if raw is None:
        return 0
    try:
        value = int(raw)  # Scrapy's getint: "1.5" is no integer
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_CONCURRENCY:
        raise SettingError(f"{name} is invalid: expected a whole number from 1 to {MAX_CONCURRENCY}, got {raw!r}")
    return value


def _user_agent(raw: str | None) -> str | None:
    if raw is None:
        return None
    if not (raw.strip() and len(raw) <= MAX_USER_AGENT and all(" " <= c <= "~" for c in raw)):
        raise SettingError(f"USER_AGENT is invalid: expected one line of printable ASCII, 1 to {MAX_USER_AGENT} "
                           f"characters, got {raw[:MAX_USER_AGENT]!r}")
    return raw


def _bool(name: str, raw: str | None, default: bool) -> bool:
    """As Scrapy's ``getbool`` reads a string."""
    if raw is None:
        return default
    if raw in _TRUE or raw in _FALSE:
        return raw in _TRUE
    raise SettingError(f"{name} is invalid: {raw!r}: supported values for boolean settings are 0/1, True/False, "
                       "'0'/'1', 'True'/'False' and 'true'/'false'")


def _feed(settings: Mapping[str, str]) -> tuple[str | None, tuple[str, ...]]:
    """The one JSON-lines feed of FEED_URI and FEEDS, and the FEEDS options not used."""
    if "FEED_FORMAT" in settings and settings["FEED_FORMAT"] not in JSON_LINES:
        raise SettingError(f"FEED_FORMAT is invalid: {settings['FEED_FORMAT']!r}: a spiderd job writes JSON lines "
                           "only (jsonlines)")
    uri = settings.get("FEED_URI") or None
    if "FEEDS" not in settings:
        return uri, ()
    feeds = _feeds(settings["FEEDS"])
    if not feeds:
        return uri, ()
    extra = uri is not None and uri not in feeds  # Scrapy adds FEED_URI to FEEDS
    if len(feeds) + extra > 1:
        raise SettingError(f"FEEDS is invalid: {len(feeds) + extra} feeds{' (with FEED_URI)' if extra else ''}; "
                           "a spiderd job writes one, in JSON lines")
    [(target, options)] = feeds.items()
    _feed_options(target, options)
    return target, tuple(f"FEEDS:{key}"[:MAX_NAME] for key in sorted(options) if key not in FEED_OPTIONS_KEPT)


def _feeds(raw: str) -> dict[str, Any]:
    """FEEDS as Scrapy's ``getdict`` reads a string: a JSON object of URI -> options."""
    try:
        feeds = jsontext.loads(raw)
    except ValueError as e:
        raise SettingError(f"FEEDS is invalid: not JSON ({e})") from None
    if not isinstance(feeds, dict):
        raise SettingError('FEEDS is invalid: expected a JSON object {"URI": {"format": "jsonlines"}}')
    return feeds


def _feed_options(target: str, options: Any) -> None:
    if not isinstance(options, dict):
        raise SettingError(f"FEEDS is invalid: the options of {target!r} are not a JSON object")
    if "format" not in options:
        raise SettingError(f'FEEDS is invalid: {target!r} has no format (expected "format": "jsonlines")')
    if options["format"] not in JSON_LINES:
        raise SettingError(f"FEEDS is invalid: {target!r} has format {options['format']!r}: a spiderd job writes "
                           "JSON lines only (jsonlines)")
    encoding = options.get("encoding")
    if encoding is not None and str(encoding).lower().replace("_", "-") not in ("utf-8", "utf8"):
        raise SettingError(f"FEEDS is invalid: {target!r} has encoding {encoding!r}: a spiderd job writes UTF-8")
