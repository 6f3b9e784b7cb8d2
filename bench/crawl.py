"""spiderd against Scrapy on equal work, on the paths users run: the same generated site, the same rules,
items as JSON lines.

    python bench/crawl.py                 # 200 list pages, 10,000 detail pages of 20-60 KB
    python bench/crawl.py --details 2000  # a quicker run
    python bench/crawl.py --only fast,mission   # some of the runs (fast, fast_store, mission, mission_store,
                                                # split, multijob_mission, cores_1, cores_2, http10, scrapy,
                                                # scrapy_http10, faulty_fast, faulty_mission,
                                                # faulty_mission_store, faulty_scrapy; fast_redis,
                                                # mission_redis, http10_redis only when asked for)
    SPIDERD_STALLS=/tmp/stalls.txt python bench/crawl.py --only mission   # what held its reactor (bench/stalls.py)
    python bench/crawl.py --fetch-processes -1   # every spiderd run with fetch processes ([fetch] processes)

The runs, each ``twistd -n spiderd --exit-when-done`` (or Scrapy) to the end of the crawl:

- ``fast``: the all role fetching detail pages itself (``[batch] targets = []``), page store off;
  ``fast_store``: the same with the SQLite store on (lzma, the store's default "fast" preset);
- ``mission``: the all role as it is deployed by default: list pages in the crawler, detail pages in
  batches over ``schedule.json`` to the node's own worker (``targets = ["local"]``), items in the
  worker's feed files; store off; ``mission_store``: the same with the store on;
- ``split``: a ``frontier`` and a ``worker`` in two processes over loopback (timed until the worker has
  run every batch); ``--split-workers K``: K worker daemons, the batches going round them (one machine's
  cores used by the deployed topology);
- ``multijob_mission``: ``mission`` with the worker configured as Scrapyd users configure theirs
  (``[worker] max_jobs = 4``, ``job_concurrency = 16``, ``[batch] size = 1000``, ``flush_interval = 5``);
- ``cores_1``, ``cores_2``: ``mission`` under ``taskset -c`` on the first CPU this process may use, then on
  the first two.  With a third CPU the site's server is pinned to the others, out of the way; on a 2-CPU
  machine it is not pinned (it shares the crawler's CPUs) and its CPU over each run is printed apart, not
  counted.  spiderd's parser processes follow the affinity (``[parse] workers = -1``: one per CPU it may use), so
  ``cores_1`` runs one of them;
- ``http10``: the mission path against the site served by Python's ``http.server`` (HTTP/1.0, a
  connection closed after every answer), a 1,000-detail-page copy, concurrency 16, as a server on the web
  may be; ``scrapy_http10``: Scrapy against the same server;
- ``fast_redis``, ``mission_redis``, ``http10_redis``: ``fast``, ``mission`` and ``http10`` with the pool on Redis (``[pool] backend =
  "redis"``, ``--redis-url``, its own key prefix, deleted after the run); the Redis server's CPU (``INFO cpu``
  before and after) and commands (``INFO commandstats``) a page are printed, the Redis server's CPU counted
  apart from the crawler's;
- ``scrapy``: a CrawlSpider with the same rules, ``CONCURRENT_REQUESTS`` 16 and 64 (the faster counts),
  the same per-domain limit, no delay, no robots.txt (spiderd's robots check is off too), items to a
  JSON-lines feed;
- the site with errors, a copy of the main site (same size and seed) whose detail pages misbehave as
  ``FAULT_SHARES`` says: 2% answer 404, 0.8% 500 at every attempt, 0.25% 301 and 0.25% 302 to another item
  (plus one 301 -> 302 chain), 0.2% trickle out over about 2 s (nginx's ``limit_rate``); its list pages also
  link off-site, ``mailto:`` and ``javascript:`` URLs.  Served by nginx (required for these runs), which
  answers the 500s and redirects per ``location`` (``spiderd.demo.static.nginx_conf(faults=spec)``).  On it:
  ``faulty_fast`` (``fast``), ``faulty_mission`` and ``faulty_mission_store`` (``mission`` and
  ``mission_store`` with the Scrapyd-like worker of ``multijob_mission``) and ``faulty_scrapy`` (``scrapy``,
  its retries at their defaults: a 500 is tried 3 times, with no delay).  Their pages are the site's URLs
  (a URL fetched three times, or redirected, counts once), and their items expected are the detail pages
  that end in a 200 (``spec.expected().details_ok``: the 404s and 500s give none, a redirect's item is its
  target's, made once);

The site is written as static files and served by nginx (Debian's, if installed) or else by ``python -m
spiderd.demo.site`` in its own process. nginx serves it without gzip (``--gzip`` turns it on): on a 2-core
machine the server's compression would take the crawlers' CPU. Scrapy runs from its own virtualenv
(``--scrapy-venv``, created with ``pip install scrapy`` on first use; ``--skip-scrapy`` leaves it out).

Needs, beyond ``pip install .``: nothing for the default runs but ``faulty_*`` (nginx) and ``cores_*``
(``taskset`` and 2 CPUs), checked before anything starts (nginx is optional otherwise, Scrapy is installed on
first use); the ``_redis``
runs need a Redis server of its own for the bench (``--redis-url``, default ``redis://127.0.0.1:6379/0``; other
clients' work on it would count as the crawl's).
CPU is user+system seconds of the crawler and every process it started (spiderd's parser processes and,
for ``split``, the worker process included); RSS is the peak of the sum over that process tree, sampled
every 100 ms.  A run with a worker prints its jobs' times (``bench/jobtimes.py``: how long jobs held a
``max_jobs`` slot after their last item while others were queued).  The load average is printed before and
after.  Every run's items are printed as got/expected.  Ends with one ``RESULT`` line; its keys are listed in
bench/README.md.
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
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from spiderd.demo.pages import SiteSpec  # noqa: E402
from spiderd.core.secrets import redact  # noqa: E402
from spiderd.demo.static import nginx_conf, write_static  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from jobtimes import summary_line  # noqa: E402

TWISTD = "import sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()"
GZIP = False
SPLIT_WORKERS = 1
FETCH_PROCESSES = 0  # [fetch] processes of every spiderd run (--fetch-processes)
LIST_RE = r"/list/\d+\.html$"
DETAIL_RE = r"/item/\d+\.html$"
# the site with errors: shares of its detail pages that answer 404, 500 (for good), 301, 302 (one more 301 -> 302
# chain of two hops), or 200 over about 2 s (nginx's limit_rate)
FAULT_SHARES = (("not_found", 0.02), ("server_error", 0.008), ("moved", 0.0025), ("found", 0.0025), ("slow", 0.002))
# a worker configured as Scrapyd users configure theirs: 4 jobs at once, 16 requests each, batches of 1,000
SCRAPYD_LIKE: dict[str, object] = dict(batch=("size = 1000", "flush_interval = 5"),
                                       extra="[worker]\nmax_jobs = 4\njob_concurrency = 16\n")

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
    expected_items: int = 0
    redis_cpu: float = 0.0  # seconds of the Redis server's CPU (the _redis runs)
    main_cpu: float = 0.0  # seconds of CPU of the command's own process (spiderd's main process, not its children)

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.seconds

    @property
    def cpu_per_1k(self) -> float:
        return self.cpu * 1000 / self.pages

    def line(self) -> str:
        return (f"{self.name:<22} {self.pages:6d} pages {self.seconds:7.2f}s {self.pages_per_s:8.1f} pages/s "
                f"{self.cpu_per_1k:6.2f} CPU s/1k pages ({self.main_cpu * 1000 / self.pages:.2f} its main process) "
                f"peak RSS {self.rss_mb:6.1f} MB  {self.items} items")


def tree_pids(pid: int) -> list[int]:
    """``pid`` and all its descendants alive now."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
        out.append(p)
    return out


