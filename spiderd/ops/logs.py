"""Log observers for ``twistd --logger``: journald-friendly text and JSON lines.

``twistd -n --logger=spiderd.ops.logs.journal spiderd ...`` writes one line per
event to stdout with the syslog priority as an ``<N>`` prefix (journald reads
it) and no timestamp (journald adds its own).  ``--logger=spiderd.ops.logs.json``
writes twisted.logger's JSON, one event per line.  Both keep events of level
info and above; ``SPIDERD_LOG_LEVEL=debug`` (or warn, error) in the environment
changes that (per-request API lines and per-batch lines are debug).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping, TextIO

from twisted.logger import (
    FileLogObserver,
    FilteringLogObserver,
    ILogObserver,
    InvalidLogLevelError,
    LogLevel,
    LogLevelFilterPredicate,
    formatEvent,
    jsonFileLogObserver,
)

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


def level(environ: Mapping[str, str] | None = None) -> LogLevel:
    """The lowest level written: ``SPIDERD_LOG_LEVEL`` (debug, info, warn, error, critical), info by default."""
    name = (environ if environ is not None else os.environ).get("SPIDERD_LOG_LEVEL", "info").strip().lower()
    try:
        found: LogLevel = LogLevel.levelWithName(name)  # (constantly is untyped)
    except InvalidLogLevelError:
        sys.stderr.write(f"SPIDERD_LOG_LEVEL={name!r} is not a log level (debug, info, warn, error): using info\n")
        found = LogLevel.info
    return found


def _filtered(observer: ILogObserver, environ: Mapping[str, str] | None = None) -> ILogObserver:
    return FilteringLogObserver(observer, [LogLevelFilterPredicate(defaultLogLevel=level(environ))])


def journal(stream: TextIO | None = None, environ: Mapping[str, str] | None = None) -> ILogObserver:
    """The journald observer (the factory ``--logger`` names)."""
    return _filtered(FileLogObserver(stream or sys.stdout, journal_line), environ)


def json(stream: TextIO | None = None, environ: Mapping[str, str] | None = None) -> ILogObserver:
    """twisted.logger's JSON observer on stdout."""
    return _filtered(jsonFileLogObserver(stream or sys.stdout), environ)
