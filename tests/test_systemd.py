"""systemd: sd_notify messages to a test socket, the journald log format, the unit files."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.task import Clock
from twisted.logger import LogLevel
from twisted.python.failure import Failure

from spiderd.ops.logs import journal_line
from spiderd.ops.systemd import SystemdNotifier, notify

ROOT = Path(__file__).resolve().parent.parent


def listening(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("\0" + path[1:] if path.startswith("@") else path)
    s.setblocking(False)
    return s


def received(s: socket.socket) -> list[str]:
    messages = []
    while True:
        try:
            messages.append(s.recv(4096).decode())
        except BlockingIOError:
            return messages


def test_ready_watchdog_stopping(tmp_path: Path) -> None:
    """READY=1 at start, WATCHDOG=1 every half WATCHDOG_USEC of the (injected) clock, STOPPING=1 at stop."""
    path = str(tmp_path / "notify")
    sock = listening(path)
    clock = Clock()
    notifier = SystemdNotifier(clock, {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "10000000"}, status=lambda: "12 pages")
    notifier.startService()
    first = received(sock)
    assert first[0] == "READY=1\nSTATUS=12 pages" and first[1].startswith("WATCHDOG=1")
    clock.advance(5)
    assert received(sock) == ["WATCHDOG=1\nSTATUS=12 pages"]
    clock.advance(4)
    assert received(sock) == []
    notifier.stopService()
    assert received(sock) == ["STOPPING=1"]
    clock.advance(10)
    assert received(sock) == []


def test_watchdog_not_fed_while_failing(tmp_path: Path) -> None:
    """While the node is unhealthy (its fetch loop failing) no WATCHDOG=1 goes out, so systemd restarts it."""
    path = str(tmp_path / "notify")
    sock = listening(path)
    clock = Clock()
    health = {"ok": True}
    notifier = SystemdNotifier(clock, {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "10000000"},
                               healthy=lambda: health["ok"])
    notifier.startService()
    received(sock)
    health["ok"] = False
    clock.advance(5)
    assert received(sock) == []
    health["ok"] = True
    clock.advance(5)
    assert received(sock) == ["WATCHDOG=1"]
    notifier.stopService()


def test_abstract_socket_and_absent_socket() -> None:
    """An abstract socket name (@...) works; without NOTIFY_SOCKET nothing is sent."""
    name = f"@spiderd-test-{os.getpid()}"
    sock = listening(name)
    assert notify("READY=1", name) is True
    assert received(sock) == ["READY=1"]
    assert notify("READY=1", "") is False
    clock = Clock()
    absent = SystemdNotifier(clock, {"WATCHDOG_USEC": "1000000"})
    absent.startService()  # no NOTIFY_SOCKET: a quiet no-op, no watchdog timer even with WATCHDOG_USEC
    assert absent.running and not clock.getDelayedCalls() and not absent._loop.running


def test_journal_lines_have_priority_and_no_timestamp() -> None:
    """Each line of an event gets the syslog priority prefix and no timestamp (journald adds its own)."""
    info = {"log_format": "Crawled {n} pages", "n": 5, "log_level": LogLevel.info, "log_namespace": "spiderd.x",
            "log_time": 1.0}
    assert journal_line(info) == "<6>[spiderd.x] Crawled 5 pages\n"
    try:
        1 / 0
    except ZeroDivisionError:
        failure = Failure()
    err = {"log_format": "boom", "log_level": LogLevel.critical, "log_namespace": "n", "log_failure": failure}
    lines = journal_line(err).splitlines()
    assert lines[0] == "<2>[n] boom" and all(line.startswith("<2>[n] ") for line in lines)
    assert "ZeroDivisionError" in lines[-1]


def test_log_level_filter() -> None:
    """Both --logger observers drop debug events unless SPIDERD_LOG_LEVEL asks for them; a bad level is info."""
    import io
    import json as json_module

    from spiderd.ops import logs

    def written(factory: Any, environ: dict[str, str]) -> str:
        stream = io.StringIO()
        observer = factory(stream, environ)
        for lvl in (LogLevel.debug, LogLevel.info):
            observer({"log_format": f"{lvl.name} line", "log_level": lvl, "log_namespace": "n", "log_time": 1.0})
        return stream.getvalue()

    assert written(logs.journal, {}) == "<6>[n] info line\n"
    assert written(logs.journal, {"SPIDERD_LOG_LEVEL": "debug"}) == "<7>[n] debug line\n<6>[n] info line\n"
    assert written(logs.journal, {"SPIDERD_LOG_LEVEL": "chatty"}) == "<6>[n] info line\n"
    events = [json_module.loads(line.strip("\x1e")) for line in written(logs.json, {}).split("\n") if line]
    assert [e["log_format"] for e in events] == ["info line"]


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed")
@pytest.mark.parametrize("unit, name", [("spiderd.service", "spiderd.service"), ("spiderd@.service", "spiderd@worker.service")])
def test_units_verify(tmp_path: Path, unit: str, name: str) -> None:
    """systemd-analyze verify passes on the units (with ExecStart pointed at this environment's twistd)."""
    twistd = Path(sys.executable).with_name("twistd")
    text = (ROOT / "systemd" / unit).read_text().replace("/opt/spiderd/bin/twistd", str(twistd))
    (tmp_path / unit).write_text(text)
    target = tmp_path / name
    if name != unit:
        target.symlink_to(tmp_path / unit)
    out = subprocess.run(["systemd-analyze", "verify", str(target)], capture_output=True, text=True)
    assert out.returncode == 0 and not out.stderr.strip(), out.stderr


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed")
@pytest.mark.parametrize("unit, name", [("spiderd.service", "spiderd.service"), ("spiderd@.service", "spiderd@worker.service")])
def test_units_are_hardened(tmp_path: Path, unit: str, name: str) -> None:
    """systemd-analyze security rates the units at most 2.0 (OK): no capabilities, UMask 0077, a syscall filter."""
    text = (ROOT / "systemd" / unit).read_text()
    assert "UMask=0077" in text and "CapabilityBoundingSet=\n" in text and "SystemCallFilter=@system-service" in text
    target = tmp_path / name
    target.write_text(text)
    out = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(target)], capture_output=True, text=True)
    rating = [line for line in out.stdout.splitlines() if "Overall exposure level" in line]
    assert rating, out.stdout + out.stderr
    assert float(rating[0].split(":")[1].split()[0]) <= 2.0, rating[0]
