"""A render child: one headless Chromium driven by Playwright, in its own process (``python -m
spiderd.engine.renderchild``), for the render pool (:mod:`spiderd.engine.render`).

Playwright's Python API runs on asyncio; spiderd runs on Twisted's reactor.  Each browser therefore lives in a
child process of its own, as the parse children do: the reactor never waits on it, and a browser that crashes,
hangs or grows takes only its child with it.  The child starts its own session (``setsid``), so the pool ends it
and every process of its browser with one ``killpg``.

The wire is the parse children's (:func:`spiderd.fetch.parseworker.frame`: a 4-byte length, then ``marshal``),
a pipe each way.  Parent to child::

    ("init", browser, load_media, navigation_timeout, settle_timeout, idle_time, max_subrequests, max_bytes,
     pages_per_context)
    ("render", rid, url, status, headers, body, render_wait)
    ("sub", rid, sid, status, headers, body)       the answer to a sub-request (status 0: refused, body: why)

Child to parent::

    ("ready", pid)                                 the browser is up
    ("sub", rid, sid, url, resource_type)          a sub-request of page ``rid``, for the parent to fetch
    ("done", rid, html, final_url, notes, subrequests, sub_bytes)
    ("failed", rid, reason, kind)                  the page broke a bound: it fails (kind: navigation_timeout,
                                                   navigation_error, settle_timeout or page_error)
    ("crashed", rid, reason)                       its page or browser died under it: it may be rendered again
    ("contexts", closed)                           an old context was closed (``closed`` in all)
    ("gone", reason)                               the browser died: the child exits

The main document is never fetched by the browser: the parent fetched it (politely, robots.txt checked, as the
WARC records it) and the child serves that answer to the page.  Every other request of the page is either refused
here (images, media and fonts unless ``load_media``; a navigation away; anything but GET; past ``max_subrequests``
or ``max_bytes``) or handed to the parent, which decides and fetches (:mod:`spiderd.engine.subrequests`).  A page
has settled once no sub-request has been in flight for ``idle_time`` seconds after its load event (or once
``render_wait``'s selector is in its DOM); one that does not within ``settle_timeout`` fails.  Downloads, pop-ups,
dialogs and service workers are refused.  The child exits at the end of its input.
"""

from __future__ import annotations

import asyncio
import marshal
import os
import random
import signal
import sys
import time
from typing import Any

from spiderd.fetch.parseworker import HEADER, MAX_MESSAGE, frame

BLOCKED_TYPES = frozenset({"image", "media", "font"})
# In the page, before its scripts: past the cap, fetch() gives a promise that never settles and XMLHttpRequest's send
# throws, in the page itself (a script firing 10,000 XHRs would otherwise queue 10,000 requests, each a round trip to
# this process to be refused; 10,000 rejected promises cost as much again in "uncaught" events).
CAP_SCRIPT = """(() => {
  window.open = function () { window.__spiderdPopups = (window.__spiderdPopups || 0) + 1; return null; };
  let made = 0; const cap = %d; const fetch = window.fetch; const send = XMLHttpRequest.prototype.send;
  const over = () => { if (++made <= cap) return false; window.__spiderdCut = made - cap; return true; };
  window.fetch = function () { return over() ? new Promise(function () {}) : fetch.apply(this, arguments); };
  XMLHttpRequest.prototype.send = function () {
    if (over()) throw new DOMException("sub-request cap", "NetworkError");
    return send.apply(this, arguments);
  };
})();"""
CONTENT_SCRIPT = """() => {
  let html = document.doctype ? new XMLSerializer().serializeToString(document.doctype) : "";
  if (document.documentElement) html += document.documentElement.outerHTML;
  return [html, window.__spiderdCut || 0, window.__spiderdPopups || 0];
}"""
_SKIPPED_HEADERS = frozenset({"content-encoding", "transfer-encoding", "content-length", "connection"})
CLOSE_TIMEOUT = 5.0
JITTER = 0.2  # a context serves pages_per_context pages, give or take this share (browsers do not change together)
REST_AFTER = 2.0  # seconds a tab waits for its next page before it is sent to about:blank
# Whatever the route does not answer (a download, a pop-up's own loads) goes to a proxy that is not there, loopback
# included: the browser reaches no server but through the parent.
NO_NETWORK = ("--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>")


