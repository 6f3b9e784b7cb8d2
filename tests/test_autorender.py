""""auto" rendering's choices (spiderd.engine.fetchmode.AutoRender), sans I/O: probe, stop, check again, come back,
and a bounded memory of host sections."""

from __future__ import annotations

from twisted.internet.task import Clock

from spiderd.engine.fetchmode import AutoRender, FetchModes, gains
from spiderd.core.itemline import json_line
from spiderd.fetch.extract import Extracted
from spiderd.fetch.fetcher import FetchResult
from .helpers import rules_of

URL = "http://shop.example/p/1"


def test_plain_section_stops_rendering_then_checks_again() -> None:
    """A section whose raw HTML gives what rendering gives is rendered for ``probe`` pages, then fetched plain, one
    page in ``recheck`` rendered and compared; a check that finds more brings rendering back."""
    auto = AutoRender(probe=2, recheck=5)
    assert auto.plan(URL) == (True, True)
    auto.learn(URL, gains=False)
    assert auto.plan(URL) == (True, True)
    auto.learn(URL, gains=False)
    assert [auto.plan(URL) for _ in range(4)] == [(False, False)] * 4
    assert auto.plan(URL) == (True, True)  # the fifth: checked again
    auto.learn(URL, gains=True)
    assert auto.plan(URL) == (True, False)  # rendered, and not compared again until the next check


def test_sections_apart_and_bounded() -> None:
    """Hosts and first path segments are choices of their own; past ``max_keys`` the least recently seen goes."""
    auto = AutoRender(probe=1, recheck=50, max_keys=2)
    auto.plan("http://a.example/p/1")
    auto.learn("http://a.example/p/1", gains=False)
    assert auto.plan("http://a.example/p/2") == (False, False)
    assert auto.plan("http://a.example/list/1") == (True, True)
    auto.plan("http://b.example/p/1")
    assert len(auto.choices) == 2 and "a.example/p" not in auto.choices


def test_gains() -> None:
    """Rendering gains when it gives a new link or a field value the raw page lacks (not the item's own keys)."""
    raw = Extracted(lists=["http://x/1"], item={"url": "u", "title": None})
    assert not gains(raw, Extracted(lists=["http://x/1"], item={"url": "v", "title": ""}))
    assert gains(raw, Extracted(lists=["http://x/1", "http://x/2"]))
    assert gains(raw, Extracted(item={"url": "u", "title": "Hat"}))


def test_schema_declares_rendered_where_a_site_renders() -> None:
    """The feed's Spark schema has a rendered BOOLEAN column where a site renders, and only there."""
    from spiderd.core.rules import Site
    from spiderd.feed.schema import columns, problems

    plain, rendering = Site("a", ("a.example",)), Site("b", ("b.example",), render="auto")
    assert ("rendered", "BOOLEAN") not in columns([plain])
    declared = columns([plain, rendering])
    assert declared[-1] == ("rendered", "BOOLEAN")
    line = {"url": "u", "urlhash": 1, "status": 200, "fetched_at": 1.0, "digest": None, "rendered": False}
    assert problems(line, declared) == []
    assert problems({**line, "rendered": "yes"}, declared) == ["rendered: 'yes' is not BOOLEAN"]


def test_marking_an_item_rendered_drops_its_encoded_line() -> None:
    """A rendered page's item gains ``rendered``: the line a parse child encoded of the item before is dropped, so
    the items file gets the item as it is now."""
    item = {"url": URL, "title": "Hat"}
    extracted = Extracted(item=item, line=json_line(item))
    result = FetchResult(URL, 200, URL, b"<html></html>", "text/html", rendered=b"<html><p>Hat</p></html>")
    FetchModes(Clock(), rules_of({"sites": [{"name": "shop", "allowed_hosts": ["shop.example"]}]}), None).mark(
        result, extracted)
    assert extracted.item == {"url": URL, "title": "Hat", "rendered": True}
    assert extracted.line is None