def tree_sum(pid: int, value: Callable[[int], float]) -> float:
    """The sum of ``value(p)`` over ``pid`` and its descendants (a process gone meanwhile counts 0)."""
    total = 0.0
    for p in tree_pids(pid):
        try:
            total += value(p)
        except (OSError, ValueError, IndexError):
            continue
    return total


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)


def tree_rss_kb(pid: int) -> int:
    """Resident KB of ``pid`` and all its descendants."""
    return int(tree_sum(pid, _rss_kb))


def tree_cpu(pid: int) -> float:
    """User+system CPU seconds of ``pid`` and its live descendants (nginx's, which the bench never waits for)."""
    return tree_sum(pid, _cpu_ticks) / os.sysconf("SC_CLK_TCK")


def measure(name: str, command: list[str], cwd: Path, count_pages, count_items, env=None, until=None,
            extra_pids=()) -> Run:
    """Run ``command`` to completion (and then until ``until()`` is true); its CPU (children included), wall
    time and peak RSS of its process tree (and of ``extra_pids``')."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    log = open(cwd / f"{name}.log", "w")
    child = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    peak = main_ticks = 0
    while child.poll() is None or (until is not None and child.returncode == 0 and not until()):
        peak = max(peak, tree_rss_kb(child.pid) + sum(tree_rss_kb(p) for p in extra_pids))
        try:
            main_ticks = _cpu_ticks(child.pid)  # (its last reading before it exits: within 0.1 s of its end)
        except (OSError, ValueError, IndexError):
            pass
        time.sleep(0.1)  # sampling other processes' memory
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if child.returncode != 0:
        raise SystemExit(f"{name} failed ({child.returncode}); see {cwd / (name + '.log')}")
    return Run(name, count_pages(), seconds, cpu, peak / 1024, count_items(),
               main_cpu=main_ticks / os.sysconf("SC_CLK_TCK"))


def serve(site_dir: Path, work: Path, spec: SiteSpec, faults: bool = False) -> tuple[str, subprocess.Popen]:
    """nginx on a free port if installed, else the demo site's own server process; ``faults``: nginx answers the
    spec's 500s, redirects and slow pages too (the caller checked that nginx is installed)."""
    if shutil.which("nginx"):
        port = free_port()
        run_dir = work / ("nginx-faulty" if faults else "nginx")
        run_dir.mkdir()
        conf = nginx_conf(site_dir, port, run_dir=run_dir, gzip=GZIP, faults=spec if faults else None)
        (run_dir / "nginx.conf").write_text(conf)
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


