"""spiderd.core.logfiles: the file twistd's ``--logfile`` writes to, reopened after logrotate moved it (a shim over
Twisted's internals: these tests fail if Twisted moves them)."""

from __future__ import annotations

import io
import os
from pathlib import Path

from twisted.logger import Logger, LogPublisher, textFileLogObserver
from twisted.python.logfile import LogFile

from spiderd.core.logfiles import reopen_log_files


def test_reopens_the_file_twistd_writes_to(tmp_path: Path) -> None:
    """After the log file was moved away, a reopen sends the next lines to a new file at its path."""
    path = tmp_path / "spiderd.log"
    publisher = LogPublisher()
    publisher.addObserver(textFileLogObserver(LogFile.fromFullPath(str(path))))  # as twistd's --logfile builds it
    log = Logger(observer=publisher)
    log.info("before the move")
    os.rename(path, tmp_path / "spiderd.log.1")
    assert reopen_log_files(publisher) == 1
    log.info("after the reopen")
    moved, fresh = (tmp_path / "spiderd.log.1").read_text(), path.read_text()
    assert "before the move" in moved and "after the reopen" not in moved
    assert "after the reopen" in fresh and "before the move" not in fresh


def test_observers_without_a_log_file_are_left_alone() -> None:
    """A stream observer and a plain callable are no log file: nothing is reopened."""
    publisher = LogPublisher(textFileLogObserver(io.StringIO()), lambda event: None)
    assert reopen_log_files(publisher) == 0
