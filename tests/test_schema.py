"""The feed's declared Spark schema: every line the in-process writer and the worker write fits it."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer, reactor
from twisted.trial import unittest

from spiderd.feed import schema
from spiderd.config import settings as cfg
from spiderd.core.rules import Site
from spiderd.core.digest import content_digest, is_digest
from spiderd import tap
from spiderd.demo.config import DEMO
from spiderd.demo.pages import SiteSpec
from spiderd.demo.site import listen
from spiderd.fetch.extract import Rules, extract
from spiderd.core.itemline import json_line
from spiderd.core.urls import fingerprint, to_signed64

from .test_crawl import node_settings
from .test_worker import WorkerTestBase, items

DEMO_DDL = "title STRING, price STRING, tags ARRAY<STRING>, url STRING, urlhash BIGINT, status INT, fetched_at DOUBLE, digest STRING"
HIGH, LOW = "http://shop.example/item/11.html", "http://shop.example/item/1.html"  # fingerprints >= 2**63 and < 2**63
PAGE = b"<html><h1 class='title'>A</h1><a rel='tag'>x</a><a rel='tag'>y</a></html>"


def demo_sites(**changes: Any) -> tuple[Site, ...]:
    return cfg.from_dict({"sites": [dict(DEMO["sites"][0], **changes)]}, "<test>").sites


def check_lines(lines: list[str], sites: tuple[Site, ...]) -> list[dict[str, Any]]:
    """Decode the lines and assert each fits the declared columns, with urlhash the signed fingerprint of url."""
    declared = schema.columns(sites)
    decoded = [json.loads(line) for line in lines]
    for item in decoded:
        assert schema.problems(item, declared) == [], item
        assert item["urlhash"] == to_signed64(fingerprint(item["url"]))
        assert is_digest(item["digest"]), item
    return decoded


def test_demo_ddl() -> None:
    """The demo's schema, as docs/guide/spark.md gives it; url, urlhash, status, fetched_at and digest win over fields so named."""
    assert schema.ddl(demo_sites()) == DEMO_DDL
    fields = {**DEMO["sites"][0]["fields"], "status": "css:b::text", "digest": "css:u::text", "odd name": "css:i::text"}
    assert schema.ddl(demo_sites(fields=fields)) == DEMO_DDL.replace(", url", ", `odd name` STRING, url", 1)


def test_urlhash_at_or_above_2_63_is_negative() -> None:
    """An item's urlhash is the fingerprint's signed 64 bits: below 2**63 as is, at or above it minus 2**64."""
    assert fingerprint(HIGH) >= 2**63 > fingerprint(LOW)
    rules = Rules(demo_sites(allowed_hosts=["shop.example"]))
    made = [extract(url, PAGE, "text/html", "detail", 1.5, 200, rules).item for url in (HIGH, LOW)]
    assert [item["urlhash"] for item in made] == [fingerprint(HIGH) - 2**64, fingerprint(LOW)]  # type: ignore[index]
    decoded = check_lines([json_line(item) for item in made], demo_sites())  # type: ignore[arg-type]
    assert decoded[0]["tags"] == ["x", "y"] and decoded[1]["price"] is None
    assert decoded[0]["digest"] == decoded[1]["digest"] == content_digest(PAGE)  # the body's, whatever the URL


def test_problems_name_what_does_not_fit() -> None:
    """A line with an unsigned urlhash, a string status, a missing field or an extra one does not fit."""
    declared = schema.columns(demo_sites())
    line = {"title": "t", "price": None, "tags": ["a"], "url": "u", "urlhash": 2**63, "status": "200",
            "fetched_at": 1.0, "digest": "sha1:X", "extra": 1}
    assert schema.problems(line, declared) == ["extra: not declared", f"urlhash: {2**63} is not BIGINT",
                                               "status: '200' is not INT"]
    del line["extra"], line["tags"]
    assert "tags: missing" in schema.problems(line, declared)


def test_conflicting_sites_are_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Two sites with a field of one name as string and array: the CLI says so and exits 2; else prints the DDL."""
    other = dict(DEMO["sites"][0], name="other", allowed_hosts=["other.example"], fields={"title": {"css": "h1", "all": True}})
    with pytest.raises(schema.SchemaConflict):
        schema.columns(cfg.from_dict({"sites": [DEMO["sites"][0], other]}, "<test>").sites)
    assert schema.main(["--config", "etc/spiderd.toml"]) == 0
    assert "urlhash BIGINT" in capsys.readouterr().out


class InProcessLinesTests(unittest.TestCase):
    """Every line the in-process writer writes in a crawl of the demo site fits the schema."""

    timeout = 60

    @defer.inlineCallbacks
    def test_in_process_lines_fit(self) -> Any:
        """A crawl with targets = [] writes lines that all fit; some urlhash values come from fingerprints >= 2**63."""
        spec = SiteSpec(lists=2, details=40, slow_delay=0.05)
        port = listen(spec, reactor)
        self.addCleanup(port.stopListening)
        data = Path(tempfile.mkdtemp(prefix="spiderd-schema-"))
        self.addCleanup(shutil.rmtree, data, True)
        settings = node_settings(str(data), f"http://127.0.0.1:{port.getHost().port}/")
        cfg.check_data_dir(settings)
        top = tap.build(settings, reactor)
        top.startService()
        try:
            yield top.getServiceNamed("crawler").finished
        finally:
            yield top.stopService()
        lines = [line for path in sorted((data / "items").glob("*.jl")) for line in path.open(encoding="utf-8")]
        decoded = check_lines(lines, settings.sites)
        self.assertEqual(len(decoded), len(spec.expected().details_ok))
        self.assertTrue(any(item["urlhash"] < 0 for item in decoded), "no fingerprint >= 2**63 among the pages")


class WorkerLinesTests(WorkerTestBase):
    """Every line of a worker job's feed file fits the schema."""

    @defer.inlineCallbacks
    def test_worker_lines_fit(self) -> Any:
        """A small job's feed lines all fit; some urlhash values come from fingerprints >= 2**63."""
        self.gate.open()
        service = self.worker()
        job = yield self.schedule(("project", "spiderd"), ("spider", "demo-shop"), ("setting", self.feed_setting()),
                                  ("batch", "7"), ("setting", self.urls(*items(30))))
        yield service.runner.when_done(job)
        yield self.shipper.settled()
        names = [n for n in os.listdir(self.feeds) if n.startswith("7_demo-shop_")]
        with open(os.path.join(self.feeds, names[0]), encoding="utf-8") as f:
            decoded = check_lines(f.readlines(), demo_sites())
        self.assertEqual(len(decoded), len(self.ok_finals(items(30))))
        self.assertTrue(any(item["urlhash"] < 0 for item in decoded), "no fingerprint >= 2**63 among the pages")