def spiderd_config(work: Path, root: str, name: str, *, store: bool, targets: str = "[]", role: str = "all",
                   concurrency: int = 64, extra: str = "", pool: str = "", batch: tuple[str, ...] = ()) -> Path:
    """The configuration of one spiderd run (its own data directory ``work/name``); ``pool``: more ``[pool]``
    lines; ``batch``: more ``[batch]`` lines."""
    data = work / name
    batch_lines = "".join("\n        " + line for line in batch)
    config = work / f"{name}.toml"
    host = root.split("//", 1)[1].split(":", 1)[0]
    config.write_text(textwrap.dedent(f"""\
        [spiderd]
        role = "{role}"
        data_dir = "{data}"
        log_interval = 5
        exit_when_done = true
        [pool]
        seeds = ["{root}"]
        {pool}
        [fetch]
        concurrency = {concurrency}
        per_host_concurrency = {concurrency}
        robots = false
        processes = {FETCH_PROCESSES}
        [batch]
        targets = {targets}{batch_lines}
        [store]
        url = "{'sqlite:///pages.sqlite3' if store else 'none'}"
        [items]
        rotate_count = 100000
        [api]
        port = 0
        [[sites]]
        name = "shop"
        allowed_hosts = ["{host}"]
        list_urls = ['/$', '{LIST_RE}']
        detail_urls = ['{DETAIL_RE}']
        [sites.fields]
        title = "css:h1.title::text"
        price = "css:span.price::text"
        tags = {{ css = "a[rel=tag]::text", all = true }}
        """) + extra)
    return config


def twistd(config: Path, *args: str) -> list[str]:
    """The command of a node; with $SPIDERD_STALLS set (a file), through bench/stalls.py (see there)."""
    code = TWISTD
    if os.environ.get("SPIDERD_STALLS"):
        from stalls import TWISTD_STALLS
        code = TWISTD_STALLS
    return [sys.executable, "-c", code, "-n", "--pidfile=", "spiderd", "--config", str(config), *args]


def count_lines(files: list[Path]) -> int:
    return sum(1 for f in files for _ in f.open())


def run_spiderd(work: Path, root: str, name: str, pages: int, cpus: str = "", **options: object) -> Run:
    """One all-role crawl to its end; items in ``items/`` (fetched here) or the worker's ``feeds/``; ``cpus``:
    the crawler and its children run under ``taskset -c cpus``.  A run with a worker prints its jobs' times
    (see bench/jobtimes.py)."""
    config = spiderd_config(work, root, name, **options)  # type: ignore[arg-type]
    data = work / name

    def items() -> int:
        return count_lines(list((data / "items").glob("*.jl")) + list((data / "feeds").glob("*.jl")))

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    command = (["taskset", "-c", cpus] if cpus else []) + twistd(config)
    run = measure(name, command, work, lambda: pages, items, env)
    if (data / "worker" / "jobs").is_dir():
        print(f"{name}: {summary_line(data)}", flush=True)
    return run


