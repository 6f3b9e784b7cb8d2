"""Checking what ``schedule.json`` was sent and turning it into a :class:`Job`.

Only ``setting=NAME=VALUE`` parameters are settings, and only those of
:mod:`.jobsettings` are honoured (each value checked; the names of the others
are kept with the job as ``ignored_settings``); every other parameter is a
spider argument, kept apart, so an argument can never become a setting.  A job sent no
``DISTRIBUTED_START_URLS`` takes its spider's ``start_urls`` ([[sites]]), and is refused if it has none.  Values that end up in file names (job id, batch) must be plain names,
and the FEED_URI template is rendered once at acceptance so that a template
the feed module refuses (an unknown placeholder, a value escaping its
directory) is refused here, not when the job ends.
"""

from __future__ import annotations

import importlib.util
import math
import os
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

from twisted.internet import defer, task
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.python.filepath import FilePath, InsecurePath

from spiderd.core.feeduri import check_param, parse_target
from spiderd.core.rules import Site
from spiderd.core.urls import BadURL, canonicalize
from spiderd.worker.config import FEED_SCHEMES, WorkerConfig
from spiderd.core import jsontext
from spiderd.core.secrets import redact, redact_text
from spiderd.core.net.serving import ApiError
from spiderd.worker.jobs import Job, safe_name
from spiderd.config.jobrules import SETTING as RULES_SETTING
from spiderd.worker.jobrules import JobRules
from spiderd.worker.jobsettings import SettingError, job_options, split

if TYPE_CHECKING:
    from spiderd.fetch.extract import Rules

CHUNK = 2000  # start URLs checked per turn of the reactor (about 10 ms of work)

_NAME_RULE = "letters, digits, '.', '_' and '-', at most 128, not starting with '.'"
_EGGS = FilePath("/eggs")  # Scrapyd's eggs_dir, as a name: its child() makes Scrapyd's check (no file is touched)
NO_URLS = ("DISTRIBUTED_START_URLS is required: a spiderd job fetches the URLs it is sent, as a JSON list in one "
           "setting, for example -d setting='DISTRIBUTED_START_URLS=[\"https://example.com/item/1.html\"]' "
           "(spider '{spider}' has no start_urls of its own in [[sites]])")


