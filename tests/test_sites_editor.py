"""The sites editor in a real headless Chromium: paste a URL, see the fields, change a selector and see the value
change, click an element of the page to get its selector, save, and find the change in GET /api/sites/NAME."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Callable, Generator

from twisted.internet import defer, threads
from twisted.trial.unittest import TestCase

from . import services
from .test_sites_live import call
from . import test_sites_try
from .test_status_page import start_browser

Gen = Generator[Any, Any, Any]
SHOTS = os.environ.get("SPIDERD_EDITOR_SHOTS", "")  # a directory the screenshots go to (the docs' images)


class EditorTests(TestCase):
    timeout = 180

    def setUp(self) -> Any:
        services.need_chromium()
        return test_sites_try.TryTests.setUp(self)  # type: ignore[arg-type]  # the same node and loopback shop

    started = test_sites_try.TryTests.started

    def in_browser(self, function: Callable[..., Any], *args: Any) -> defer.Deferred[Any]:
        return threads.deferToThread(function, *args)

    def wait(self, predicate: Callable[[], Any], what: str) -> defer.Deferred[Any]:
        """Poll the page (bounded): the browser's rendering, not a timer of ours."""
        from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
        from selenium.webdriver.support.ui import WebDriverWait

        waiter = WebDriverWait(self.browser, 30, poll_frequency=0.1,
                               ignored_exceptions=(StaleElementReferenceException, NoSuchElementException))
        return self.in_browser(waiter.until, lambda _: predicate(), what)

    def value_of(self, field: str) -> str:
        return self.browser.find_element("css selector", f'#extracted tr[data-field="{field}"] .value').text

    def wait_value(self, field: str, expected: str) -> defer.Deferred[Any]:
        return self.wait(lambda: self.value_of(field) == expected, f"{field} to show {expected!r}")

    @defer.inlineCallbacks
    def test_edit_try_click_and_save(self) -> Gen:
        """The whole round of an operator's edit, at 1280 px; then the page at 390 px has no horizontal scroll."""
        profile = tempfile.mkdtemp(prefix="spiderd-chromium-")
        self.addCleanup(shutil.rmtree, profile, True)
        self.browser = yield self.in_browser(start_browser, profile)
        self.addCleanup(self.in_browser, self.browser.quit)
        find = self.browser.find_element
        yield self.in_browser(self.browser.set_window_size, 1280, 900)
        yield self.in_browser(self.browser.get, self.api.url + "sites")
        yield self.wait(lambda: find("css selector", 'button[data-site="shop"]'), "the sites list")
        assert "127.0.0.1" in find("id", "sites").text
        yield self.in_browser(find("css selector", 'button[data-site="shop"]').click)
        yield self.in_browser(find("id", "url").send_keys, self.root + "p/1")
        yield self.in_browser(find("id", "try").click)
        yield self.wait_value("title", "Desk lamp")
        assert self.value_of("price") == "12 EUR" and self.value_of("colour") == "(nothing)"
        assert "field 'colour': the selector matched nothing" in find("id", "result").text

        title = find("css selector", 'input[aria-label="selector of title"]')
        yield self.in_browser(title.clear)
        yield self.in_browser(title.send_keys, "//title/text()")
        yield self.wait_value("title", "Lamp")

        yield self.in_browser(self.browser.switch_to.frame, find("id", "page"))
        heading = yield self.in_browser(find, "css selector", "h1")
        yield self.in_browser(heading.click)
        yield self.in_browser(self.browser.switch_to.default_content)
        yield self.wait(lambda: find("id", "prop-css").text == "body > h1::text", "the clicked element's CSS")
        assert find("id", "prop-xpath").text == "/html/body/h1/text()"
        from selenium.webdriver.support.ui import Select

        yield self.in_browser(Select(find("id", "prop-field")).select_by_value, "title")
        yield self.in_browser(find("id", "use-css").click)
        yield self.wait_value("title", "Desk lamp")
        yield self.screenshot(1280, 900)

        yield self.in_browser(find("id", "save").click)
        yield self.wait(lambda: find("id", "saved").text.startswith("saved: sites.shop.fields"), "the save")
        code, site = yield call(self.api, "GET", "/api/sites/shop")
        self.assertEqual((code, site["origin"]), (200, "api"))
        self.assertEqual(site["table"]["fields"]["title"], "css:body > h1::text")
        self.assertEqual(self.api.node.config.rules.sites[0].fields[0].xpath, "descendant-or-self::body/h1/text()")

        yield self.in_browser(self.browser.set_window_size, 390, 844)
        scroll = yield self.in_browser(self.browser.execute_script,
                                       "return [document.documentElement.scrollWidth, window.innerWidth]")
        assert scroll[0] <= scroll[1], scroll
        yield self.screenshot(390, 844)

    @defer.inlineCallbacks
    def screenshot(self, width: int, height: int) -> Gen:
        shots = SHOTS or tempfile.mkdtemp(prefix="spiderd-screens-")
        path = os.path.join(shots, f"sites-editor-{width}.png")
        yield self.in_browser(self.browser.save_screenshot, path)
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