class RedisServer:
    """The bench's Redis server, read with ``redis-cli``: CPU and commands over a run, the run's keys dropped."""

    def __init__(self, url: str) -> None:
        self.url = url  # (given to spiderd's configuration)
        if not shutil.which("redis-cli"):
            raise SystemExit("the _redis runs need redis-cli (Debian's redis-tools)")
        parts = urllib.parse.urlsplit(url)  # the password goes in redis-cli's environment, not its command line
        self._cli_url = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
        self._env = dict(os.environ, REDISCLI_AUTH=parts.password) if parts.password else None
        try:
            answer = self.cli("PING").strip()
        except subprocess.CalledProcessError:
            answer = ""
        if answer != "PONG":
            raise SystemExit(f"no Redis answers at {redact(url)} (--redis-url)")

    def cli(self, *args: str) -> str:
        return subprocess.run(["redis-cli", "-u", self._cli_url, *args], check=True, capture_output=True,
                              text=True, env=self._env).stdout

    def info(self, section: str) -> dict[str, str]:
        lines = (line.split(":", 1) for line in self.cli("INFO", section).splitlines() if ":" in line)
        return {key: value.strip() for key, value in lines}

    def cpu(self) -> float:
        fields = self.info("cpu")
        return float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])

    def commands(self) -> dict[str, int]:
        """command -> calls so far (INFO commandstats), and "(reads)" -> the server's read events (a wake-up for
        each batch of requests read)."""
        out = {"(reads)": int(self.info("stats")["total_reads_processed"])}
        for key, value in self.info("commandstats").items():
            calls = value.split(",", 1)[0].split("=", 1)[1]
            out[key.removeprefix("cmdstat_")] = int(calls)
        return out

    def drop(self, prefix: str) -> None:
        keys = self.cli("--scan", "--pattern", prefix + "*").split()
        for i in range(0, len(keys), 1000):
            self.cli("UNLINK", *keys[i:i + 1000])


def run_redis(work: Path, root: str, name: str, pages: int, redis: RedisServer, **options: object) -> Run:
    """A crawl with the pool on Redis; the server's CPU and commands a page printed, its keys dropped after."""
    prefix = f"spiderd-bench-{os.getpid()}-{name}:"
    pool = (f'backend = "redis"\n        redis_url = "{redis.url}"\n        redis_prefix = "{prefix}"\n'
            f'        redis_namespace = "{prefix}"')  # seed 002's keys under the run's prefix too (dropped after)
    cpu, commands = redis.cpu(), redis.commands()
    try:
        run = run_spiderd(work, root, name, pages, pool=pool, **options)  # type: ignore[arg-type]
        run.redis_cpu = redis.cpu() - cpu
        after = redis.commands()
    finally:
        redis.drop(prefix)
    calls = {key: after[key] - commands.get(key, 0) for key in after if after[key] > commands.get(key, 0)}
    calls.pop("info", None)
    reads = calls.pop("(reads)", 0)
    top = sorted(calls.items(), key=lambda kv: -kv[1])[:8]
    print(f"{name}: Redis CPU {run.redis_cpu * 1e6 / run.pages:.1f} us a page, {reads / run.pages:.3f} read events "
          f"a page, {sum(calls.values()) / run.pages:.2f} commands a page ("
          + ", ".join(f"{key} {value / run.pages:.3f}" for key, value in top) + ")", flush=True)
    return run