class NotSettled(Exception):
    """The page did not settle within its bound."""


class Child:
    """The browser, its context and its tabs, the pages they render; messages in from the parent, out to it.

    A tab renders one page after another (a same-site navigation keeps its renderer process: no process is
    started per page), going from one straight to the next (its last page unloads as the next loads); one left
    without a page for ``REST_AFTER`` seconds goes to about:blank, so an idle browser runs no page's scripts (a
    navigation to about:blank between every two pages cost the browser a fifth of its CPU per page); a tab whose
    page failed is closed, and a new one opened when one is needed.  After
    ``pages_per_context`` pages (give or take ``JITTER``) a new context takes the place of the current one, which
    is closed with its last tab: what its pages left in the browser, in Playwright's driver and in this process
    (each request's objects, the renderers and their caches) goes with it, so a long-lived browser's memory
    stays that of its first pages."""

    def __init__(self, out: Any, init: tuple[Any, ...]) -> None:
        (_, self.executable, self.load_media, self.navigation_timeout, self.settle_timeout, self.idle_time,
         self.max_subrequests, self.max_bytes, self.pages_per_context) = init
        self.out = out
        self.browser: Any = None
        self.context: Any = None  # where new tabs open
        self.served = 0  # pages given a tab of the current context
        self.budget = 0  # pages the current context serves
        self.closed = 0  # contexts closed
        self.rotating: asyncio.Future[None] | None = None  # a new context on its way
        self.tabs: dict[Any, int] = {}  # context -> its open tabs (an old context closes with its last)
        self.free: list[Any] = []  # tabs between pages (of the current context), the last freed last
        self.freed: dict[Any, float] = {}  # a free tab -> when it was freed (its page left in it till it rests)
        self.rendering: dict[Any, Page] = {}  # tab -> the page it renders
        self.opening = 0  # tabs being opened (a new page meanwhile is taken for one of them, not a pop-up)
        self.subs: dict[tuple[int, int], asyncio.Future[tuple[Any, ...]]] = {}
        self.next_sid = 0
        self.gone = asyncio.get_running_loop().create_future()

    def send(self, message: tuple[Any, ...]) -> None:
        self.out.write(frame(message))
        self.out.flush()

    async def start(self, playwright: Any) -> None:
        self.browser = await playwright.chromium.launch(
            executable_path=self.executable, headless=True, handle_sigint=False, handle_sigterm=False,
            handle_sighup=False, args=["--no-sandbox", "--disable-dev-shm-usage", "--no-first-run", *NO_NETWORK])
        self.browser.on("disconnected", lambda _: self.end("the browser exited"))
        self.context = await self._context()
        self.send(("ready", os.getpid()))

    async def _context(self) -> Any:
        context = await self.browser.new_context(service_workers="block", accept_downloads=False)
        context.on("page", self._popup)
        await context.add_init_script(CAP_SCRIPT % self.max_subrequests)
        await context.route("**/*", self._route)  # every page of the context: a pop-up's requests too
        self.tabs[context] = 0
        self.budget = max(1, round(self.pages_per_context * random.uniform(1 - JITTER, 1 + JITTER)))
        return context

    def end(self, why: str) -> None:
        """The browser is gone (or unusable): the child says so and exits."""
        if not self.gone.done():
            self.gone.set_result(why)

    def answered(self, message: tuple[Any, ...]) -> None:
        future = self.subs.pop((message[1], message[2]), None)
        if future is not None and not future.done():
            future.set_result(message)

    async def render(self, message: tuple[Any, ...]) -> None:
        _, rid, url, status, headers, body, wait = message
        page = Page(self, rid, url, status, headers, body, wait)
        tab = None
        try:
            tab = await self._tab()
            self.rendering[tab] = page
            deadline = self.navigation_timeout + self.settle_timeout + CLOSE_TIMEOUT
            html, final = await asyncio.wait_for(page.load(tab), deadline)
        except Exception as e:  # Playwright's errors, NotSettled, a closed browser: the page's reason
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            crashed = type(e).__name__ == "TargetClosedError" or "crash" in str(e).lower()
            self.send(("crashed", rid, why) if crashed else ("failed", rid, why, page.failure_kind(e)))
            if tab is not None:
                self.rendering.pop(tab, None)
                await self._close(tab)
        else:
            self.rendering.pop(tab, None)
            self.send(("done", rid, html, final, page.notes, page.count, page.bytes))
            await self._rest(tab)
        finally:
            for key in [k for k in self.subs if k[0] == rid]:
                self.subs.pop(key).cancel()

    async def _tab(self) -> Any:
        if self.served >= self.budget and self.rotating is None:
            self.rotating = asyncio.ensure_future(self._rotate())
        if self.rotating is not None:
            await asyncio.shield(self.rotating)
        self.served += 1
        if self.free:
            tab = self.free.pop()
            self.freed.pop(tab, None)
        else:
            context = self.context
            self.opening += 1
            try:
                tab = await context.new_page()
            finally:
                self.opening -= 1
            self.tabs[context] += 1
            tab.on("dialog", lambda dialog: self._dialog(tab, dialog))
        return tab

    async def _rotate(self) -> None:
        """A new context for the next pages; the old one's free tabs close now, its others after their page."""
        try:
            old, self.context = self.context, await self._context()
            free, self.free, self.served = self.free, [], 0
            self.freed.clear()
            for tab in free:
                await self._close(tab, old)
        finally:
            self.rotating = None

    async def _rest(self, tab: Any) -> None:
        """A tab whose page is done waits for the next one as it is; one of an old context is closed."""
        context = tab.context
        if context is not self.context:
            await self._close(tab, context)
            return
        self.free.append(tab)
        self.freed[tab] = time.monotonic()
        asyncio.get_running_loop().call_later(REST_AFTER, lambda: asyncio.ensure_future(self._blank(tab)))

    async def _blank(self, tab: Any) -> None:
        """A tab still free ``REST_AFTER`` seconds after its page goes to about:blank (what that page left running,
        timers and requests, ends); it is free again once there (closed if it cannot get there)."""
        freed = self.freed.get(tab)
        if freed is None or time.monotonic() - freed < REST_AFTER - 0.01:
            return  # given a page since (or freed again later: its own call comes)
        self.free.remove(tab)
        del self.freed[tab]
        context = tab.context
        try:
            await asyncio.wait_for(tab.goto("about:blank"), CLOSE_TIMEOUT)
        except Exception:
            await self._close(tab, context)
            return
        if context is self.context:
            self.free.insert(0, tab)  # rested: taken after those with a page left (LIFO keeps the busiest warm)
        else:
            await self._close(tab, context)

    async def _close(self, tab: Any, context: Any = None) -> None:
        """Close a tab (one whose page failed: a renderer stuck in a loop goes with it); an old context goes
        with its last tab."""
        context = tab.context if context is None else context
        try:
            await asyncio.wait_for(tab.close(), CLOSE_TIMEOUT)
        except Exception:
            self.end("a page could not be closed")
        self.tabs[context] = self.tabs.get(context, 1) - 1
        if context is not self.context and self.tabs[context] <= 0:
            del self.tabs[context]
            try:
                await asyncio.wait_for(context.close(), CLOSE_TIMEOUT)
            except Exception:
                self.end("a context could not be closed")
            self.closed += 1
            self.send(("contexts", self.closed))

    def _popup(self, tab: Any) -> None:
        if self.opening:
            return
        asyncio.ensure_future(_quietly(tab.close()))

    def _dialog(self, tab: Any, dialog: Any) -> None:
        page = self.rendering.get(tab)
        if page is not None:
            page.note(f"{dialog.type} dialog dismissed")
        asyncio.ensure_future(_quietly(dialog.dismiss()))

    async def _route(self, route: Any, request: Any) -> None:
        try:
            frame = request.frame
            page = self.rendering.get(frame.page) if frame is not None else None
            if page is None:  # a pop-up's, a service worker's, or what a page left behind: nothing gets out
                await route.abort("blockedbyclient")
            else:
                await page.answer(route, request)
        except Exception:  # the page closed under the route: nothing to answer
            pass


