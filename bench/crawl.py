"""spiderd against Scrapy on equal work: the same generated site, the same rules, items as JSON lines.

    python bench/crawl.py                 # 200 list pages, 10,000 detail pages of 20-60 KB
    python bench/crawl.py --details 2000  # a quicker run

The site is written as static files and served by nginx (Debian's, if
installed) or else by ``python -m spiderd.demo.site`` in its own process.
nginx serves it without gzip (``--gzip`` turns it on): on a 2-core machine
the server's compression would take the crawlers' CPU, and both crawlers
would spend CPU inflating; the work stays equal either way.
Scrapy runs from its own virtualenv (``--scrapy-venv``, created with
``pip install scrapy`` on first use): a CrawlSpider with the same rules,
``CONCURRENT_REQUESTS`` 16 and 64, the same per-domain limit, no delay, no
robots.txt (spiderd's robots check is off too), items to a JSON-lines feed.
spiderd runs ``twistd -n spiderd --exit-when-done`` with the page store off,
then again with it on (SQLite, lzma preset 1).

CPU is user+system seconds of the crawler and every process it started
(spiderd's parser processes included); RSS is the peak of the sum over that
process tree, sampled every 100 ms.  Ends with one ``RESULT`` line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spiderd.demo.site import SiteSpec, nginx_conf, write_static  # noqa: E402

TWISTD = "import sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()"
GZIP = False
LIST_RE = r"/list/\d+\.html$"
DETAIL_RE = r"/item/\d+\.html$"

SCRAPY_SPIDER = textwrap.dedent(
    r'''
    from scrapy.linkextractors import LinkExtractor
    from scrapy.spiders import CrawlSpider, Rule


    class Shop(CrawlSpider):
        name = "shop"
        rules = (
            Rule(LinkExtractor(allow=r"/list/\d+\.html$"), follow=True),
            Rule(LinkExtractor(allow=r"/item/\d+\.html$"), callback="parse_item"),
        )

        def __init__(self, root=None, **kwargs):
            super().__init__(**kwargs)
            self.start_urls = [root]

        def parse_item(self, response):
            yield {
                "url": response.url,
                "title": response.css("h1.title::text").get(),
                "price": response.css("span.price::text").get(),
                "tags": response.css("a[rel=tag]::text").getall(),
            }
    '''
)


@dataclass
class Run:
    name: str
    pages: int
    seconds: float
    cpu: float
    rss_mb: float
    items: int

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.seconds

    @property
    def cpu_per_1k(self) -> float:
        return self.cpu * 1000 / self.pages

    def line(self) -> str:
        return (f"{self.name:<22} {self.pages:6d} pages {self.seconds:7.2f}s {self.pages_per_s:8.1f} pages/s "
                f"{self.cpu_per_1k:6.2f} CPU s/1k pages  peak RSS {self.rss_mb:6.1f} MB  {self.items} items")


def tree_rss_kb(pid: int) -> int:
    """Resident KB of ``pid`` and all its descendants."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total


def measure(name: str, command: list[str], cwd: Path, count_pages, count_items, env=None) -> Run:
    """Run ``command`` to completion; its CPU (children included), wall time and peak tree RSS."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    log = open(cwd / f"{name}.log", "w")
    child = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    peak = 0
    while child.poll() is None:
        peak = max(peak, tree_rss_kb(child.pid))
        time.sleep(0.1)  # sampling another process's memory
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if child.returncode != 0:
        raise SystemExit(f"{name} failed ({child.returncode}); see {cwd / (name + '.log')}")
    return Run(name, count_pages(), seconds, cpu, peak / 1024, count_items())


def serve(site_dir: Path, work: Path, spec: SiteSpec) -> tuple[str, subprocess.Popen]:
    """nginx on a free port if installed, else the demo site's own server process."""
    if shutil.which("nginx"):
        port = free_port()
        run_dir = work / "nginx"
        run_dir.mkdir()
        (run_dir / "nginx.conf").write_text(nginx_conf(site_dir, port, run_dir=run_dir, gzip=GZIP))
        server = subprocess.Popen(["nginx", "-c", str(run_dir / "nginx.conf"), "-g", "daemon off;"])
        wait_port(port)
        return f"http://127.0.0.1:{port}/", server
    lo, hi = spec.detail_size
    server = subprocess.Popen(
        [sys.executable, "-m", "spiderd.demo.site", "--port", "0", "--lists", str(spec.lists), "--details",
         str(spec.details), "--size", f"{lo}-{hi}", "--no-faults"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline().split()[1])
    return f"http://127.0.0.1:{port}/", server


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int) -> None:
    import socket

    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)  # waiting for nginx to bind
    raise SystemExit("the web server did not start")


def spiderd_config(work: Path, root: str, store: bool) -> Path:
    data = work / ("spiderd-store" if store else "spiderd")
    config = work / f"{data.name}.toml"
    config.write_text(textwrap.dedent(f"""\
        [spiderd]
        data_dir = "{data}"
        log_interval = 5
        exit_when_done = true
        [pool]
        seeds = ["{root}"]
        [fetch]
        concurrency = 64
        per_host_concurrency = 64
        robots = false
        [batch]
        targets = []
        [store]
        url = "{'sqlite:///pages.sqlite3' if store else 'none'}"
        [items]
        rotate_count = 100000
        [[sites]]
        name = "shop"
        allowed_hosts = ["127.0.0.1"]
        list_urls = ['/$', '{LIST_RE}']
        detail_urls = ['{DETAIL_RE}']
        [sites.fields]
        title = "css:h1.title::text"
        price = "css:span.price::text"
        tags = {{ css = "a[rel=tag]::text", all = true }}
        """))
    return config


