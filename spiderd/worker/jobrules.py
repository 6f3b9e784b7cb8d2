"""The site rules a job was sent with (``SPIDERD_SITE_RULES``, :mod:`spiderd.config.jobrules`), compiled once per
version: the job's pages are extracted with them from its start to its end, whatever its frontier sends later.

A job sent without them (Scrapyd's clients, an older frontier) is extracted with the worker's own sites.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Mapping

from spiderd.config.jobrules import SETTING, read_job_setting

if TYPE_CHECKING:
    from spiderd.fetch.extract import Rules

MAX_VERSIONS = 64  # compiled versions kept (the jobs pending and running name only a few)


class JobRules:
    """Versions of the sites' rules sent with jobs, each under the worker's own limits (``base``)."""

    def __init__(self, base: Rules) -> None:
        self.base = base
        self._versions: OrderedDict[str, Rules] = OrderedDict()

    def of(self, spider: str, settings: Mapping[str, str]) -> Rules | None:
        """The rules a job's settings carry (None: none, the worker's own apply); ValueError when they are bad."""
        text = settings.get(SETTING)
        if text is None:
            return None
        site, digest = read_job_setting(text, spider)
        rules = self._versions.get(digest)
        if rules is None:
            rules = self._versions[digest] = self.base.with_sites((site,))
            if len(self._versions) > MAX_VERSIONS:
                self._versions.popitem(last=False)
        self._versions.move_to_end(digest)
        return rules