def run_split(work: Path, root: str, pages: int, workers: int = 1) -> Run:
    """A frontier and ``workers`` worker daemons, each its own process (the batches go round them); timed until
    every worker has run every batch it was sent."""
    ports = [free_port() for _ in range(workers)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    nodes = []
    try:
        for i, port in enumerate(ports):
            name = "split-worker" if i == 0 else f"split-worker{i + 1}"
            config = spiderd_config(work, root, name, store=False, role="worker", extra=f"[worker]\nport = {port}\n")
            config.write_text(config.read_text().replace("exit_when_done = true", "exit_when_done = false"))
            log = open(work / f"{name}.log", "w")
            nodes.append((work / name, subprocess.Popen(twistd(config), cwd=work, env=env, stdout=log,
                                                        stderr=subprocess.STDOUT)))
        for port in ports:
            wait_port(port)
        targets = "[" + ", ".join(f'"127.0.0.1:{port}"' for port in ports) + "]"
        frontier_cfg = spiderd_config(work, root, "split", store=False, role="frontier", targets=targets)
        run = measure("split", twistd(frontier_cfg), work, lambda: pages, lambda: 0, env,
                      until=lambda: all(worker_idle(port) for port in ports), extra_pids=[p.pid for _, p in nodes])
    finally:
        for _, node in nodes:
            node.send_signal(signal.SIGTERM)
            node.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    run.cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    run.items = sum(count_lines(list((data / "feeds").glob("*.jl"))) for data, _ in nodes)
    return run


def worker_idle(port: int) -> bool:
    """True once the worker at ``port`` has no job pending or running."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/daemonstatus.json", timeout=5) as answer:
        status = json.load(answer)
    return status["pending"] == 0 and status["running"] == 0


HTTP10_SERVER = textwrap.dedent("""\
    import functools, http.server, sys
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
    http.server.SimpleHTTPRequestHandler.log_message = lambda *args: None
    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 256  # listen()'s backlog: set on the class, as the constructor listens
    Server(("127.0.0.1", int(sys.argv[2])), handler).serve_forever()
    """)


def serve_http10(site_dir: Path) -> tuple[str, subprocess.Popen]:
    """Python's http.server (HTTP/1.0: one connection per request, closed after the answer) on a free port."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", HTTP10_SERVER, str(site_dir), str(port)])
    wait_port(port)
    return f"http://127.0.0.1:{port}/", server


def scrapy_venv(path: Path) -> Path:
    scrapy = path / "bin" / "scrapy"
    if not scrapy.exists():
        print(f"creating {path} with Scrapy (once)...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run([str(path / "bin" / "pip"), "install", "-q", "scrapy"], check=True)
    return scrapy


def run_scrapy(work: Path, root: str, scrapy: Path, concurrency: int, suffix: str = "", pages: int = 0) -> Run:
    """Scrapy's CrawlSpider to its end; ``pages``: the site's URLs, counted as its pages (else the responses it
    counted: on the clean site the same number)."""
    spider = work / "shop_spider.py"
    spider.write_text(SCRAPY_SPIDER)
    name = f"scrapy{suffix}-c{concurrency}"
    feed = work / f"{name}.jl"
    stats = work / f"{name}.stats.json"
    command = [
        str(scrapy), "runspider", str(spider), "-o", f"{feed}:jsonlines", "-a", f"root={root}",
        "-s", f"CONCURRENT_REQUESTS={concurrency}", "-s", f"CONCURRENT_REQUESTS_PER_DOMAIN={concurrency}",
        "-s", "DOWNLOAD_DELAY=0", "-s", "ROBOTSTXT_OBEY=False", "-s", "LOG_LEVEL=INFO",
        "-s", "TELNETCONSOLE_ENABLED=False", "-s", f"STATS_DUMP=True",
        "-s", "EXTENSIONS={\"scrapy.extensions.telnet.TelnetConsole\": null}",
    ]
    log = work / f"{name}.log"
    run = measure(name, command, work, lambda: pages or _scrapy_stat(log, "downloader/response_count"),
                  lambda: sum(1 for _ in feed.open()))
    stats.write_text(json.dumps({"pages": run.pages}))
    if pages:
        print(f"{name}: {_scrapy_stat(log, 'downloader/response_count')} responses, "
              f"{_scrapy_stat(log, 'retry/count', 0)} retries, "
              f"{_scrapy_stat(log, 'retry/max_reached', 0)} given up", flush=True)
    return run


def _scrapy_stat(log: Path, key: str, default: int | None = None) -> int:
    """A counter of Scrapy's stats dump in ``log`` (``default`` if absent; without one, absent is an error)."""
    for line in log.read_text().splitlines():
        if f"'{key}':" in line:
            return int(line.split(":")[-1].strip().rstrip(",}"))
    if default is None:
        raise SystemExit(f"no {key} in {log}")
    return default


FAULTY = ("faulty_fast", "faulty_mission", "faulty_mission_store", "faulty_scrapy")
CORES = ("cores_1", "cores_2")
SCRAPY = ("scrapy", "scrapy_http10", "faulty_scrapy")
RUNS = ("fast", "fast_store", "mission", "mission_store", "split", "multijob_mission", *CORES, "http10", "scrapy",
        "scrapy_http10", *FAULTY, "fast_redis", "mission_redis", "http10_redis")


def check_needs(only: set[str]) -> None:
    """Stop before anything starts if a run asked for lacks what it needs."""
    if only & set(FAULTY) and not shutil.which("nginx"):
        raise SystemExit("the faulty_* runs need nginx (it answers the site's 500s, redirects and slow pages; "
                         "Debian: apt-get install nginx), or leave them out with --only")
    if only & set(CORES) and not shutil.which("taskset"):
        raise SystemExit("the cores_* runs need taskset (Debian's util-linux)")
    if only & set(CORES) and len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("the cores_* runs need 2 CPUs this process may run on")


def byte_compiled() -> None:
    """Byte-compile spiderd's modules once, as ``pip install`` does (Scrapy's virtualenv has its own): a checkout
    installed with ``pip install -e`` under PYTHONDONTWRITEBYTECODE compiled them again in every process of every
    run (0.2 s of each node's start, and each parse child's)."""
    import compileall

    import spiderd

    compileall.compile_dir(os.path.dirname(spiderd.__file__), quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lists", type=int, default=200)
    parser.add_argument("--details", type=int, default=10000)
    parser.add_argument("--http10-details", type=int, default=1000)
    parser.add_argument("--scrapy-venv", default=str(Path(tempfile.gettempdir()) / "spiderd-bench-scrapy"))
    parser.add_argument("--skip-scrapy", action="store_true")
    parser.add_argument("--only", default=",".join(run for run in RUNS if not run.endswith("_redis")),
                        help="comma-separated runs (default: all but the _redis ones)")
    parser.add_argument("--gzip", action="store_true", help="let nginx gzip the pages")
    parser.add_argument("--split-workers", type=int, default=1,
                        help="worker daemons of the split run (its batches go round them)")
    parser.add_argument("--fetch-processes", type=int, default=0,
                        help="[fetch] processes of every spiderd run (fetch children; -1: one per CPU)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0", help="the Redis of the _redis runs")
    args = parser.parse_args()
    global GZIP, SPLIT_WORKERS, FETCH_PROCESSES
    GZIP = args.gzip
    FETCH_PROCESSES = args.fetch_processes
    if args.split_workers < 1:
        raise SystemExit("--split-workers: at least 1")
    SPLIT_WORKERS = args.split_workers
    only = set(args.only.split(","))
    if only - set(RUNS):
        raise SystemExit(f"--only: unknown runs {sorted(only - set(RUNS))}; known: {', '.join(RUNS)}")
    if args.skip_scrapy:
        only -= set(SCRAPY)
    check_needs(only)
    byte_compiled()
    spec = SiteSpec(lists=args.lists, details=args.details, detail_size=(20000, 60000), faults=False, seed=7)
    faulty_spec = SiteSpec(lists=args.lists, details=args.details, detail_size=(20000, 60000), faults=True, seed=7,
                           fault_shares=FAULT_SHARES)
    small = SiteSpec(lists=max(1, args.http10_details // 50), details=args.http10_details,
                     detail_size=(20000, 60000), faults=False, seed=7)
    redis = RedisServer(args.redis_url) if any(run.endswith("_redis") for run in only) else None
    work = Path(tempfile.mkdtemp(prefix="spiderd-bench-crawl-"))
    scrapy = scrapy_venv(Path(args.scrapy_venv)) if only & set(SCRAPY) else None
    write_static(spec, work / "site")
    root, server = serve(work / "site", work, spec)
    servers = [server]
    print(f"load before the runs (uptime): {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f} on {os.cpu_count()} CPUs", flush=True)
    try:
        runs = crawls(work, root, spec, only, scrapy, redis)
        if only & set(CORES):
            runs.update(run_cores(work, root, spec, only, server))
        if only & {"http10", "scrapy_http10", "http10_redis"}:
            write_static(small, work / "site10")
            root10, server10 = serve_http10(work / "site10")
            servers.append(server10)
            runs.update(http10(work, root10, small, only, scrapy, redis))
        if only & set(FAULTY):
            write_static(faulty_spec, work / "site-faulty")
            root_faulty, server_faulty = serve(work / "site-faulty", work, faulty_spec, faults=True)
            servers.append(server_faulty)
            runs.update(faulty(work, root_faulty, faulty_spec, only, scrapy))
        print(f"load after the runs (uptime): {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
              f"{os.getloadavg()[2]:.2f}", flush=True)
        report(runs)
    finally:
        for server in servers:
            nginx = isinstance(server.args, list) and server.args[0] == "nginx"
            server.send_signal(signal.SIGQUIT if nginx else signal.SIGTERM)
            server.wait()
        if os.environ.get("BENCH_KEEP"):
            print(f"kept {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)


def crawls(work: Path, root: str, spec: SiteSpec, only: set[str], scrapy: Path | None,
           redis: RedisServer | None) -> dict[str, Run]:
    """The runs against the main site, in a fixed order."""
    pages = spec.lists + spec.details + 1  # the root links every list page
    print(f"site: {spec.lists} list pages, {spec.details} detail pages of 20-60 KB at {root}", flush=True)
    plans = {
        "fast": dict(store=False), "fast_store": dict(store=True),
        "mission": dict(store=False, targets='["local"]'), "mission_store": dict(store=True, targets='["local"]'),
        "multijob_mission": dict(store=False, targets='["local"]', **SCRAPYD_LIKE),
    }
    runs: dict[str, Run] = {}
    for name, options in plans.items():
        if name in only:
            runs[name] = run_spiderd(work, root, name, pages, **options)  # type: ignore[arg-type]
            print(runs[name].line(), flush=True)
    for name, options in {"fast_redis": plans["fast"], "mission_redis": plans["mission"]}.items():
        if name in only and redis is not None:
            runs[name] = run_redis(work, root, name, pages, redis, **options)
            print(runs[name].line(), flush=True)
    if "split" in only:
        runs["split"] = run_split(work, root, pages, SPLIT_WORKERS)
        print(runs["split"].line(), flush=True)
    if "scrapy" in only and scrapy is not None:
        tries = [run_scrapy(work, root, scrapy, concurrency) for concurrency in (16, 64)]
        for run in tries:
            print(run.line(), flush=True)
        runs["scrapy"] = max(tries, key=lambda r: r.pages_per_s)
    for run in runs.values():
        run.expected_items = spec.details
    return runs


def http10(work: Path, root: str, spec: SiteSpec, only: set[str], scrapy: Path | None,
           redis: RedisServer | None = None) -> dict[str, Run]:
    """The runs against the HTTP/1.0 server, at concurrency 16."""
    pages = spec.lists + spec.details + 1
    print(f"HTTP/1.0 site (Python's http.server): {spec.lists} list pages, {spec.details} detail pages at {root}",
          flush=True)
    runs: dict[str, Run] = {}
    if "http10" in only:
        runs["http10"] = run_spiderd(work, root, "http10", pages, store=False, targets='["local"]', concurrency=16)
        print(runs["http10"].line() + "  " + failures(work / "http10.log"), flush=True)
    if "http10_redis" in only and redis is not None:
        runs["http10_redis"] = run_redis(work, root, "http10_redis", pages, redis, store=False, targets='["local"]',
                                         concurrency=16)
        print(runs["http10_redis"].line() + "  " + failures(work / "http10_redis.log"), flush=True)
    if "scrapy_http10" in only and scrapy is not None:
        runs["scrapy_http10"] = run_scrapy(work, root, scrapy, 16, suffix="-http10")
        print(runs["scrapy_http10"].line(), flush=True)
    for run in runs.values():
        run.expected_items = spec.details
    return runs


def run_cores(work: Path, root: str, spec: SiteSpec, only: set[str], server: subprocess.Popen) -> dict[str, Run]:
    """The mission path (as ``mission``) under ``taskset -c`` on the first of this process's CPUs, then the first
    two.  With a third CPU the site's server is pinned to the others, out of the way; with two it is not pinned
    (it shares the crawler's CPUs) and its CPU over each run is printed apart, not counted in the run's."""
    pages = spec.lists + spec.details + 1
    allowed = sorted(os.sched_getaffinity(0))
    others = allowed[2:]
    pids = tree_pids(server.pid)
    for pid in pids if others else ():
        os.sched_setaffinity(pid, others)
    print("cores: the server " + (f"pinned to CPUs {','.join(map(str, others))}" if others else
                                  "not pinned (no third CPU): it shares the crawler's CPUs"), flush=True)
    runs: dict[str, Run] = {}
    try:
        for name, cpus in (("cores_1", allowed[:1]), ("cores_2", allowed[:2])):
            if name in only:
                taskset = ",".join(map(str, cpus))
                before = tree_cpu(server.pid)
                runs[name] = run_spiderd(work, root, name, pages, cpus=taskset, store=False, targets='["local"]')
                print(runs[name].line() + f"  (taskset -c {taskset}; the server {tree_cpu(server.pid) - before:.2f} "
                      "CPU-s, not counted)", flush=True)
    finally:
        for pid in pids if others else ():
            os.sched_setaffinity(pid, allowed)
    for run in runs.values():
        run.expected_items = spec.details
    return runs


FAULTY_PLANS: dict[str, dict[str, object]] = {
    "faulty_fast": dict(store=False),
    "faulty_mission": dict(store=False, targets='["local"]', **SCRAPYD_LIKE),
    "faulty_mission_store": dict(store=True, targets='["local"]', **SCRAPYD_LIKE),
}


def faulty(work: Path, root: str, spec: SiteSpec, only: set[str], scrapy: Path | None) -> dict[str, Run]:
    """The runs against the site with errors.  Pages: the site's URLs (a page fetched three times, or
    redirected, counts once); items expected: its detail pages that end in a 200 (the 404s and 500s give none,
    a redirect's item is its target's)."""
    pages = spec.lists + spec.details + 1
    e = spec.expected()
    print(f"site with errors: {spec.lists} list pages, {spec.details} detail pages at {root}: {len(e.not_found)} "
          f"answer 404, {len(e.server_error)} 500, {len(e.redirects)} redirect, {len(e.slow)} take "
          f"{spec.slow_delay:g} s; {len(e.details_ok)} items expected", flush=True)
    runs: dict[str, Run] = {}
    for name, options in FAULTY_PLANS.items():
        if name in only:
            runs[name] = run_spiderd(work, root, name, pages, **options)  # type: ignore[arg-type]
            print(runs[name].line() + "  " + failures(work / f"{name}.log"), flush=True)
    if "faulty_scrapy" in only and scrapy is not None:
        tries = [run_scrapy(work, root, scrapy, concurrency, suffix="-faulty", pages=pages) for concurrency in (16, 64)]
        for run in tries:
            print(run.line(), flush=True)
        runs["faulty_scrapy"] = max(tries, key=lambda r: r.pages_per_s)
    for run in runs.values():
        run.expected_items = len(e.details_ok)
    return runs


def failures(log: Path) -> str:
    """The statuses of the summary line (resets and failures show there)."""
    summary = [line for line in log.read_text().splitlines() if "Summary:" in line]
    return summary[-1].split("statuses: ", 1)[-1] if summary else "(no summary)"


def new_runs(runs: dict[str, Run], figure: Callable[..., None]) -> None:
    """The figures of the site with errors, the Scrapyd-like worker and the pinned runs."""
    for name in ("multijob_mission", *CORES, *FAULTY):
        if runs.get(name):
            figure(f"{name}_pages_per_s", runs[name].pages_per_s)
            figure(f"{name}_cpu_per_1k", runs[name].cpu_per_1k, ".2f")
    ratios = {"multijob_mission_vs_fast": ("multijob_mission", "fast"), "cores_2_vs_1": ("cores_2", "cores_1"),
              "faulty_mission_vs_fast": ("faulty_mission", "faulty_fast"),
              "faulty_mission_store_vs_scrapy": ("faulty_mission_store", "faulty_scrapy")}
    for key, (top, bottom) in ratios.items():
        if runs.get(top) and runs.get(bottom):
            figure(key, runs[top].pages_per_s / runs[bottom].pages_per_s, ".2f")


def report(runs: dict[str, Run]) -> None:
    """Ratios and the RESULT line (keys of runs that did not take place are left out)."""
    fields: list[tuple[str, float, str]] = []

    def figure(key: str, value: float, fmt: str = ".0f") -> None:
        fields.append((key, value, fmt))

    fast, scrapy = runs.get("fast"), runs.get("scrapy")
    if fast:
        figure("spiderd_pages_per_s", fast.pages_per_s)
    if scrapy:
        figure("scrapy_pages_per_s", scrapy.pages_per_s)
    if fast and scrapy:
        figure("speedup", fast.pages_per_s / scrapy.pages_per_s, ".2f")
        figure("spiderd_cpu_per_1k", fast.cpu_per_1k, ".2f")
        figure("scrapy_cpu_per_1k", scrapy.cpu_per_1k, ".2f")
        figure("cpu_ratio", fast.cpu_per_1k / scrapy.cpu_per_1k, ".2f")
        figure("spiderd_rss_mb", fast.rss_mb)
        figure("scrapy_rss_mb", scrapy.rss_mb)
    if runs.get("fast_store"):
        figure("spiderd_store_pages_per_s", runs["fast_store"].pages_per_s)
        figure("store_cpu_per_1k", runs["fast_store"].cpu_per_1k, ".2f")
    mission, stored = runs.get("mission"), runs.get("mission_store")
    if mission:
        figure("spiderd_mission_pages_per_s", mission.pages_per_s)
        figure("mission_cpu_per_1k", mission.cpu_per_1k, ".2f")
        figure("mission_main_cpu_per_1k", mission.main_cpu * 1000 / mission.pages, ".2f")  # its ceiling, given cores
        if fast:
            figure("mission_vs_fast", mission.pages_per_s / fast.pages_per_s, ".2f")
    if stored:
        figure("spiderd_mission_store_pages_per_s", stored.pages_per_s)
        figure("mission_store_cpu_per_1k", stored.cpu_per_1k, ".2f")
        if scrapy:
            figure("mission_store_vs_scrapy", stored.pages_per_s / scrapy.pages_per_s, ".2f")
    if runs.get("split"):
        figure("split_pages_per_s", runs["split"].pages_per_s)
        figure("split_cpu_per_1k", runs["split"].cpu_per_1k, ".2f")
        if mission:
            figure("split_vs_mission", runs["split"].pages_per_s / mission.pages_per_s, ".2f")
    for name in ("fast_redis", "mission_redis", "http10_redis"):
        if runs.get(name):
            figure(f"{name}_pages_per_s", runs[name].pages_per_s)
            figure(f"{name}_cpu_per_1k", runs[name].cpu_per_1k, ".2f")
            figure(f"{name}_redis_cpu_us_per_page", runs[name].redis_cpu * 1e6 / runs[name].pages, ".1f")
    new_runs(runs, figure)
    h10, s10 = runs.get("http10"), runs.get("scrapy_http10")
    if h10:
        figure("http10_pages_per_s", h10.pages_per_s)
        figure("http10_cpu_per_1k", h10.cpu_per_1k, ".2f")
    if s10:
        figure("scrapy_http10_pages_per_s", s10.pages_per_s)
        figure("scrapy_http10_cpu_per_1k", s10.cpu_per_1k, ".2f")
        if h10:
            figure("http10_vs_scrapy", h10.pages_per_s / s10.pages_per_s, ".2f")
    print("items (got/expected): " + ", ".join(f"{run.name} {run.items}/{run.expected_items}" for run in runs.values()),
          flush=True)
    for run in runs.values():
        if run.items and run.items != run.expected_items:
            print(f"warning: {run.name} wrote {run.items} items, {run.expected_items} expected", flush=True)
    print("RESULT " + " ".join(f"{key}={value:{fmt}}" for key, value, fmt in fields))


if __name__ == "__main__":
    main()
