"""Rendering pages built by JavaScript: spiderd's render pool against Scrapy + scrapy-playwright, on the same
shop, the same browser binary and the same concurrency.

    python bench/render.py                    # a 2,000-detail-page shop, a 1,000-page mixed site
    python bench/render.py --details 400      # a quicker run
    python bench/render.py --skip-scrapy      # spiderd only (so is a run whose --scrapy-venv is missing)

The shop is ``tests/shop.py``'s (served by twisted.web in its own process on 127.0.0.1): list pages write their
detail links with a script, detail pages fill their title and price from an XHR to a JSON endpoint, each detail
page links an image (not loaded by either crawler).  The runs:

- ``render``: ``twistd -n spiderd`` (the all role, detail pages fetched by the crawler itself, store off), the site
  ``render = "always"``, ``[render] browsers = 2``, ``pages_per_browser = 4``, ``[fetch] concurrency = 8``; to its
  end (``exit_when_done``).  Its memory, every process of it (its browsers, their renderers, the parse children)
  summed as their proportional set sizes (PSS: a page shared by two of them counts half in each; their RSS summed
  would count Chromium's shared pages once per process), is read every ``--memory-every`` (250) rendered pages,
  by kind of process (the node, parse and render children, Playwright drivers, browsers, renderers, other browser
  processes); a point can land on a transient (a context or a browser being replaced: old and new side by side),
  so their private memory (resident less shared, cheap to read) is read at every poll too, and its median and
  peak over the 250 pages before 500 and 2,000 are reported; and the CPU each kind of process spent per page;
- ``scrapy_playwright``: Scrapy 2.13+ with scrapy-playwright, from its own virtualenv (``--scrapy-venv``, made on
  first use), on the asyncio reactor, ``executable_path`` the same Chromium, ``CONCURRENT_REQUESTS = 8``, images,
  media and fonts aborted, each page waited for until its network is idle (Playwright's ``networkidle``: 500 ms
  without a request, as spiderd's ``idle_time = 0.5``), so both fill the XHR's fields;
- ``auto``: spiderd with ``render = "auto"`` on a mixed site of ``--mixed`` pages, half articles in plain HTML
  (``/a/N``, listed by a plain list page) and half products built by script (``/p/N``): the share of the pages it
  rendered (``render`` counters in /api/status), and whether it found every item.

Pages per second are items over the run's wall time, the browsers' start included.  Ends with one ``RESULT`` line:
``render_pages_per_s``, ``render_items_filled``, ``scrapy_playwright_pages_per_s`` (absent when the Scrapy
virtualenv is: ``--make-scrapy-venv`` makes it with pip), ``render_rss_mb_at_500``, ``render_rss_mb_at_2000``,
``render_private_mb_median_500`` / ``_peak_500`` and ``_2000``, ``auto_rendered_share``, ``auto_items_found`` and
``auto_items_expected``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spiderd.core.proctree import children_of, command_of, descendants, pss_of, tree_private  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
TWISTD = "import sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()"
SERVER = """
import sys
sys.path.insert(0, {root!r})
from twisted.internet import reactor
from twisted.web import server
from tests.shop import Shop

class Mixed(Shop):
    def render_GET(self, request):
        path = request.path.decode()
        if path == "/":
            request.setHeader(b"content-type", b"text/html")
            lists = "".join(f"<a href='/list/{{n}}'>products {{n}}</a> " for n in range(1, self.lists + 1))
            return f"<html><body>{{lists}} <a href='/articles'>articles</a></body></html>".encode()
        if path == "/articles":
            request.setHeader(b"content-type", b"text/html")
            links = "".join(f"<a href='/a/{{n}}'>article {{n}}</a> " for n in range(1, self.details + 1))
            return f"<html><body>{{links}}</body></html>".encode()
        if path.startswith("/a/"):
            n = path.rsplit("/", 1)[1]
            request.setHeader(b"content-type", b"text/html")
            return f"<html><body><h1>Product {{n}}</h1><span id='price'>{{n}}.99</span></body></html>".encode()
        return super().render_GET(request)

shop = (Mixed if {mixed} else Shop)(lists={lists}, per_list={per_list})
reactor.listenTCP({port}, server.Site(shop), interface="127.0.0.1")
reactor.run()
"""
SPIDER = """
import scrapy
from scrapy_playwright.page import PageMethod

