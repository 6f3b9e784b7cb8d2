"""spiderd.contrib.scrapy: DistributedSpider's start requests, items and errors (skipped without Scrapy).

The end-to-end check against a real Scrapyd 1.6 is ``python bench/scrapyd_check.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spiderd.demo.pages import SiteSpec, render
from spiderd.fetch.extract import Rules, extract
from spiderd.config.settings import load

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "scrapyd-project"
BASE = "http://127.0.0.1:8080"
SPEC = SiteSpec(lists=2, details=40, faults=False)

CONFIG = """\
[[sites]]
name = "demo-shop"
allowed_hosts = ["127.0.0.1"]
list_urls = ['/$', '/list/\\d+\\.html$']
detail_urls = ['/item/\\d+\\.html$']

[sites.fields]
title = "css:h1.title::text"
price = "css:span.price::text"
tags = { css = "a[rel=tag]::text", all = true }

[[sites]]
name = "other"
allowed_hosts = ["other.example"]
detail_urls = ['/p/\\d+$']
fields = { heading = "//h1/text()" }
"""


def test_importing_spiderd_never_imports_scrapy() -> None:
    code = (
        "import sys, spiderd, spiderd.contrib, spiderd.tap, spiderd.frontier.batcher, spiderd.fetch.extract\n"
        "loaded = sorted(m for m in sys.modules if m == 'scrapy' or m.startswith('scrapy.'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


@pytest.fixture
def contrib() -> Any:
    pytest.importorskip("scrapy", reason="Scrapy is not installed here (pip install spiderd[scrapy])")
    from spiderd.contrib import scrapy as contrib

    return contrib


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "spiderd.toml"
    path.write_text(CONFIG)
    return str(path)


def make_spider(contrib: Any, urls: Any, config: str | None, spider_name: str = "demo-shop", **settings: Any) -> Any:
    """A spider built the way ``scrapy crawl`` builds it (Crawler + from_crawler), without crawling."""
    from scrapy.crawler import Crawler

    class Spider(contrib.DistributedSpider):
        name = spider_name

    values: dict[str, Any] = {"TELNETCONSOLE_ENABLED": False, **settings}
    if urls is not None:
        values["DISTRIBUTED_START_URLS"] = urls if not isinstance(urls, list) else json.dumps(urls)
    if config is not None:
        values["SPIDERD_CONFIG"] = config
    arguments = {"batch": values.pop("batch")} if "batch" in values else {}
    return Spider.from_crawler(Crawler(Spider, settings=values), **arguments)


def html_response(url: str, path: str, status: int | None = None) -> Any:
    from scrapy.http import HtmlResponse

    code, headers, body = render(SPEC, path)
    return HtmlResponse(url, status=status or code, headers={k.decode(): v for k, v in headers.items()}, body=body)


def test_start_requests_one_per_detail_url(contrib: Any, config: str) -> None:
    urls = [f"{BASE}/item/{n}.html" for n in (1, 2, 3)]
    spider = make_spider(contrib, urls, config, batch="12")
    requests = list(spider.start_requests())
    assert [r.url for r in requests] == urls
    assert all(r.method == "GET" and r.callback == spider.parse for r in requests)
    assert spider.batch == "12"  # a spider argument, so FEED_URI's %(batch)s resolves
    assert spider.spiderd_site.name == "demo-shop"

    async def collect() -> list[Any]:
        return [r async for r in spider.start()]

    assert [r.url for r in asyncio.run(collect())] == urls  # Scrapy >= 2.13 calls start()


def test_start_urls_may_be_a_list_in_a_settings_module(contrib: Any, config: str) -> None:
    spider = make_spider(contrib, None, config, DISTRIBUTED_START_URLS=[f"{BASE}/item/4.html"])
    assert [r.url for r in spider.start_requests()] == [f"{BASE}/item/4.html"]
    assert spider.batch == "0"  # run by hand: the feed URI still has a batch


def test_off_site_and_unclassified_start_urls_are_skipped_with_a_log_line(
    contrib: Any, config: str, caplog: pytest.LogCaptureFixture
) -> None:
    urls = [
        f"{BASE}/item/1.html",
        "http://elsewhere.invalid/item/2.html",  # off-site
        "http://other.example/p/1",  # another spiderd site's detail page
        f"{BASE}/list/1.html",  # a list page
        f"{BASE}/about.html",  # no rule
        "not a url",
        f"{BASE}/item/5.html",
    ]
    spider = make_spider(contrib, urls, config)
    with caplog.at_level(logging.WARNING):
        requests = list(spider.start_requests())
    assert [r.url for r in requests] == [f"{BASE}/item/1.html", f"{BASE}/item/5.html"]
    skipped = [r.getMessage() for r in caplog.records if "Skipping start URL" in r.getMessage()]
    assert len(skipped) == 5
    assert "off-site" in skipped[0] and "elsewhere.invalid" in skipped[0]
    assert "off-site" in skipped[1]
    assert "list page" in skipped[2]
    assert "matches no rule" in skipped[3]
    assert "bad URL" in skipped[4]


def test_items_are_spiderd_items(contrib: Any, config: str) -> None:
    url = f"{BASE}/item/7.html"
    spider = make_spider(contrib, [url], config)
    response = html_response(url, "/item/7.html")
    items = list(spider.parse(response))
    assert len(items) == 1
    item = items[0]
    assert list(item) == ["title", "price", "tags", "url", "urlhash", "status", "fetched_at", "digest"]
    assert item["title"] == "Item 7" and item["status"] == 200 and item["tags"]
    # exactly what spiderd's own worker makes of the same page (fetched_at aside, which is the fetch time)
    rules = Rules(load(config).sites[:1])
    expected = extract(url, response.body, "text/html; charset=utf-8", "detail", item["fetched_at"], 200, rules)
    assert item == expected.item


def test_item_url_is_canonical_and_after_redirects(contrib: Any, config: str) -> None:
    spider = make_spider(contrib, [f"{BASE}/item/8.html"], config)
    # Scrapy hands the callback the final response of a redirect: the item is of where the page is
    response = html_response("http://127.0.0.1:8080/item/./9.html#top", "/item/9.html")
    (item,) = spider.parse(response)
    assert item["url"] == f"{BASE}/item/9.html"


def test_no_item_for_errors_off_site_pages_and_repeats(
    contrib: Any, config: str, caplog: pytest.LogCaptureFixture
) -> None:
    spider = make_spider(contrib, [f"{BASE}/item/1.html"], config)
    assert list(spider.parse(html_response(f"{BASE}/item/1.html", "/item/1.html", status=404))) == []
    with caplog.at_level(logging.WARNING):
        assert list(spider.parse(html_response("http://elsewhere.invalid/x.html", "/item/1.html"))) == []
    assert any("off-site" in r.getMessage() for r in caplog.records)
    assert len(list(spider.parse(html_response(f"{BASE}/item/2.html", "/item/2.html")))) == 1
    # a redirect from another start URL to a page this job already made an item of
    assert list(spider.parse(html_response(f"{BASE}/item/2.html", "/item/2.html"))) == []


def test_no_item_for_a_noindex_page(contrib: Any, config: str, caplog: pytest.LogCaptureFixture) -> None:
    """X-Robots-Tag: noindex (or the page's meta robots) means no item, logged as noindex."""
    from scrapy.http import HtmlResponse

    spider = make_spider(contrib, [f"{BASE}/item/1.html"], config)
    _, _, body = render(SPEC, "/item/1.html")
    headers = {"Content-Type": "text/html", "X-Robots-Tag": "noindex"}
    with caplog.at_level(logging.WARNING):
        assert list(spider.parse(HtmlResponse(f"{BASE}/item/1.html", headers=headers, body=body))) == []
    assert any("noindex" in r.getMessage() for r in caplog.records)
    headers = {"Content-Type": "text/html", "X-Robots-Tag": "googlebot: noindex"}
    assert len(list(spider.parse(HtmlResponse(f"{BASE}/item/1.html", headers=headers, body=body)))) == 1


def test_spiderd_site_setting_picks_another_site(contrib: Any, config: str) -> None:
    spider = make_spider(contrib, ["http://other.example/p/3", f"{BASE}/item/1.html"], config,
                         spider_name="anything", SPIDERD_SITE="other")
    assert spider.spiderd_site.name == "other"
    assert [r.url for r in spider.start_requests()] == ["http://other.example/p/3"]


@pytest.mark.parametrize(
    "value, words",
    [
        ("[not json", "not valid JSON"),
        ('{"url": "http://127.0.0.1/item/1.html"}', "must be a JSON list"),
        ('"http://127.0.0.1/item/1.html"', "must be a JSON list"),
        ('["http://127.0.0.1/item/1.html", 2]', "[1] must be a URL string"),
        ("", "is not set"),
    ],
)
def test_bad_start_urls_are_a_clear_error(
    contrib: Any, config: str, caplog: pytest.LogCaptureFixture, value: str, words: str
) -> None:
    with caplog.at_level(logging.ERROR), pytest.raises(contrib.DistributedSpiderError) as raised:
        make_spider(contrib, None, config, DISTRIBUTED_START_URLS=value)
    message = str(raised.value)
    assert message.startswith("DISTRIBUTED_START_URLS") and words in message
    assert any(r.levelno == logging.ERROR and message in r.getMessage() for r in caplog.records)


def test_missing_or_bad_spiderd_configuration_is_a_clear_error(contrib: Any, config: str, tmp_path: Path) -> None:
    urls = [f"{BASE}/item/1.html"]
    with pytest.raises(contrib.DistributedSpiderError, match="SPIDERD_CONFIG is not set"):
        make_spider(contrib, urls, None)
    with pytest.raises(contrib.DistributedSpiderError, match="SPIDERD_CONFIG: .*cannot read"):
        make_spider(contrib, urls, str(tmp_path / "missing.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("[fetch]\ntimeout = 'ten'\n")
    with pytest.raises(contrib.DistributedSpiderError, match=r"SPIDERD_CONFIG: .*fetch\.timeout"):
        make_spider(contrib, urls, str(bad))
    with pytest.raises(contrib.DistributedSpiderError, match="no \\[\\[sites\\]\\] entry named 'shop'.*'demo-shop'"):
        make_spider(contrib, urls, config, spider_name="shop")


def test_the_example_project_spider(contrib: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example Scrapyd project loads, and its spider applies the example spiderd.toml."""
    from scrapy.crawler import Crawler
    from scrapy.settings import Settings

    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setenv("SPIDERD_CONFIG", str(EXAMPLE / "spiderd.toml"))
    for name in [m for m in sys.modules if m == "shopproject" or m.startswith("shopproject.")]:
        monkeypatch.delitem(sys.modules, name)
    import importlib

    module = importlib.import_module("shopproject.settings")
    spider_module = importlib.import_module("shopproject.spiders.demo_shop")
    settings = Settings()
    settings.setmodule(module, priority="project")
    settings.set("DISTRIBUTED_START_URLS", json.dumps([f"{BASE}/item/3.html"]), priority="cmdline")
    spidercls = spider_module.DemoShopSpider
    spider = spidercls.from_crawler(Crawler(spidercls, settings=settings), batch="3")
    assert spider.spiderd_settings.source == os.environ["SPIDERD_CONFIG"]
    (item,) = spider.parse(html_response(f"{BASE}/item/3.html", "/item/3.html"))
    assert item["title"] == "Item 3"
