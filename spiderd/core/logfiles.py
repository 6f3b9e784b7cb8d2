"""The log files twisted.logger writes to, reopened after logrotate moved them: a shim over Twisted's internals.

twistd's ``--logfile`` becomes ``textFileLogObserver(LogFile)`` added to ``globalLogPublisher``, and Twisted
offers no public way back from the publisher to that file (twistd's own SIGUSR1 *rotates* it, which is not what
logrotate wants).  So this reads two private attributes: ``LogPublisher._observers`` and
``FileLogObserver._outFile``.  Should Twisted rename either, a reload logs an error instead of silently
reopening nothing, and ``tests/test_logfiles.py`` (the observer built as twistd builds it) and
``tests/test_twistd.py`` (a real ``twistd --logfile`` and a SIGHUP) fail.
"""

from __future__ import annotations

from twisted.logger import FileLogObserver, Logger, LogPublisher, globalLogPublisher
from twisted.python.logfile import BaseLogFile

log = Logger()


def reopen_log_files(publisher: LogPublisher = globalLogPublisher) -> int:
    """Reopen every log file (a Twisted ``LogFile``) an observer of ``publisher`` writes to; the number reopened."""
    observers = getattr(publisher, "_observers", None)
    if not isinstance(observers, list):
        log.error("Cannot reach the log observers (this Twisted's LogPublisher has no _observers list): "
                  "no log file reopened")
        return 0
    count = 0
    for observer in list(observers):
        if not isinstance(observer, FileLogObserver):
            continue
        if not hasattr(observer, "_outFile"):
            log.error("Cannot reach the file of a log observer (this Twisted's FileLogObserver has no _outFile)")
            continue
        if isinstance(observer._outFile, BaseLogFile):
            observer._outFile.reopen()
            count += 1
    return count