def run_spiderd(work: Path, root: str, store: bool) -> Run:
    config = spiderd_config(work, root, store)
    data = work / ("spiderd-store" if store else "spiderd")
    name = "spiderd+store" if store else "spiderd"

    def pages() -> int:
        log = (work / f"{name}.log").read_text()
        summary = [line for line in log.splitlines() if "Summary:" in line][-1]
        return int(summary.split("Summary: ")[1].split()[0])

    def items() -> int:
        return sum(1 for f in (data / "items").glob("*.jl") for _ in f.open())

    command = [sys.executable, "-c", TWISTD, "-n", "--pidfile=", "spiderd", "--config", str(config)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return measure(name, command, work, pages, items, env)


def scrapy_venv(path: Path) -> Path:
    scrapy = path / "bin" / "scrapy"
    if not scrapy.exists():
        print(f"creating {path} with Scrapy (once)...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run([str(path / "bin" / "pip"), "install", "-q", "scrapy"], check=True)
    return scrapy


def run_scrapy(work: Path, root: str, scrapy: Path, concurrency: int) -> Run:
    spider = work / "shop_spider.py"
    spider.write_text(SCRAPY_SPIDER)
    feed = work / f"scrapy-{concurrency}.jl"
    name = f"scrapy-c{concurrency}"
    stats = work / f"{name}.stats.json"
    command = [
        str(scrapy), "runspider", str(spider), "-o", f"{feed}:jsonlines", "-a", f"root={root}",
        "-s", f"CONCURRENT_REQUESTS={concurrency}", "-s", f"CONCURRENT_REQUESTS_PER_DOMAIN={concurrency}",
        "-s", "DOWNLOAD_DELAY=0", "-s", "ROBOTSTXT_OBEY=False", "-s", "LOG_LEVEL=INFO",
        "-s", "TELNETCONSOLE_ENABLED=False", "-s", f"STATS_DUMP=True",
        "-s", "EXTENSIONS={\"scrapy.extensions.telnet.TelnetConsole\": null}",
    ]
    run = measure(name, command, work, lambda: _scrapy_pages(work / f"{name}.log"), lambda: sum(1 for _ in feed.open()))
    stats.write_text(json.dumps({"pages": run.pages}))
    return run


def _scrapy_pages(log: Path) -> int:
    for line in log.read_text().splitlines():
        if "'downloader/response_count':" in line:
            return int(line.split(":")[-1].strip().rstrip(","))
    raise SystemExit(f"no response count in {log}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lists", type=int, default=200)
    parser.add_argument("--details", type=int, default=10000)
    parser.add_argument("--scrapy-venv", default=str(Path(tempfile.gettempdir()) / "spiderd-bench-scrapy"))
    parser.add_argument("--skip-scrapy", action="store_true")
    parser.add_argument("--gzip", action="store_true", help="let nginx gzip the pages")
    args = parser.parse_args()
    global GZIP
    GZIP = args.gzip
    spec = SiteSpec(lists=args.lists, details=args.details, detail_size=(20000, 60000), faults=False, seed=7)
    work = Path(tempfile.mkdtemp(prefix="spiderd-bench-crawl-"))
    write_static(spec, work / "site")
    root, server = serve(work / "site", work, spec)
    try:
        report(work, root, spec, args)
    finally:
        server.send_signal(signal.SIGQUIT if shutil.which("nginx") else signal.SIGTERM)
        server.wait()
        shutil.rmtree(work, ignore_errors=True)


def report(work: Path, root: str, spec: SiteSpec, args: argparse.Namespace) -> None:
    print(f"site: {spec.lists} list pages, {spec.details} detail pages of 20-60 KB at {root}", flush=True)
    runs = [run_spiderd(work, root, store=False)]
    print(runs[-1].line(), flush=True)
    runs.append(run_spiderd(work, root, store=True))
    print(runs[-1].line(), flush=True)
    if args.skip_scrapy:
        return
    scrapy = scrapy_venv(Path(args.scrapy_venv))
    for concurrency in (16, 64):
        runs.append(run_scrapy(work, root, scrapy, concurrency))
        print(runs[-1].line(), flush=True)
    ours, stored = runs[0], runs[1]
    best = max(runs[2:], key=lambda r: r.pages_per_s)
    speedup = ours.pages_per_s / best.pages_per_s
    cpu_ratio = ours.cpu_per_1k / best.cpu_per_1k
    print(f"spiderd vs the faster Scrapy run ({best.name}): {speedup:.2f}x pages/s, {cpu_ratio:.2f}x CPU per page; "
          f"with the page store on: {stored.pages_per_s / best.pages_per_s:.2f}x pages/s")
    print(
        f"RESULT spiderd_pages_per_s={ours.pages_per_s:.0f} scrapy_pages_per_s={best.pages_per_s:.0f} "
        f"speedup={speedup:.2f} spiderd_cpu_per_1k={ours.cpu_per_1k:.2f} scrapy_cpu_per_1k={best.cpu_per_1k:.2f} "
        f"cpu_ratio={cpu_ratio:.2f} spiderd_rss_mb={ours.rss_mb:.0f} scrapy_rss_mb={best.rss_mb:.0f} "
        f"spiderd_store_pages_per_s={stored.pages_per_s:.0f}"
    )


if __name__ == "__main__":
    main()