class Page:
    """One page's render: its sub-requests and its settling, in a tab of the child's."""

    def __init__(self, child: Child, rid: int, url: str, status: int, headers: list[tuple[str, str]], body: bytes,
                 wait: str) -> None:
        self.child, self.rid, self.url, self.wait = child, rid, url, wait
        self.main = {"status": status, "headers": _served(headers), "body": body}
        self.served = False
        self.count = self.bytes = self.inflight = 0
        self.last = time.monotonic()
        self.notes: list[str] = []
        self.stage = "navigation"  # then "settle", then "content"

    def note(self, text: str) -> None:
        if text not in self.notes and len(self.notes) < 10:
            self.notes.append(text)

    def failure_kind(self, error: BaseException) -> str:
        """The failure's kind, for the pool's counts: by the stage it broke in, and whether it was a timeout."""
        timeout = "Timeout" in type(error).__name__ or isinstance(error, NotSettled)
        if self.stage == "navigation":
            return "navigation_timeout" if timeout else "navigation_error"
        if self.stage == "settle" and timeout:
            return "settle_timeout"
        return "page_error"

    async def load(self, page: Any) -> tuple[bytes, str]:
        child = self.child
        await page.goto(self.url, wait_until="load", timeout=child.navigation_timeout * 1000)
        self.stage = "settle"
        self.last = max(self.last, time.monotonic())  # idle counts from the load (its scripts' requests may be on
        # their way to the route yet)
        if self.wait:
            await page.wait_for_selector(self.wait, state="attached", timeout=child.settle_timeout * 1000)
        else:
            await self._idle()
        self.stage = "content"
        html, cut, popups = await self._content(page)
        if cut:
            self.note(f"cut at {child.max_subrequests} sub-requests ({cut} more refused)")
        if popups:
            self.note("pop-up refused")
        return html.encode("utf-8"), page.url

    async def _content(self, page: Any) -> tuple[str, int, int]:
        """The DOM as HTML (as Playwright's ``content()`` makes it), the sub-requests cut and the pop-ups refused,
        in one evaluation; asked again while a navigation the route refuses is still under way."""
        for _ in range(20):
            try:
                html, cut, popups = await page.evaluate(CONTENT_SCRIPT)
                return str(html), int(cut), int(popups)
            except Exception as e:
                if "navigat" not in str(e) and "context was destroyed" not in str(e):
                    raise
                await asyncio.sleep(0.05)
        raise NotSettled("the page kept navigating")

    async def _idle(self) -> None:
        """Until no sub-request has been in flight for ``idle_time`` (NotSettled past ``settle_timeout``)."""
        child = self.child
        end = time.monotonic() + child.settle_timeout
        while True:
            now = time.monotonic()
            if self.inflight == 0 and now - self.last >= child.idle_time:
                return
            if now >= end:
                raise NotSettled(f"did not settle within {child.settle_timeout:g} s "
                                 f"({self.inflight} sub-requests in flight, {self.count} made)")
            await asyncio.sleep(min(child.idle_time / 4, 0.05))

    async def answer(self, route: Any, request: Any) -> None:
        child = self.child
        if not self.served and request.url == self.url and request.is_navigation_request():
            self.served = True
            await route.fulfill(**self.main)
            return
        if not self.served:  # the tab's last page, still there until this one's document comes
            await route.abort("blockedbyclient")
            return
        if request.is_navigation_request() and request.frame.parent_frame is None:
            self.note("navigation away refused")
            await route.fulfill(status=204)  # a 204 leaves the page where it is (an abort commits an error page)
            return
        refused = self._refusal(request)
        if refused:
            if request.resource_type not in BLOCKED_TYPES:  # media are refused by default: nothing to say
                self.note(refused)
            await route.abort("blockedbyclient")
            return
        self.count += 1
        self.inflight += 1
        try:
            child.next_sid += 1
            key = (self.rid, child.next_sid)
            future = child.subs[key] = asyncio.get_running_loop().create_future()
            child.send(("sub", self.rid, child.next_sid, request.url, request.resource_type))
            _, _, _, status, headers, body = await future
        finally:
            self.inflight -= 1
            self.last = time.monotonic()
        if not status:
            self.note(body.decode("utf-8", "replace"))
            await route.abort("blockedbyclient")
            return
        self.bytes += len(body)
        await route.fulfill(status=status, headers=_served(headers), body=body)

    def _refusal(self, request: Any) -> str:
        """Why the page's ``request`` is refused here ("": it goes to the parent)."""
        child = self.child
        if request.resource_type in BLOCKED_TYPES and not child.load_media:
            return f"{request.resource_type} not loaded"
        if request.method != "GET":
            return f"{request.method} sub-request refused"
        if self.count >= child.max_subrequests:
            return f"cut at {child.max_subrequests} sub-requests"
        if self.bytes >= child.max_bytes:
            return f"cut at {child.max_bytes} bytes of sub-requests"
        if not request.url.startswith(("http://", "https://")):
            return f"{request.url.partition(':')[0]}: sub-request refused"
        return ""


