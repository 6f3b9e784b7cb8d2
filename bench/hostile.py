"""Hostile input against a running node: does it answer, and does /api/status stay quick while it lasts?

    python bench/hostile.py

One real node (``twistd -n spiderd``, the all role with its own worker, batches of 20, the page store
off) crawls a generated site on loopback while each attack runs in turn.  A probe thread asks
``GET /api/status`` every 20 ms throughout; for each attack the bench prints the answer the attack
got (it must be a clear refusal or a success, never a hang or a 5xx) and the probe's latency
(p50, p99, max), and the node's own reactor lag over the last 10 s (``/api/status``'s ``reactor.lag``, a
timer sampled every 50 ms).  The targets: /api/status within 100 ms while each attack runs, reactor lag
p99 under 50 ms.  Ends with one
``RESULT`` line: ``<attack>_p99_ms`` and ``<attack>_lag_p99_ms`` per attack, ``worst_p99_ms``,
``worst_lag_p99_ms`` and ``answers_ok`` (attacks answered
as they must be, of all).  ``lists_10k_leveldb`` is not an attack but the heaviest ordinary request:
10,000 list URLs into the LevelDB pool at once (the API adds them 500 at a time, so /api/status, and
every fetch, waits at most one chunk).

Needs nothing beyond ``pip install .``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
TWISTD = "import sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)  # waiting for another process to listen
    raise SystemExit(f"nothing listens on {port}")


def call(method: str, url: str, body: bytes | None = None, content_type: str = "application/json",
         timeout: float = 60.0) -> tuple[int, bytes]:
    """(status, body) of one request; a connection error is status 0."""
    request = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:
        return 0, str(e).encode()


class Probe(threading.Thread):
    """Asks /api/status every 20 ms; ``window()`` gives the latencies since the last call."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.samples: list[float] = []
        self.failures = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            started = time.perf_counter()
            code, _ = call("GET", self.url, timeout=10)
            elapsed = (time.perf_counter() - started) * 1000
            if code == 200:
                self.samples.append(elapsed)
            else:
                self.failures += 1
            self.stop.wait(0.02)  # the probe's own pace

    def window(self) -> list[float]:
        taken, self.samples = self.samples, []
        return taken


def config(work: Path, site: str, api: int, worker: int) -> Path:
    path = work / "node.toml"
    path.write_text(f"""\
[spiderd]
data_dir = "{work / 'data'}"
log_interval = 5
[pool]
seeds = ["{site}"]
[fetch]
concurrency = 32
robots = false
[batch]
targets = ["local"]
size = 20
flush_interval = 5
[worker]
port = {worker}
feed_dirs = ["{work / 'feeds'}"]
[store]
url = "none"
[api]
port = {api}
[[sites]]
name = "shop"
allowed_hosts = ["127.0.0.1"]
list_urls = ['/$', '/list/\\d+\\.html$']
detail_urls = ['/item/\\d+\\.html$']
[sites.fields]
title = "css:h1.title::text"
""")
    return path