class Validator:
    """Knows the project, its spiders (the configured sites) and versions; builds jobs from parameters."""

    def __init__(
        self,
        config: WorkerConfig,
        rules: Rules,
        render_uri: Callable[[str, dict[str, str]], str],
        versions: tuple[str, ...],
        clock: IReactorTime,
        robots: bool = True,
        job_rules: JobRules | None = None,
    ) -> None:
        """``robots``: the worker checks robots.txt (else a job's ROBOTSTXT_OBEY has no effect); ``job_rules``: the
        site rules jobs carry (a job's spider need not be one of the worker's sites then)."""
        self.project = config.project
        self.versions = versions
        self._rules = rules
        self.job_rules = job_rules or JobRules(rules)
        self._default_feed = config.default_feed_uri
        self._feed_roots = config.feed_roots
        self._node = config.host_name
        self._max_urls = config.max_job_urls
        self._render_uri = render_uri
        self._clock = clock
        self._robots = robots
        self._cooperator = task.Cooperator(scheduler=lambda work: clock.callLater(0, work))

    def check_project(self, project: str) -> None:
        if project != self.project:
            raise ApiError(f"project '{project}' not found")

    def check_contained(self, project: str) -> None:
        """Scrapyd's egg storage check: a project name that is a path (``../p``, ``a/b``) is refused with its
        ``DirectoryTraversalError`` (addversion, listversions, delversion and delproject make it first)."""
        try:
            _EGGS.child(project)
        except InsecurePath:
            raise ApiError(f"DirectoryTraversalError: {project}") from None

    def check_version(self, version: str | None) -> None:
        if version and version not in self.versions:
            raise ApiError(f"version '{version}' not found")

    @property
    def spiders(self) -> dict[str, Site]:
        """The worker's spiders: its sites as they are now (they change with a reload or the sites API)."""
        return {site.name: site for site in self._rules.sites}

    def check_spider(self, spider: str, settings: Sequence[str] = ()) -> None:
        """A spider of the worker's sites, or one whose rules the job carries (``SPIDERD_SITE_RULES``)."""
        carried = any(s.startswith(RULES_SETTING + "=") for s in settings)
        if spider not in self.spiders and not carried:
            raise ApiError(f"spider '{spider}' not found")

    def job(
        self,
        project: str,
        spider: str,
        version: str | None,
        jobid: str,
        priority: str | None,
        settings: list[str],
        args: dict[str, str],
    ) -> Deferred[tuple[Job, list[str]]]:
        """Fires with a new pending job and its start URLs, or fails with an :class:`ApiError` naming what is
        wrong (the checks that cost nothing raise it at once).  A long URL list is checked CHUNK URLs per turn
        of the reactor, so a job of 50,000 URLs never holds it for more than a few milliseconds at a time."""
        if not safe_name(jobid):
            raise ApiError(f"jobid is invalid: {jobid!r} is not a plain name ({_NAME_RULE})")
        if "batch" in args:
            try:
                check_param("batch", args["batch"])
            except ValueError as e:
                raise ApiError(f"batch is invalid: {e}") from None
        honoured, ignored = split(self._settings(settings))
        job = Job(jobid, project, spider, honoured, args, _priority(priority), version)
        raw = job.settings.pop("DISTRIBUTED_START_URLS", None)
        try:
            rules = self.job_rules.of(spider, job.settings) or self._rules
        except ValueError as e:
            raise ApiError(str(e)) from None
        site = next((s for s in rules.sites if s.name == spider), None)
        if site is None:
            raise ApiError(f"spider '{spider}' not found")
        missing = raw is None and not site.start_urls  # what ScrapydWeb's Run button, Gerapy and a plain call send
        listed = self._url_list(raw) if raw is not None else list(site.start_urls)
        d = self._canonical(listed, site, rules)
        return d.addCallback(lambda urls: (self._finish(job, ignored, len(urls), missing), urls))

    def _finish(self, job: Job, ignored: list[str], url_count: int, missing: bool = False) -> Job:
        """The checks after the URLs: the job's options and its feed; then, if it was sent no URLs and its spider
        has none of its own, a refusal that says how to send them."""
        job.url_count = url_count
        try:
            options = job_options(job.settings)
        except SettingError as e:
            raise ApiError(str(e)) from None
        if "ROBOTSTXT_OBEY" in job.settings and not self._robots:
            ignored.append("ROBOTSTXT_OBEY")  # this worker checks no robots.txt (fetch.robots = false)
        job.ignored_settings = sorted(ignored + list(options.ignored))
        self._check_feed(job, options.feed_uri)
        if missing:
            raise ApiError(NO_URLS.format(spider=job.spider))
        return job

    def _settings(self, raw: list[str]) -> dict[str, str]:
        """``NAME=VALUE`` parameters as Scrapyd reads them (a name given twice: its last value)."""
        settings = {}
        for setting in raw:
            name, sep, value = setting.partition("=")
            if not sep or not name.strip():
                raise ApiError(f"setting is invalid: {self._redact_all(setting)!r} is not NAME=VALUE")
            settings[name] = value
        return settings

    def _url_list(self, raw: str) -> list[str]:
        """The start URLs as sent: a JSON list of at most max_job_urls strings (a longer list is refused before
        its items are looked at: millions of them would hold the reactor)."""
        try:
            value = jsontext.loads(raw)
        except ValueError as e:
            raise ApiError(f"DISTRIBUTED_START_URLS is invalid: not JSON ({e})") from None
        not_strings = ApiError("DISTRIBUTED_START_URLS is invalid: expected a JSON list of URL strings")
        if not isinstance(value, list):
            raise not_strings
        if len(value) > self._max_urls:
            raise ApiError(f"DISTRIBUTED_START_URLS is invalid: {len(value)} URLs, at most {self._max_urls} in one "
                           "job (worker.max_job_urls): send smaller batches")
        if not all(isinstance(u, str) for u in value):
            raise not_strings
        return value

    def _canonical(self, listed: list[str], site: Site, rules: Rules) -> Deferred[list[str]]:
        """The canonical start URLs (in order, without duplicates), all of the spider's site: at once for a
        short list, else CHUNK at a time through the cooperator."""
        if len(listed) <= CHUNK:
            return defer.maybeDeferred(self._check_urls, listed, site, rules)
        checked: list[str] = []

        def chunks() -> Iterator[None]:
            for start in range(0, len(listed), CHUNK):
                checked.extend(self._check_urls(listed[start:start + CHUNK], site, rules))
                yield None

        d = self._cooperator.coiterate(chunks())
        return d.addCallback(lambda _: list(dict.fromkeys(checked)))

    def _check_urls(self, value: list[str], site: Site, rules: Rules) -> list[str]:
        """Canonical forms of ``value`` (without duplicates), or an ApiError for the first bad one."""
        urls = []
        for url in value:
            try:
                canonical = canonicalize(url, self._rules.max_url_length)
            except BadURL as e:
                raise ApiError(f"DISTRIBUTED_START_URLS is invalid: {self._redact_all(url)!r} ({e.reason})") from None
            found = rules.site_for_canonical(canonical)  # (canonicalize gave it)
            if found is None or found.name != site.name:
                hosts = ", ".join(site.allowed_hosts)
                raise ApiError(f"DISTRIBUTED_START_URLS is invalid: {self._redact_all(url)!r} is not a URL of "
                               f"spider '{site.name}' (hosts {hosts})")
            urls.append(canonical)
        return list(dict.fromkeys(urls))

    def _check_feed(self, job: Job, feed_uri: str | None) -> None:
        template = feed_uri or self._default_feed
        scheme = template.partition("://")[0].lower() if "://" in template else ""
        if scheme not in FEED_SCHEMES:
            raise ApiError(f"FEED_URI is invalid: {redact(template)!r}: expected a file://, ftp://, ftps:// or "
                           "sftp:// URI")
        try:
            uri = self._render_uri(template, job.feed_params(self._clock.seconds(), self._node))
        except Exception as e:  # the feed module refuses with ValueError or KeyError; any refusal is the client's
            reason = self._redact_all(str(e) or type(e).__name__)
            raise ApiError(f"FEED_URI is invalid: {reason}") from None
        target = parse_target(uri)
        if target.scheme == "sftp" and importlib.util.find_spec("bcrypt") is None:
            raise ApiError("FEED_URI is invalid: sftp:// needs Twisted's conch extra on this worker "
                           "(pip install 'spiderd[sftp]')")
        if target.scheme == "file" and not any(_under(target.directory, root) for root in self._feed_roots):
            raise ApiError(f"FEED_URI is invalid: {redact(template)!r} writes outside this worker's feed "
                           f"directories ({', '.join(self._feed_roots) or 'none'}; see worker.feed_dirs)")

    def _redact_all(self, text: str) -> str:
        return redact_text(text)


def _under(directory: str, root: str) -> bool:
    """True if ``directory`` is ``root`` or below it, symbolic links resolved (a link inside the feed
    directory that points elsewhere does not count as inside)."""
    directory, root = os.path.realpath(directory), os.path.realpath(root)
    return directory == root or directory.startswith(root.rstrip("/") + "/")


def _priority(raw: str | None) -> float:
    if raw is None:
        return 0.0
    try:
        value = float(raw)
    except ValueError as e:
        raise ApiError(f"priority is invalid: {e}") from None
    if not math.isfinite(value):
        raise ApiError(f"priority is invalid: {raw!r} is not a finite number")
    return value