def _served(headers: list[tuple[str, str]]) -> dict[str, str]:
    """An answer's headers as the browser is served them (the body is whole and decoded)."""
    served: dict[str, str] = {}
    for name, value in headers:
        if name.lower() not in _SKIPPED_HEADERS:
            served[name] = f"{served[name]}, {value}" if name in served else value
    return served


async def _quietly(awaitable: Any) -> None:
    try:
        await awaitable
    except Exception:
        pass


async def _read(reader: asyncio.StreamReader) -> tuple[Any, ...] | None:
    try:
        (length,) = HEADER.unpack(await reader.readexactly(HEADER.size))
        if length > MAX_MESSAGE:
            raise ValueError(f"frame of {length} bytes")
        message: tuple[Any, ...] = marshal.loads(await reader.readexactly(length))
        return message
    except asyncio.IncompleteReadError:
        return None


async def main() -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_MESSAGE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = os.fdopen(sys.stdout.fileno(), "wb", buffering=1 << 20, closefd=False)
    init = await _read(reader)
    if init is None or init[0] != "init":
        return 2
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        child = Child(out, init)
        await child.start(playwright)
        pages: set[asyncio.Task[None]] = set()
        reading = asyncio.ensure_future(_read(reader))
        while True:
            done, _ = await asyncio.wait({reading, child.gone}, return_when=asyncio.FIRST_COMPLETED)
            if child.gone in done:
                child.send(("gone", child.gone.result()))
                return 3
            message = reading.result()
            if message is None:
                break
            reading = asyncio.ensure_future(_read(reader))
            if message[0] == "render":
                task = asyncio.ensure_future(child.render(message))
                pages.add(task)
                task.add_done_callback(pages.discard)
            elif message[0] == "sub":
                child.answered(message)
        if pages:
            await asyncio.wait(pages, timeout=child.navigation_timeout + child.settle_timeout)
        await asyncio.wait_for(child.browser.close(), CLOSE_TIMEOUT)
    return 0


if __name__ == "__main__":
    os.setsid()  # its own process group: the pool ends the child and its browser together (killpg)
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN)  # the parent ends it by closing its input, or with SIGKILL
    sys.exit(asyncio.run(main()))
