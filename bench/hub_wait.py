"""Issue 34 item 1: what a due hub that waits for its host costs a node.

    python bench/hub_wait.py                       # this tree's spiderd, 20 s
    python bench/hub_wait.py --tree /tmp/old-tree  # another tree's spiderd (git archive REV spiderd twisted)

One hub (a page with no links, served by Python's http.server on 127.0.0.1), ``hub_refresh_span = 1``,
``per_host_delay = 5``, ``concurrency = 4``, nothing else to crawl: the hub is due every second but its host may be
asked only every 5 s.  The node (``twistd -n spiderd``) runs for ``--seconds`` after a short warm-up; its CPU time
over that span (utime + stime of /proc/PID/stat, from when its log says the hubs are set, plus ``--warmup``) and
the hub's requests are counted.  Before the fix the node popped
again at once while the hub waited (issue 34 measured about 80% of a core); after it, it pops when the host may go.

Prints the figures and one ``RESULT`` line.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TWISTD = "import sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()"
CONFIG = """\
[spiderd]
data_dir = "{data}"
log_interval = 3600

[pool]
hubs = ["http://127.0.0.1:{port}/hub.html"]
hub_refresh_span = 1

[fetch]
concurrency = 4
per_host_delay = 5
robots = false

[batch]
targets = []

[api]
listen = "tcp:0:interface=127.0.0.1"

[[sites]]
name = "hub"
allowed_hosts = ["127.0.0.1"]
detail_urls = ['/item/']
"""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def started(node: subprocess.Popen[bytes], log: Path, timeout: float = 180.0) -> bool:
    """Whether the node got as far as setting its hubs (imports on a loaded machine take seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and node.poll() is None:
        if log.exists() and "hubs every" in log.read_text():
            return True
        time.sleep(0.2)
    return False


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--tree", default=str(ROOT), help="the tree whose spiderd runs (its spiderd/ and twisted/)")
    args = parser.parse_args()
    if not Path(args.tree, "spiderd", "tap.py").exists():
        print(f"{args.tree} has no spiderd/tap.py", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="spiderd-hubwait-"))
    (work / "site").mkdir()
    (work / "site" / "hub.html").write_text("<html><body><h1>hub</h1></body></html>")
    port = free_port()
    site_log = open(work / "site.log", "w")
    site = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                            cwd=work / "site", stdout=site_log, stderr=subprocess.STDOUT)
    (work / "node.toml").write_text(CONFIG.format(data=work / "data", port=port))
    env = {**os.environ, "PYTHONPATH": args.tree}
    node = subprocess.Popen([sys.executable, "-c", TWISTD, "-n", "--pidfile=", "--logfile", str(work / "node.log"),
                             "spiderd", "--config", str(work / "node.toml")], env=env, cwd=work)
    try:
        if not started(node, work / "node.log"):
            print((work / "node.log").read_text()[-3000:], file=sys.stderr)
            return 1
        time.sleep(args.warmup)  # (the parse workers start, the hub's first fetch)
        start_cpu, start = cpu_seconds(node.pid), time.monotonic()
        time.sleep(args.seconds)
        used, spent = cpu_seconds(node.pid) - start_cpu, time.monotonic() - start
    finally:
        node.terminate()
        node.wait(30)
        site.terminate()
        site.wait(30)
        site_log.close()
    fetches = (work / "site.log").read_text().count("GET /hub.html")
    load = os.getloadavg()[0]
    print(f"tree {args.tree}: {used:.2f} CPU seconds in {spent:.1f} s; the hub fetched {fetches} times; "
          f"load average {load:.2f}")
    print(f"RESULT cpu_percent={100 * used / spent:.1f} hub_fetches={fetches} seconds={spent:.0f} load={load:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