WAIT = {{"playwright": True, "playwright_page_methods": [PageMethod("wait_for_load_state", "networkidle")]}}

class Shop(scrapy.Spider):
    name = "shop"
    custom_settings = {{
        "DOWNLOAD_HANDLERS": {{"http": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
                              "https": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler"}},
        "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
        "PLAYWRIGHT_BROWSER_TYPE": "chromium",
        "PLAYWRIGHT_LAUNCH_OPTIONS": {{"executable_path": {chromium!r}, "headless": True, "args": ["--no-sandbox"]}},
        "PLAYWRIGHT_ABORT_REQUEST": lambda request: request.resource_type in ("image", "media", "font"),
        "CONCURRENT_REQUESTS": {concurrency}, "CONCURRENT_REQUESTS_PER_DOMAIN": {concurrency},
        "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT": {concurrency},
        "ROBOTSTXT_OBEY": False, "LOG_LEVEL": "WARNING", "TELNETCONSOLE_ENABLED": False,
    }}

    async def start(self):  # Scrapy 2.13+
        yield scrapy.Request({root!r}, meta=WAIT)

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            if "/p/" in href:
                yield response.follow(href, self.item, meta=WAIT)
            elif "/list/" in href:
                yield response.follow(href, self.parse, meta=WAIT)

    def item(self, response):
        yield {{"url": response.url, "title": response.css("h1::text").get(),
               "price": response.css("#price::text").get()}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(details: int, mixed: bool = False) -> tuple[subprocess.Popen[bytes], str]:
    """The shop (or the mixed site) in its own process; (the process, its root URL)."""
    port = free_port()
    per_list = 50
    lists = max(1, details // per_list)
    code = SERVER.format(root=str(ROOT), mixed=mixed, lists=lists, per_list=per_list, port=port)
    process = subprocess.Popen([sys.executable, "-c", code])
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    return process, f"http://127.0.0.1:{port}/"


def spiderd_config(work: Path, root: str, render: str, api: int, detail_re: str, browsers: int = 2,
                   pages: int = 4, max_pages: int = 500) -> Path:
    config = work / f"spiderd-{render}.toml"
    config.write_text(textwrap.dedent(f"""\
        [spiderd]
        data_dir = "{work / render}"
        exit_when_done = true
        log_interval = 30
        [pool]
        seeds = ["{root}"]
        [fetch]
        concurrency = {browsers * pages}
        per_host_concurrency = {browsers * pages}
        robots = false
        [render]
        browser = "{CHROMIUM}"
        browsers = {browsers}
        pages_per_browser = {pages}
        max_pages = {max_pages}
        [batch]
        targets = []
        [store]
        url = "none"
        [api]
        port = {api}
        [[sites]]
        name = "shop"
        allowed_hosts = ["127.0.0.1"]
        list_urls = ['/(list/\\d+|articles)?$']
        detail_urls = ['{detail_re}']
        render = "{render}"
        [sites.fields]
        title = "//h1/text()"
        price = "//span[@id='price']/text()"
        """))
    return config


def status(api: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{api}/api/status", timeout=2) as answer:
            result: dict[str, Any] = json.loads(answer.read())
            return result
    except OSError:
        return None


def kind_of(pid: int, node: int) -> str:
    """What a process of the node is: the node, a parse or render child, a Playwright driver, a browser's main
    process, a renderer, or another browser process (GPU, network, zygote...)."""
    if pid == node:
        return "node"
    command = " ".join(command_of(pid))
    if "spiderd.engine.renderchild" in command:
        return "render_child"
    if "spiderd.fetch.parseworker" in command or "spiderd.fetch.parsechild" in command:
        return "parse_child"
    if "playwright" in command and "node" in command.split(" ", 1)[0]:
        return "driver"
    if "--type=renderer" in command:
        return "renderer"
    if "--type=" in command:
        return "browser_other"
    return "browser" if "chrom" in command else "other"


def ticks_of(pid: int) -> int:
    """``pid``'s CPU time (user and system) in clock ticks (0 when gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


class CpuByKind:
    """CPU seconds of the node's processes by kind, summed over polls (each process's time since the last poll;
    a process's last fraction of a poll before it exits is lost)."""

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}
        self.seconds: dict[str, float] = {}

    def poll(self, node: int) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        now: dict[int, int] = {}
        for pid in [node, *descendants(node)]:
            now[pid] = ticks_of(pid)
            before = self.seen.get(pid, 0)
            if before > now[pid]:  # another process with the same pid
                before = 0
            kind = kind_of(pid, node)
            self.seconds[kind] = self.seconds.get(kind, 0.0) + (now[pid] - before) / tick
        self.seen = now


def memory_by_kind(node: int) -> dict[str, float]:
    """The node's memory (PSS, MB) by kind of process, with their counts and the total."""
    tree = children_of()
    found: dict[str, float] = {}
    for pid in [node, *descendants(node, tree)]:
        kind = kind_of(pid, node)
        found[kind] = found.get(kind, 0.0) + (pss_of(pid) or 0) / 2**20
        found[f"{kind}_n"] = found.get(f"{kind}_n", 0) + 1
    found["total"] = sum(v for k, v in found.items() if not k.endswith("_n"))
    return found


def run_spiderd(work: Path, root: str, render: str, browsers: int = 2, pages: int = 4, max_pages: int = 500,
                every: int = 250) -> dict[str, Any]:
    """One crawl to its end: its time, items, memory (by kind of process) every ``every`` rendered pages, and its
    render counters."""
    api = free_port()
    config = spiderd_config(work, root, render, api, r"/(p|a)/\d+$", browsers, pages, max_pages)
    log = open(work / f"spiderd-{render}.log", "wb")
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-c", TWISTD, "-n", "--pidfile=", "spiderd", "--config", str(config)],
                               cwd=work, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=log,
                               stderr=subprocess.STDOUT)
    memory: dict[int, dict[str, float]] = {}
    samples: list[tuple[int, float]] = []  # (pages rendered, the node's memory) at every poll
    cpu = CpuByKind()
    last: dict[str, Any] = {}
    while process.poll() is None:
        time.sleep(1.0)
        cpu.poll(process.pid)
        answer = status(api)
        if answer is None:
            continue
        last = answer
        rendered = answer.get("render", {}).get("rendered", 0)
        samples.append((rendered, (tree_private(process.pid) or 0) / 2**20))  # cheap: every poll
        mark = rendered // every * every
        if mark and mark not in memory:  # the PSS walks every process's page tables: only at the marks
            memory[mark] = kinds = memory_by_kind(process.pid)
            print(f"  {render} at {mark} pages (load {os.getloadavg()[0]:.1f}): "
                  + " ".join(f"{k}={v:.0f}" for k, v in sorted(memory[mark].items())), flush=True)
    elapsed = time.monotonic() - started
    items = [json.loads(line) for f in (work / render / "items").glob("*.jl") for line in f.open()]
    filled = sum(1 for item in items if item.get("price"))
    pages = max(1, last.get("counts", {}).get("pages", 0))
    print(f"  {render}: CPU ms per page by kind of process: "
          + " ".join(f"{k}={v * 1000 / pages:.0f}" for k, v in sorted(cpu.seconds.items())), flush=True)
    return {"elapsed": elapsed, "items": len(items), "filled": filled, "memory": memory, "samples": samples,
            "render": last.get("render", {}),
            "pages": last.get("counts", {}).get("pages", 0)}


def scrapy_venv(path: Path, make: bool) -> Path | None:
    """The Python of the Scrapy virtualenv at ``path``: made there with ``make``; else None (skipped, said why)
    where it is missing or lacks scrapy-playwright."""
    python = path / "bin" / "python"
    if not python.exists() and make:
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "scrapy>=2.13", "scrapy-playwright",
                        "playwright"], check=True)
    if not python.exists() or subprocess.run([str(python), "-c", "import scrapy_playwright"],
                                             capture_output=True).returncode:
        print(f"scrapy_playwright: skipped ({path} has no Scrapy with scrapy-playwright; --make-scrapy-venv "
              "makes it, or --scrapy-venv names one)", flush=True)
        return None
    return python


def run_scrapy(work: Path, root: str, python: Path, concurrency: int) -> dict[str, Any]:
    spider = work / "shop_spider.py"
    spider.write_text(SPIDER.format(chromium=CHROMIUM, concurrency=concurrency, root=root))
    out = work / "scrapy-items.jl"
    started = time.monotonic()
    subprocess.run([str(python), "-m", "scrapy", "runspider", str(spider), "-o", f"{out}:jsonlines"], cwd=work,
                   check=True, stdout=open(work / "scrapy.log", "wb"), stderr=subprocess.STDOUT)
    elapsed = time.monotonic() - started
    items = [json.loads(line) for line in out.open()]
    filled = sum(1 for item in items if item.get("price"))
    return {"elapsed": elapsed, "items": len(items), "filled": filled}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--details", type=int, default=2000)
    parser.add_argument("--mixed", type=int, default=1000, help="pages of the mixed site (half plain)")
    parser.add_argument("--skip-scrapy", action="store_true")
    parser.add_argument("--skip-auto", action="store_true")
    parser.add_argument("--browsers", type=int, default=2, help="[render] browsers (scrapy-playwright: one)")
    parser.add_argument("--pages-per-browser", type=int, default=4,
                        help="[render] pages_per_browser; the concurrency of both is their product")
    parser.add_argument("--scrapy-venv", type=Path, default=Path(tempfile.gettempdir()) / "spiderd-bench-playwright")
    parser.add_argument("--make-scrapy-venv", action="store_true", help="make --scrapy-venv if missing (pip)")
    parser.add_argument("--max-pages", type=int, default=500, help="[render] max_pages")
    parser.add_argument("--memory-every", type=int, default=250, help="read the memory every so many pages")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    if not os.access(CHROMIUM, os.X_OK):
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install chromium")
    work = Path(tempfile.mkdtemp(prefix="spiderd-bench-render-"))
    print(f"work: {work}; load average before: {os.getloadavg()}", flush=True)
    results: dict[str, Any] = {}
    server, root = serve(args.details)
    try:
        spiderd_run = run_spiderd(work, root, "always", args.browsers, args.pages_per_browser, args.max_pages,
                                  args.memory_every)
        print(f"render: { {k: v for k, v in spiderd_run.items() if k not in ('memory', 'samples')} }", flush=True)
        results["render_pages_per_s"] = spiderd_run["items"] / spiderd_run["elapsed"]
        results["render_items_filled"] = spiderd_run["filled"]
        for mark in (500, 2000):
            if mark in spiderd_run["memory"]:
                results[f"render_rss_mb_at_{mark}"] = spiderd_run["memory"][mark]["total"]
            window = sorted(m for n, m in spiderd_run["samples"] if mark - 250 < n <= mark)
            if window:  # every poll over the 250 pages before the mark: a point lands on a transient or not
                results[f"render_private_mb_median_{mark}"] = window[len(window) // 2]
                results[f"render_private_mb_peak_{mark}"] = window[-1]
        python = None if args.skip_scrapy else scrapy_venv(args.scrapy_venv, args.make_scrapy_venv)
        if python is not None:
            scrapy = run_scrapy(work, root, python, args.browsers * args.pages_per_browser)
            print(f"scrapy_playwright: {scrapy}", flush=True)
            results["scrapy_playwright_pages_per_s"] = scrapy["items"] / scrapy["elapsed"]
            results["scrapy_playwright_items_filled"] = scrapy["filled"]
    finally:
        server.terminate()
    if not args.skip_auto:
        results.update(run_auto(work, args))
    print(f"load average after: {os.getloadavg()}", flush=True)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print("RESULT " + " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in results.items()))


def run_auto(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """render = "auto" on the mixed site: the share of its pages rendered, its items found and expected."""
    server, root = serve(args.mixed // 2, mixed=True)
    try:
        auto = run_spiderd(work, root, "auto", args.browsers, args.pages_per_browser, args.max_pages,
                           args.memory_every)
    finally:
        server.terminate()
    print(f"auto: { {k: v for k, v in auto.items() if k not in ('memory', 'samples')} }", flush=True)
    return {"auto_rendered_share": auto["render"].get("rendered", 0) / max(1, auto["pages"]),
            "auto_items_found": auto["items"], "auto_items_expected": (args.mixed // 2 // 50) * 50 * 2}


if __name__ == "__main__":
    main()
