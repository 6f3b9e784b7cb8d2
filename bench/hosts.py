"""A cost per page that does not grow with the number of hosts (issue 38): the same crawl at 5,000, 50,000 and
500,000 hosts, each for a fixed time, with the pool on LevelDB and on Redis.

    python bench/hosts.py                                   # 5k, 50k, 500k hosts, 120 s each, both pools
    python bench/hosts.py --sizes 5000,50000 --seconds 60 --pools leveldb
    python bench/hosts.py --profile /tmp/prof               # py-spy each run's main process (pip install py-spy)
    python bench/hosts.py --stalls /tmp/stalls              # what held the reactor when it was late
    python bench/hosts.py --mission --pools leveldb         # the deployed path: batches to the node's own worker

The web: every address 127.10.0.0 + i (127.0.0.0/8 only) is a host serving the same small shop: ``/`` and two
more list pages, 60 detail pages of 15 KB, a robots.txt.  One nginx serves them all through one listening
socket bound to the loopback device (``SO_BINDTODEVICE lo``, handed to nginx as an inherited socket), so no
other interface can reach it.  Its own limit is measured first, by plain keep-alive clients in two processes,
and printed: if the crawl comes near it, the figures measure the server.

The crawl, as the issue ran it: the all role, the details fetched in the process (``[batch] targets = []``; with
``--mission``, in batches over ``schedule.json`` to the node's own worker, ``targets = ["local"]``),
store off, concurrency 64, ``per_host_concurrency = 2``, ``per_host_delay = 0.5``, robots.txt on, every host
a seed.  Every 10 s the bench samples the node's pages (``/api/status``), the CPU of its process tree (the
parse children included) and its RSS, and the reactor's p99 lag (the API's, over its last minute); each run
ends with SIGTERM after ``--seconds``.  Pages/s and CPU ms a page count from the first sample with a page to
the last.  nginx logs every request, so the robots.txt requests are counted per host that was fetched from,
and the requests a second (pages and robots.txt) are printed too: with many hosts a short run fetches mostly
the seeds, each a host's first page and so one robots.txt request a page.

Needs, beyond ``pip install .``: root (``SO_BINDTODEVICE``; nginx's workers run as root to read the bench's
private temp directory), nginx, and for ``--profile`` py-spy.

``rss_mb_per_100k_hosts`` is the growth of the node's RSS from the smallest size to the largest, per 100,000
hosts.  The Redis runs need a Redis server (``--redis-url``) whose keys under the run's prefix are dropped
after; its CPU is printed apart.  Ends with one ``RESULT`` line (the LevelDB pool's figures; the Redis pool's
with a ``redis_`` prefix).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from ipaddress import IPv4Address
from multiprocessing import Pool
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from stalls import TWISTD_STALLS  # noqa: E402
from crawl import DETAIL_RE, LIST_RE, ROOT, TWISTD, RedisServer, free_port, tree_rss_kb  # noqa: E402

from spiderd.demo.pages import SiteSpec  # noqa: E402
from spiderd.demo.static import write_static  # noqa: E402

PY_SPY = shutil.which("py-spy") or next((p for p in [Path(sys.executable).parent / "py-spy"] if p.exists()), None)
FIRST = IPv4Address("127.10.0.0")
SAMPLE = 10.0
SPEC = SiteSpec(lists=3, details=60, detail_size=(15_000, 15_000), faults=False)
NGINX = """\
user root;
worker_processes 1;
pid "{run}/nginx.pid";
error_log "{run}/error.log" warn;
events {{ worker_connections 4096; }}
http {{
    log_format hosts '$host $uri';
    access_log "{run}/access.log" hosts buffer=256k flush=1s;
    log_not_found off;
    server_tokens off;
    sendfile on;
    keepalive_requests 100000;
    types {{ text/html html; text/plain txt; }}
    default_type application/octet-stream;
    server {{
        listen 0.0.0.0:{port} backlog=4096;
        root "{root}";
        index index.html;
    }}
}}
"""


def address(i: int) -> str:
    return str(FIRST + i)


class Server:
    """nginx serving ``root`` on every 127.0.0.0/8 address at one port (a socket bound to ``lo``)."""

    def __init__(self, root: Path, run: Path) -> None:
        """As root (the socket option; nginx's workers run as root to read the bench's private directory)."""
        self.run = run
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, b"lo")  # loopback only: needs root
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", 0))
        sock.listen(4096)
        self.port = sock.getsockname()[1]
        (run / "nginx.conf").write_text(NGINX.format(run=run, port=self.port, root=root))
        sock.set_inheritable(True)
        env = dict(os.environ, NGINX=f"{sock.fileno()};")  # nginx takes it as an inherited listening socket
        self.process = subprocess.Popen(["nginx", "-c", str(run / "nginx.conf"), "-g", "daemon off;"], env=env,
                                        pass_fds=(sock.fileno(),))
        sock.close()
        try:
            urllib.request.urlopen(f"http://{address(1)}:{self.port}/robots.txt", timeout=10).read()
        except Exception:
            self.stop()
            raise

    def new_log(self, name: str) -> Path:
        """Requests from now on go to a fresh access log; the last one is renamed ``name``."""
        kept = self.run / f"{name}.access.log"
        (self.run / "access.log").rename(kept)
        self.process.send_signal(signal.SIGUSR1)  # reopen
        time.sleep(1.5)  # the old log's buffer is flushed within a second
        return kept

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait()


def _client(args: tuple[int, int, float]) -> int:
    """Keep-alive GETs of one detail page, spread over 64 addresses, for ``seconds``; the answers counted."""
    port, first, seconds = args
    socks = [socket.create_connection((address(first + i), port)) for i in range(64)]
    request = b"GET /item/1.html HTTP/1.1\r\nHost: x\r\n\r\n"
    done, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        for s in socks:
            s.sendall(request)
        for s in socks:
            head = b""
            while b"\r\n\r\n" not in head:
                head += s.recv(65536)
            head, _, body = head.partition(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            while len(body) < length:
                body += s.recv(65536)
            done += 1
    return done


def server_limit(server: Server, seconds: float = 5.0) -> float:
    """Pages a second the server gave two client processes (a lower bound of its limit: the clients share the
    machine with it)."""
    with Pool(2) as pool:
        counts = pool.map(_client, [(server.port, 1000, seconds), (server.port, 2000, seconds)])
    return sum(counts) / seconds


@dataclass
class Sample:
    at: float
    pages: int
    cpu: float
    rss_mb: float
    lag_p99_ms: float


@dataclass
class Result:
    name: str
    hosts: int
    samples: list[Sample] = field(default_factory=list)
    robots: int = 0
    requests: int = 0  # every request the server saw in the run (pages, robots.txt)
    robots_hosts: int = 0
    fetched_hosts: int = 0
    redis_cpu: float = 0.0

    def _window(self) -> tuple[Sample, Sample]:
        started = next((s for s in self.samples if s.pages > 0), self.samples[0])
        return started, self.samples[-1]

    @property
    def pages_per_s(self) -> float:
        a, b = self._window()
        return (b.pages - a.pages) / max(b.at - a.at, 1e-9)

    @property
    def cpu_ms_per_page(self) -> float:
        a, b = self._window()
        return (b.cpu - a.cpu) * 1000 / max(b.pages - a.pages, 1)

    @property
    def requests_per_s(self) -> float:
        """Requests a second over the whole run (the sampled window: after the node's API answered)."""
        return self.requests / max(self.samples[-1].at, 1e-9)

    @property
    def cpu_ms_per_request(self) -> float:
        """CPU ms a request the server saw (pages and robots.txt), over the whole run: with many hosts a short
        run fetches mostly seeds, each a host's first page and so one robots.txt request a page."""
        return (self.samples[-1].cpu - self.samples[0].cpu) * 1000 / max(self.requests, 1)

    @property
    def rss_mb(self) -> float:
        return self.samples[-1].rss_mb

    @property
    def lag_p99_ms(self) -> float:
        return max(s.lag_p99_ms for s in self.samples)

    @property
    def robots_per_host(self) -> float:
        return self.robots / max(self.fetched_hosts, 1)


def tree_cpu(pid: int) -> float:
    """User+system seconds of ``pid`` and its descendants (those alive now)."""
    total, todo, tick = 0.0, [pid], os.sysconf("SC_CLK_TCK")
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total


def config(work: Path, name: str, hosts: int, port: int, api_port: int, pool: str, targets: str = "[]") -> Path:
    """The node's configuration: every host a seed, the issue's crawl settings; ``targets``: ``[batch]``'s."""
    seeds = ",\n".join(f'    "http://{address(i)}:{port}/"' for i in range(hosts))
    path = work / f"{name}.toml"
    path.write_text(f"""\
[spiderd]
role = "all"
data_dir = "{work / name}"
log_interval = 10
[pool]
{pool}
seeds = [
{seeds}
]
[fetch]
concurrency = 64
per_host_concurrency = 2
per_host_delay = 0.5
robots = true
[batch]
targets = {targets}
[store]
url = "none"
[api]
port = {api_port}
[[sites]]
name = "shop"
# every address of 127.10.0.0/16 ...: an IP's parent "domains" are its last labels, so its last octet matches
allowed_hosts = [{", ".join(f'"{n}"' for n in range(256))}]
list_urls = ['/$', '{LIST_RE}']
detail_urls = ['{DETAIL_RE}']
[sites.fields]
title = "css:h1.title::text"
""")
    return path


def status(api_port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{api_port}/api/status", timeout=30) as answer:
            return json.load(answer)
    except OSError:
        return None


def crawl(work: Path, server: Server, name: str, hosts: int, seconds: float, pool: str,
          profile: Path | None, stalls: Path | None = None, targets: str = "[]") -> Result:
    """One node crawling ``hosts`` hosts for ``seconds`` (after its API answers), sampled every SAMPLE s."""
    api_port = free_port()
    cfg = config(work, name, hosts, server.port, api_port, pool, targets)
    log = open(work / f"{name}.log", "w")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if stalls is not None:
        stalls.mkdir(parents=True, exist_ok=True)
        env["SPIDERD_STALLS"] = str(stalls / f"{name}.txt")
    code = TWISTD if stalls is None else TWISTD_STALLS
    node = subprocess.Popen([sys.executable, "-c", code, "-n", "--pidfile=", "spiderd", "--config", str(cfg)],
                            cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        result = sample_node(node, name, hosts, api_port, seconds, profile, work)
    finally:
        stop(node)
    count_robots(result, server.new_log(name))
    return result


def sample_node(node: subprocess.Popen, name: str, hosts: int, api_port: int, seconds: float,
                profile: Path | None, work: Path) -> Result:
    """Samples ``node`` every SAMPLE s for ``seconds`` once its API answers (py-spy on it with ``profile``)."""
    result = Result(name, hosts)
    while status(api_port) is None:
        if node.poll() is not None:
            raise SystemExit(f"{name} ended ({node.returncode}); see {work / (name + '.log')}")
        time.sleep(1)  # the node starting (its seeds read)
    spy = None
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        spy = subprocess.Popen([str(PY_SPY), "record", "-p", str(node.pid), "-d", str(int(seconds)), "-r", "50",
                                "-f", "raw", "-o", str(profile / f"{name}.txt")], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    started = time.monotonic()
    while True:
        answer = status(api_port) or {}
        now = time.monotonic() - started
        sample = Sample(now, int(answer.get("counts", {}).get("pages", 0)), tree_cpu(node.pid),
                        tree_rss_kb(node.pid) / 1024, float(answer.get("reactor", {}).get("lag", {}).get("p99_ms", 0)))
        result.samples.append(sample)
        pool = answer.get("pool", {})
        turns = f" in_turn={pool['hosts_in_turn']}" if "hosts_in_turn" in pool else ""
        print(f"  {name} {now:6.1f}s pages={sample.pages} cpu={sample.cpu:.1f}s rss={sample.rss_mb:.0f}MB "
              f"lag_p99={sample.lag_p99_ms:.0f}ms hosts={pool.get('hosts', 0)}{turns}", flush=True)
        if now >= seconds:
            break
        time.sleep(max(0.0, SAMPLE - (time.monotonic() - started - now)))
    if spy is not None:
        spy.wait()
    return result


def stop(node: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 120 s."""
    if node.poll() is not None:
        return
    node.send_signal(signal.SIGTERM)
    try:
        node.wait(120)
    except subprocess.TimeoutExpired:
        node.kill()
        node.wait()


def count_robots(result: Result, log: Path) -> None:
    """robots.txt requests, and the hosts asked for anything, in the run's access log."""
    fetched, robots = set(), set()
    for line in log.open():
        host, _, uri = line.rstrip("\n").partition(" ")
        fetched.add(host)
        result.requests += 1
        if uri == "/robots.txt":
            result.robots += 1
            robots.add(host)
    result.fetched_hosts, result.robots_hosts = len(fetched), len(robots)


def report(result: Result) -> None:
    print(f"{result.name:<14} {result.hosts:>7} hosts {result.pages_per_s:8.1f} pages/s "
          f"({result.requests_per_s:.1f} requests/s, robots.txt included) "
          f"{result.cpu_ms_per_page:6.2f} CPU ms a page  RSS {result.rss_mb:7.1f} MB  lag p99 "
          f"{result.lag_p99_ms:6.0f} ms  robots.txt {result.robots} for {result.fetched_hosts} hosts fetched from "
          f"({result.robots_per_host:.3f} a host)" + (f"  Redis CPU {result.redis_cpu:.1f}s" if result.redis_cpu
                                                      else ""), flush=True)


def size_name(hosts: int) -> str:
    """``5k`` for 5,000 hosts (the issue's keys), the number itself for others."""
    return f"{hosts // 1000}k" if hosts % 1000 == 0 else str(hosts)


def figures(results: list[Result], prefix: str) -> list[tuple[str, float]]:
    """The RESULT keys of one pool's runs."""
    by_size = {r.hosts: r for r in results}
    out = []
    for size, r in sorted(by_size.items()):
        out.append((f"{prefix}hosts_{size_name(size)}_pages_per_s", r.pages_per_s))
    for size, r in sorted(by_size.items()):
        out.append((f"{prefix}cpu_ms_per_page_{size_name(size)}", r.cpu_ms_per_page))
    for size, r in sorted(by_size.items()):
        out.append((f"{prefix}hosts_{size_name(size)}_requests_per_s", r.requests_per_s))
    for size, r in sorted(by_size.items()):
        out.append((f"{prefix}cpu_ms_per_request_{size_name(size)}", r.cpu_ms_per_request))
    for size, r in sorted(by_size.items()):
        out.append((f"{prefix}lag_p99_ms_{size_name(size)}", r.lag_p99_ms))
    small, big = by_size[min(by_size)], by_size[max(by_size)]
    if big.hosts > small.hosts:
        out.append((f"{prefix}rss_mb_per_100k_hosts", (big.rss_mb - small.rss_mb) * 100_000 / (big.hosts - small.hosts)))
    out.append((f"{prefix}robots_fetches_per_host", max(r.robots_per_host for r in results)))
    out.append((f"{prefix}lag_p99_ms", max(r.lag_p99_ms for r in results)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="5000,50000,500000")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--pools", default="leveldb,redis")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy record each run's main process here")
    parser.add_argument("--stalls", type=Path, default=None,
                        help="sample the reactor's stack while it is late, a report per run here (bench/stalls.py)")
    parser.add_argument("--pool-setting", action="append", default=[], metavar="KEY=VALUE",
                        help="a [pool] line for every run (TOML), e.g. max_active_hosts=0")
    parser.add_argument("--mission", action="store_true",
                        help='the deployed path: detail pages in batches to the node\'s own worker ([batch] targets = '
                        '["local"]); RESULT keys prefixed mission_')
    args = parser.parse_args()
    missing = [what for what, ok in (("nginx", shutil.which("nginx")), ("root (SO_BINDTODEVICE)", os.geteuid() == 0),
                                     ("py-spy (--profile)", args.profile is None or PY_SPY)) if not ok]
    if missing:
        raise SystemExit(f"bench/hosts.py needs: {', '.join(missing)}")
    sizes = [int(s) for s in args.sizes.split(",")]
    pools = args.pools.split(",")
    work = Path(tempfile.mkdtemp(prefix="spiderd-hosts-"))
    (work / "www").mkdir()
    (work / "nginx").mkdir()
    write_static(SPEC, work / "www")
    print(f"load average before: {os.getloadavg()}; work in {work}", flush=True)
    server = Server(work / "www", work / "nginx")
    try:
        limit = server_limit(server)
        server.new_log("limit")
        print(f"server limit: at least {limit:.0f} pages/s of 15 KB (two keep-alive client processes)", flush=True)
        redis = RedisServer(args.redis_url) if "redis" in pools else None
        fields: list[tuple[str, float]] = [("server_pages_per_s", limit)]
        settings = "\n".join(args.pool_setting)
        targets = '["local"]' if args.mission else "[]"
        for backend in pools:
            results = []
            for size in sizes:
                name = f"{backend}-{size}"
                if backend == "redis":
                    assert redis is not None
                    prefix = f"spiderd-hosts-{os.getpid()}-{size}:"
                    pool = (f'backend = "redis"\nredis_url = "{redis.url}"\nredis_prefix = "{prefix}"\n'
                            f'redis_namespace = "{prefix}"\n{settings}')
                    cpu = redis.cpu()
                    try:
                        result = crawl(work, server, name, size, args.seconds, pool, args.profile, args.stalls,
                                       targets)
                        result.redis_cpu = redis.cpu() - cpu
                    finally:
                        redis.drop(prefix)
                else:
                    result = crawl(work, server, name, size, args.seconds, settings, args.profile, args.stalls,
                                   targets)
                report(result)
                results.append(result)
            path = "mission_" if args.mission else ""
            fields += figures(results, path + ("" if backend == "leveldb" else "redis_"))
        print(f"load average after: {os.getloadavg()}", flush=True)
    finally:
        server.stop()
    print("RESULT " + " ".join(f"{key}={value:.3f}" for key, value in fields))


if __name__ == "__main__":
    main()