def slowloris(port: int, count: int = 300, seconds: float = 5.0) -> tuple[int, str]:
    """``count`` sockets sending a header line every second, never finishing."""
    socks = []
    for _ in range(count):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            s.sendall(b"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            socks.append(s)
        except OSError:
            break
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for s in socks:
            try:
                s.sendall(b"X-Slow: 1\r\n")
            except OSError:
                pass
        time.sleep(1.0)  # the attack's own pace
    for s in socks:
        s.close()
    return 200, f"{len(socks)} slow sockets held for {seconds:.0f}s".encode().decode()


def attacks(api: str, worker: str, work: Path, site: str) -> list[tuple[str, Callable[[], tuple[int, str]], str]]:
    """(name, attack, what the answer must be) in order."""
    details = json.dumps({"urls": [f"{site}item/{i}.html" for i in range(10_000)], "kind": "detail"}).encode()
    lists = json.dumps({"urls": [f"{site}list/{i}.html?from=api" for i in range(10_000)]}).encode()
    many = [f"{site}item/{i}.html" for i in range(60_000)]
    feed = f"FEED_URI=file://{work / 'feeds'}/%(batch)200000000s.jl"

    def post(url: str, body: bytes, kind: str = "application/json") -> tuple[int, str]:
        code, raw = call("POST", url, body, kind)
        return code, raw.decode("utf-8", "replace")[:160]

    def schedule(*pairs: tuple[str, str]) -> tuple[int, str]:
        return post(worker + "/schedule.json", urllib.parse.urlencode(list(pairs)).encode(),
                    "application/x-www-form-urlencoded")

    base = (("project", "spiderd"), ("spider", "shop"))
    return [
        ("baseline", lambda: (time.sleep(3.0), (200, "no attack: the crawl alone"))[1], "200"),
        ("details_10k_batch20", lambda: post(api + "/api/urls", details), "200"),
        ("lists_10k_leveldb", lambda: post(api + "/api/urls", lists), "200"),
        ("hub_span_inf", lambda: post(api + "/api/hubs", b'{"urls": ["' + site.encode() + b'"], '
                                      b'"refresh_span": 1e400}'), "400"),
        ("feed_width", lambda: schedule(*base, ("setting", feed)), "error"),
        ("job_60k_urls", lambda: schedule(*base, ("setting", "DISTRIBUTED_START_URLS=" + json.dumps(many))), "error"),
        ("nested_json", lambda: post(api + "/api/seeds", b"[" * 100_000 + b"]" * 100_000), "400"),
        ("cross_origin", lambda: post_origin(worker + "/schedule.json"), "403"),
        ("slowloris_api", lambda: slowloris(int(api.rsplit(":", 1)[1])), "200"),
        ("slowloris_worker", lambda: slowloris(int(worker.rsplit(":", 1)[1])), "200"),
    ]


def post_origin(url: str) -> tuple[int, str]:
    request = urllib.request.Request(url, data=b"project=spiderd&spider=shop", method="POST",
                                     headers={"Origin": "http://evil.example",
                                              "Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()[:160]
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()[:160]


def as_expected(code: int, text: str, expected: str) -> bool:
    if expected == "error":
        return code == 200 and '"error"' in text
    return str(code) == expected


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from spiderd.demo.pages import SiteSpec  # noqa: F401  (the site comes from the demo's generator)

    work = Path(tempfile.mkdtemp(prefix="spiderd-bench-hostile-"))
    site_port, api_port, worker_port = free_port(), free_port(), free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    server = subprocess.Popen([sys.executable, "-m", "spiderd.demo.site", "--port", str(site_port), "--lists", "40",
                               "--details", "4000", "--no-faults"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    wait_port(site_port)
    site = f"http://127.0.0.1:{site_port}/"
    node_log = open(work / "node.log", "w")
    node = subprocess.Popen([sys.executable, "-c", TWISTD, "-n", "--pidfile=", "spiderd", "--config",
                             str(config(work, site, api_port, worker_port))], cwd=work, env=env, stdout=node_log,
                            stderr=subprocess.STDOUT)
    results: list[tuple[str, float, bool, float]] = []
    try:
        wait_port(api_port)
        wait_port(worker_port)
        api, worker = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{worker_port}"
        probe = Probe(api + "/api/status")
        probe.start()
        time.sleep(2.0)  # the crawl under way before the first attack
        probe.window()
        for name, attack, expected in attacks(api, worker, work, site):
            code, text = attack()
            time.sleep(1.0)  # what the attack set going (batches, jobs) runs on a while
            window = probe.window() or [float("nan")]
            ok = as_expected(code, text, expected)
            p99 = sorted(window)[max(0, int(len(window) * 0.99) - 1)]
            lag = reactor_lag(api)
            results.append((name, p99, ok, lag["p99_ms"]))
            print(f"{name:<20} answer {code} {'ok' if ok else 'WRONG'} ({text[:70]!r})  status: n={len(window)} "
                  f"p50={statistics.median(window):.1f} ms p99={p99:.1f} ms max={max(window):.1f} ms; reactor lag "
                  f"(last 10 s): p99={lag['p99_ms']:.1f} ms max={lag['max_ms']:.1f} ms", flush=True)
        probe.stop.set()
        code, body = call("GET", api + "/api/status", timeout=10)
        print(f"afterwards: /api/status {code}, {probe.failures} failed probes", flush=True)
    finally:
        node.send_signal(signal.SIGTERM)
        try:
            node.wait(timeout=120)
        except subprocess.TimeoutExpired:
            node.kill()
            print("the node did not stop within 120 s of SIGTERM")
        server.terminate()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)
    worst = max(p99 for _, p99, _, _ in results)
    worst_lag = max(lag for _, _, _, lag in results)
    fields = " ".join(f"{name}_p99_ms={p99:.0f}" for name, p99, _, _ in results)
    lags = " ".join(f"{name}_lag_p99_ms={lag:.0f}" for name, _, _, lag in results)
    print(f"RESULT {fields} {lags} worst_p99_ms={worst:.0f} worst_lag_p99_ms={worst_lag:.0f} "
          f"answers_ok={sum(ok for _, _, ok, _ in results)}/{len(results)}")


def reactor_lag(api: str) -> dict[str, float]:
    """The node's own reactor lag over its last 10 s (``/api/status``'s ``reactor.lag``)."""
    _, body = call("GET", api + "/api/status", timeout=10)
    try:
        return json.loads(body)["reactor"]["lag"]
    except (ValueError, KeyError, TypeError):
        return {"p99_ms": float("nan"), "max_ms": float("nan")}


if __name__ == "__main__":
    main()
