"""A site's extraction rules as a worker job carries them, so that every worker extracts with its frontier's rules.

A batch's ``schedule.json`` POST carries the setting ``SPIDERD_SITE_RULES={"digest": D, "site": TABLE}``: the site's
extraction keys (``name``, ``allowed_hosts``, ``list_urls``, ``detail_urls``, ``fields``, ``follow_detail_links``) as
one ``[[sites]]`` table (fields as ``{xpath = ..., all = ...}``, CSS already translated), and ``D``, the version of
those rules (:func:`spiderd.core.rules.sites_digest`).  The worker validates the table as the file's sites are
(:func:`spiderd.config.sites.load_sites`), checks that it makes version ``D``, and extracts the job's pages with it
for the whole job, whatever its frontier's rules become meanwhile.  Request headers, proxies, cookies and rendering
stay the worker's own (its file's), as does every fetch setting; no secret travels in a job.
"""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from typing import Any

from spiderd.config.convert import ConfigError
from spiderd.config.sites import load_sites
from spiderd.core.rules import Site, sites_digest

SETTING = "SPIDERD_SITE_RULES"
MAX_BYTES = 64 * 1024  # a site's rules in a job, at most (one command-line argument for Scrapyd)
SETTINGS_KEPT = 32  # job settings whose Site is kept (see read_job_setting)


def extraction(site: Site) -> Site:
    """The part of ``site`` a job carries (the other keys at their defaults)."""
    return replace(Site(site.name, site.allowed_hosts), list_urls=site.list_urls, detail_urls=site.detail_urls,
                   fields=site.fields, follow_detail_links=site.follow_detail_links)


def job_setting(site: Site) -> str:
    """The setting's value for a job of ``site``'s URLs."""
    table = {"name": site.name, "allowed_hosts": list(site.allowed_hosts), "list_urls": list(site.list_urls),
             "detail_urls": list(site.detail_urls), "follow_detail_links": site.follow_detail_links,
             "fields": {f.name: {"xpath": f.xpath, "all": f.all} for f in site.fields}}
    return json.dumps({"digest": sites_digest((extraction(site),)), "site": table}, separators=(",", ":"))


@functools.lru_cache(maxsize=SETTINGS_KEPT)
def read_job_setting(text: str, spider: str) -> tuple[Site, str]:
    """The Site and version of a job's setting; ValueError saying why it cannot be used.  The last
    SETTINGS_KEPT settings read are kept with their answers (a frontier sends each batch the same: its selectors
    and patterns were compiled again for every job, twice)."""
    if len(text) > MAX_BYTES:
        raise ValueError(f"{SETTING}: longer than {MAX_BYTES} bytes")
    try:
        value: Any = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{SETTING}: not JSON ({e})") from None
    if not isinstance(value, dict) or set(value) != {"digest", "site"} or not isinstance(value["digest"], str):
        raise ValueError(f'{SETTING}: expected {{"digest": "...", "site": {{...}}}}')
    try:
        (site,) = load_sites([value["site"]], SETTING)
    except ConfigError as e:
        raise ValueError(str(e)) from None
    if site.name != spider:
        raise ValueError(f"{SETTING}: the rules of site {site.name!r}, not of spider {spider!r}")
    digest = sites_digest((extraction(site),))
    if digest != value["digest"]:
        raise ValueError(f"{SETTING}: the rules make version {digest}, not {value['digest']} (another spiderd "
                         "version?)")
    return extraction(site), digest
