"""A site's rules as a job carries them: the same Site on both ends, and a bad or altered setting refused."""

from __future__ import annotations

import json

import pytest

from spiderd.config import settings as cfg
from spiderd.config.jobrules import extraction, job_setting, read_job_setting
from spiderd.core.rules import sites_digest
from spiderd.fetch.extract import Rules
from spiderd.worker.jobrules import JobRules

SITE = cfg.from_dict({"sites": [{
    "name": "shop", "allowed_hosts": ["shop.example"], "detail_urls": [r"/p/\d+$"],
    "fields": {"title": {"css": "h1::text"}, "tags": {"xpath": "//li/text()", "all": True}},
    "headers": {"X-Secret": "s3cret"}, "recrawl_list": 60}]}).sites[0]


def test_the_worker_rebuilds_the_frontiers_extraction_rules_and_no_secret_travels() -> None:
    """The setting gives back the site's extraction keys and names their version; headers stay home."""
    text = job_setting(SITE)
    site, digest = read_job_setting(text, "shop")
    assert site == extraction(SITE) and site.fields == SITE.fields
    assert digest == sites_digest((extraction(SITE),))
    assert "s3cret" not in text


@pytest.mark.parametrize("change, error", [
    (lambda v: v.update(digest="0" * 16), "not 0000"),
    (lambda v: v["site"]["fields"].update(title={"xpath": "//h1["}), "bad XPath"),
    (lambda v: v["site"].update(colour="red"), "colour: unknown key"),
    (lambda v: v["site"].update(name="blog"), "not of spider 'shop'"),
])
def test_a_bad_or_altered_setting_is_refused(change: object, error: str) -> None:
    """Each refusal says why (the worker answers the schedule with it)."""
    value = json.loads(job_setting(SITE))
    change(value)  # type: ignore[operator]
    with pytest.raises(ValueError, match=error.replace("[", r"\[")):
        read_job_setting(json.dumps(value), "shop")


def test_a_version_is_compiled_once() -> None:
    """Two jobs of one version share its compiled rules; a job without the setting uses the worker's own."""
    rules = JobRules(Rules(()))
    settings = {"SPIDERD_SITE_RULES": job_setting(SITE)}
    first = rules.of("shop", settings)
    assert first is not None and first is rules.of("shop", dict(settings))
    assert first.site_for("http://shop.example/p/1") is not None
    assert rules.of("shop", {}) is None


def test_a_setting_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs with the same setting (a frontier sends each batch the same) cost one read of it: its selectors and
    patterns are compiled once; a bad setting is refused each time it comes."""
    from spiderd.config import jobrules as config_jobrules

    read: list[object] = []
    real = config_jobrules.load_sites
    monkeypatch.setattr(config_jobrules, "load_sites", lambda *a: read.append(a) or real(*a))
    config_jobrules.read_job_setting.cache_clear()
    text = job_setting(SITE)
    answers = [read_job_setting(text, "shop") for _ in range(3)]
    assert answers[0] == answers[1] == answers[2] and len(read) == 1
    bad = json.loads(text)
    bad["digest"] = "0" * 16
    for _ in range(2):
        with pytest.raises(ValueError, match="not 0000"):
            read_job_setting(json.dumps(bad), "shop")
    assert len(read) == 3
