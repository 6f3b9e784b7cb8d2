"""The real daemon: ``twistd -n spiderd`` in a child process (the plugin, the demo, config errors, SIGTERM)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from spiderd.demo.pages import SiteSpec

ROOT = Path(__file__).resolve().parent.parent
TWISTD = "import sys; from twisted.scripts.twistd import run; sys.argv[0] = 'twistd'; run()"
SYSTEMD_LIKE = (  # ARGV: two descriptors, then python's arguments: run python with them as systemd passes sockets
    "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); "
    "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='2', LISTEN_FDNAMES='api:worker'); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[3:]])"
)


def twistd(*args: str, cwd: Path) -> subprocess.Popen[str]:
    """Start ``twistd -n spiderd ARGS`` with this interpreter."""
    command = [sys.executable, "-c", TWISTD, "-n", "--pidfile=", "spiderd", *args]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_plugin_is_listed() -> None:
    """twistd finds the spiderd plugin."""
    out = subprocess.run([sys.executable, "-c", TWISTD, "--help"], capture_output=True, text=True, cwd=ROOT)
    assert "spiderd" in out.stdout


def test_installed_plugin_found_outside_the_source_tree(tmp_path: Path) -> None:
    """After ``pip install``, twistd finds the plugin from any directory, with no PYTHONPATH."""
    import pytest

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([sys.executable, "-c", "import spiderd; print(spiderd.__file__)"], capture_output=True,
                           text=True, cwd=tmp_path, env=env)
    if where.returncode != 0:
        pytest.skip("spiderd is not installed in this interpreter (tests run from the source tree)")
    out = subprocess.run([sys.executable, "-c", TWISTD, "--help"], capture_output=True, text=True, cwd=tmp_path,
                         env=env)
    assert "spiderd" in out.stdout, out.stdout + out.stderr


def test_importing_the_tap_installs_no_reactor() -> None:
    """twistd imports spiderd.tap (for its Options) before it installs the reactor asked for: that import, with
    every module the tap imports, installs none (nor imports txredisapi, which would)."""
    code = ("import sys, spiderd.tap\n"
            "print(sorted(m for m in ('twisted.internet.reactor', 'txredisapi') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_demo_crawls_to_completion(tmp_path: Path) -> None:
    """--demo goes pool -> batch -> worker -> feed file, exits 0 by itself, and says where items and pages are."""
    child = twistd("--demo", "--data-dir", str(tmp_path / "demo"), cwd=tmp_path)
    out, _ = child.communicate(timeout=120)
    assert child.returncode == 0, out
    assert "Summary:" in out and "Demo finished. Items:" in out
    expected = SiteSpec().expected().details_ok
    feeds = list((tmp_path / "demo" / "feeds").glob("*.jl"))
    items = [json.loads(line) for f in feeds for line in f.open()]
    assert len(items) == len(expected) and len({i["url"] for i in items}) == len(expected)
    assert feeds and all(f.name.startswith("1_demo-shop_") for f in feeds)
    assert f"Items: {tmp_path / 'demo' / 'feeds'}/*.jl" in out


def test_demo_refuses_a_foreign_directory(tmp_path: Path) -> None:
    """--demo empties its data directory, so it refuses one it did not make."""
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "keep.txt").write_text("mine")
    child = twistd("--demo", "--data-dir", str(tmp_path / "precious"), cwd=tmp_path)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 2 and "is not a demo directory" in out
    assert (tmp_path / "precious" / "keep.txt").read_text() == "mine"


def test_config_error_is_one_line_and_status_2(tmp_path: Path) -> None:
    """A bad value: one line naming the file and the key, exit status 2, nothing started."""
    config = tmp_path / "bad.toml"
    config.write_text(f'[spiderd]\ndata_dir = "{tmp_path / "data"}"\n[fetch]\ntimeout = "ten"\n')
    child = twistd("--config", str(config), cwd=tmp_path)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 2
    assert f"{config}: fetch.timeout: expected a number, got 'ten'" in out
    assert not (tmp_path / "data").exists()


def test_sigterm_stops_cleanly(tmp_path: Path) -> None:
    """SIGTERM stops an idle daemon through stopService; twistd exits as killed by SIGTERM (143 to systemd)."""
    config = tmp_path / "idle.toml"
    config.write_text(f'[spiderd]\ndata_dir = "{tmp_path / "data"}"\n[parse]\nworkers = 1\n[api]\nport = 0\n')
    child = twistd("--config", str(config), cwd=tmp_path)
    assert child.stdout is not None
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = child.stdout.readline()
        lines.append(line)
        if "Nothing left to crawl" in line or not line:  # logged from the running reactor: signals are handled
            break
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=60)
    assert child.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM), "".join(lines) + out
    assert "Summary:" in out and "Server Shut Down." in out


def test_second_sigterm_during_the_drain(tmp_path: Path) -> None:
    """A second SIGTERM while a fetch drains is one info line, not a CRITICAL ReactorNotRunning traceback."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(server.accept()[0]), daemon=True).start()  # answers nothing
    port = server.getsockname()[1]
    config = tmp_path / "slow.toml"
    config.write_text(f'[spiderd]\ndata_dir = "{tmp_path / "data"}"\n[pool]\nseeds = ["http://127.0.0.1:{port}/"]\n'
                      '[fetch]\nrobots = false\ntimeout = 10\n[parse]\nworkers = 0\n[api]\nport = 0\n')
    child = twistd("--config", str(config), cwd=tmp_path)
    assert child.stdout is not None
    deadline = time.monotonic() + 60
    while not held and time.monotonic() < deadline:
        time.sleep(0.05)  # waiting for the daemon's fetch to reach the silent server (another process)
    child.send_signal(signal.SIGTERM)
    line = ""
    while "Stopping: waiting for 1 fetches" not in line and time.monotonic() < deadline:
        line = child.stdout.readline()
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=60)
    server.close()
    assert child.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM), out
    assert "SIGTERM again: already stopping" in out, out
    assert "ReactorNotRunning" not in out and "critical" not in out, out


