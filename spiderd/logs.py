"""Log observers for ``twistd --logger``: journald-friendly text and JSON lines.

``twistd -n --logger=spiderd.logs.journal spiderd ...`` writes one line per
event to stdout with the syslog priority as an ``<N>`` prefix (journald reads
it) and no timestamp (journald adds its own).  ``--logger=spiderd.logs.json``
writes twisted.logger's JSON, one event per line.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from twisted.logger import FileLogObserver, LogLevel, formatEvent, jsonFileLogObserver

_PRIORITY = {
    LogLevel.debug: 7,
    LogLevel.info: 6,
    LogLevel.warn: 4,
    LogLevel.error: 3,
    LogLevel.critical: 2,
}


def journal_line(event: dict[str, Any]) -> str | None:
    """``<priority>[namespace] message`` (and a traceback, indented) for one event."""
    text = formatEvent(event)
    failure = event.get("log_failure")
    if failure is not None:
        text += "\n" + failure.getTraceback()
    if not text:
        return None
    priority = _PRIORITY.get(event.get("log_level", LogLevel.info), 6)
    namespace = event.get("log_namespace", "-")
    lines = text.rstrip("\n").split("\n")
    return "".join(f"<{priority}>[{namespace}] {line}\n" for line in lines)


def journal(stream: TextIO | None = None) -> FileLogObserver:
    """The journald observer (the factory ``--logger`` names)."""
    return FileLogObserver(stream or sys.stdout, journal_line)


def json(stream: TextIO | None = None) -> Any:
    """twisted.logger's JSON observer on stdout."""
    return jsonFileLogObserver(stream or sys.stdout)