def test_port_in_use_is_a_clear_fatal_error(tmp_path: Path) -> None:
    """A port already taken at start: one critical line naming the service, exit status 1, no half-started daemon."""
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    config = tmp_path / "busy.toml"
    config.write_text(f'[spiderd]\ndata_dir = "{tmp_path / "data"}"\n[api]\nport = {port}\n[parse]\nworkers = 0\n')
    child = twistd("--config", str(config), cwd=tmp_path)
    out, _ = child.communicate(timeout=60)
    taken.close()
    assert child.returncode == 1, out
    assert "spiderd cannot start: api" in out and "Address already in use" in out
    assert "Traceback" not in out, out  # one clear line, no traceback before it


def test_both_apis_on_sockets_systemd_passes(tmp_path: Path) -> None:
    """Sockets passed as systemd passes them (LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES) serve the node's API (a TCP
    socket, by name) and the worker's Scrapyd API (a UNIX socket, by index)."""
    import fcntl
    import socket
    import urllib.request

    api = socket.socket()
    api.bind(("127.0.0.1", 0))
    api.listen(16)
    path = str(tmp_path / "worker.sock")
    worker = socket.socket(socket.AF_UNIX)
    worker.bind(path)
    worker.listen(16)
    fds = [fcntl.fcntl(s.fileno(), fcntl.F_DUPFD, 10) for s in (api, worker)]  # above the 3 and 4 they become
    config = tmp_path / "systemd.toml"
    config.write_text(f'[spiderd]\nrole = "worker"\ndata_dir = "{tmp_path / "data"}"\n[parse]\nworkers = 0\n'
                      '[api]\nlisten = "systemd:domain=INET:name=api"\ntoken = "t0k"\n'
                      '[worker]\nlisten = "systemd:domain=UNIX:index=1"\n')
    command = [sys.executable, "-c", SYSTEMD_LIKE, *map(str, fds), "-c", TWISTD, "-n", "--pidfile=", "spiderd",
               "--config", str(config)]
    child = subprocess.Popen(command, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)), pass_fds=fds,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for fd in fds:
        os.close(fd)
    api.close()
    worker.close()  # the child holds them now
    assert child.stdout is not None
    lines: list[str] = []
    try:
        while not all(any(text in line for line in lines) for text in ("Worker API (Scrapyd-compatible) on",
                                                                         " API on http")):
            lines.append(child.stdout.readline())
            assert lines[-1], "".join(lines)  # the daemon exited
        assert any(f"Worker API (Scrapyd-compatible) on unix:{path}:" in line for line in lines), "".join(lines)
        url = next(line for line in lines if " API on http" in line).split("API on ")[1].split()[0]
        request = urllib.request.Request(url + "api/status", headers={"Authorization": "Bearer t0k"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert json.load(answer)["role"] == "worker"
        client = socket.socket(socket.AF_UNIX)
        client.settimeout(30)
        client.connect(path)
        client.sendall(b"GET /daemonstatus.json HTTP/1.0\r\nHost: localhost\r\n\r\n")
        answer = b"".join(iter(lambda: client.recv(65536), b""))
        client.close()
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["status"] == "ok", answer
    finally:
        child.send_signal(signal.SIGTERM)
        out, _ = child.communicate(timeout=60)
    assert "Server Shut Down." in out, "".join(lines) + out


def test_bad_store_port_is_one_line(tmp_path: Path) -> None:
    """A store URL with a port out of range is one configuration error line and exit status 2."""
    config = tmp_path / "bad.toml"
    config.write_text(f'[spiderd]\ndata_dir = "{tmp_path / "data"}"\n[store]\nurl = "mysql://u:pw@127.0.0.1:99999/db"\n')
    child = twistd("--config", str(config), cwd=tmp_path)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 2, out
    assert "store.url: the port of 'mysql://u:***@127.0.0.1:99999/db' must be a number" in out, out
    assert "Traceback" not in out and "pw@" not in out, out


def test_sighup_reopens_the_logfile(tmp_path: Path) -> None:
    """With ``--logfile``, a SIGHUP after logrotate moved the file makes the daemon write a new one at its path."""
    log = tmp_path / "spiderd.log"
    config = tmp_path / "idle.toml"
    config.write_text(f'[spiderd]\ndata_dir = "{tmp_path / "data"}"\n[parse]\nworkers = 0\n[api]\nport = 0\n')
    command = [sys.executable, "-c", TWISTD, "-n", "--pidfile=", f"--logfile={log}", "spiderd", "--config", str(config)]
    child = subprocess.Popen(command, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert _wait_for_line(log, "Nothing left to crawl", child)  # logged from the running reactor
        log.rename(tmp_path / "spiderd.log.1")
        child.send_signal(signal.SIGHUP)
        assert _wait_for_line(log, "1 log files reopened", child), (tmp_path / "spiderd.log.1").read_text()
    finally:
        child.send_signal(signal.SIGTERM)
        child.communicate(timeout=60)
    assert "Server Shut Down." in log.read_text()


def _wait_for_line(path: Path, text: str, child: subprocess.Popen[str], timeout: float = 60.0) -> bool:
    """True once ``path`` holds ``text``; False if ``child`` exits or ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and child.poll() is None:
        if path.exists() and text in path.read_text():
            return True
        time.sleep(0.05)  # waiting for another process to write its log file
    return False


def test_command_line_overrides() -> None:
    """--role, --data-dir and --exit-when-done become [spiderd] overrides (a flag as true); absent ones are none."""
    from spiderd.tap import Options

    options = Options()
    options.parseOptions(["--config", "x.toml", "--role", "worker", "--data-dir", "/d", "--exit-when-done"])
    assert options.overrides() == {"spiderd.role": "worker", "spiderd.data_dir": "/d", "spiderd.exit_when_done": True}
    assert options.overrides()["spiderd.exit_when_done"] is True  # a bool: [spiderd] exit_when_done refuses 1
    options = Options()
    options.parseOptions(["--config", "x.toml"])
    assert options.overrides() == {}
