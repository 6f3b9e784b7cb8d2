"""Shipping finished JSON-lines feed files to the analytics host (FTP, or a local directory).

Feed URIs are Scrapy FEED_URI templates (``ftp://anonymous@spark/%(batch)s_%(name)s_%(time)s.jl``)
rendered by :func:`render_uri`: a parameter names a file, never a directory.  Paths are taken
literally (no percent-decoding; only the password is URL-decoded) and, as in Scrapy, from the FTP
root the server shows the user.

Uploads go to ``.<name>.part`` in the target directory (hidden, and not ``*.jl``, so neither a Spark
glob nor Hadoop's input listing sees it), then are renamed to the final name.  An existing final
name is never overwritten: the file is quarantined with a clear error (batch numbers are unique,
so a clash is a bug or a misconfigured template).

The spool (``spool_dir``)::

    incoming/          callers may write here, so that ship()'s move is a rename
    queue/<id>.json    sidecar: target URI, original name, attempts, first seen, rename_sent
    queue/<id>.jl      the file
    bad/<id>.*         refused files (bad JSON lines, or final name taken), with a ``.reason``

``ship()`` writes the sidecar first (temp file, fsync, rename), then moves the file in, and removes
the file before the sidecar once uploaded.  So at start: sidecar and file -> resume; a sidecar
alone -> the move never happened (ship never fired, the caller still has its file) or the upload
had finished -> removed; a file alone cannot come from this code -> quarantined, never deleted;
``*.tmp`` -> half-written, removed.  The sidecar holds the FTP password, so the spool is 0700.
"""

from __future__ import annotations

import errno
import filecmp
import ftplib
import json
import os
import posixpath
import re
import shutil
import socket
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, BinaryIO, Callable, Iterator, Mapping
from urllib.parse import unquote, urlsplit

from twisted.application.service import Service
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core.blocking import Lane
from spiderd.core.retry import Backoff
from spiderd.core.secrets import redact
from spiderd.core.lifecycle import InFlight
from spiderd.core.fsutil import fsync_dir, fsync_file, unlink_quietly, write_atomically

log = Logger()

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NOT_IN_PARAM = ("/", "\\", "?", "#")
_DIRECTIVE = re.compile(r"%(%|\((?P<key>[A-Za-z_][A-Za-z0-9_]*)\)s)?")  # %% or %(key)s; anything else is refused
NAME_MAX = 255  # bytes in one file name (Linux and most file systems; FTP servers take no more either)
PATH_MAX = 4096


class FeedError(Exception):
    """A feed file could not be shipped."""


class BadFeedError(FeedError, ValueError):
    """The file is not JSON lines Spark reads without a corrupt record."""


class FeedExistsError(FeedError):
    """The final name already exists at the target; it is never overwritten."""


# -- URI templates --------------------------------------------------------------------


def uri_time(seconds: float) -> str:
    """``%(time)s`` as Scrapy (2.6 and later) renders it: UTC ISO time to the second, with its offset, and
    ``:`` replaced by ``-`` (``2023-11-14T22-13-20+00-00``)."""
    utc = datetime.fromtimestamp(seconds, timezone.utc).replace(microsecond=0)
    return utc.isoformat().replace(":", "-")


def check_param(key: str, value: Any) -> str:
    """``value`` as text, if it can only name a file inside the template's directory."""
    text = str(value)
    bad = [c for c in _NOT_IN_PARAM if c in text] or _CONTROL.findall(text)
    if text in ("", ".", "..") or bad:
        raise ValueError(f"feed URI parameter {key}={text!r} could leave its directory: no /, \\, ?, #, "
                         "control characters, '.', '..' or empty values")
    return text


class _Checked(Mapping[str, Any]):
    """The parameters a template uses, each checked as it is used."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        self._params = params

    def __getitem__(self, key: str) -> Any:
        value = self._params[key]
        check_param(key, value)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._params)

    def __len__(self) -> int:
        return len(self._params)


def render_uri(template: str, params: Mapping[str, Any]) -> str:
    """``template`` with ``%(key)s`` filled from ``params`` (batch, name, time, spider arguments).

    As in Scrapy, a literal ``%`` (a percent-encoded password) is written ``%%``.  Only ``%(key)s`` is a
    parameter: no width, precision or other conversion (``%(batch)200000000s`` would render a name of
    200 MB), and a rendered file name longer than a file system takes is refused.
    """
    for match in _DIRECTIVE.finditer(template):
        if match.group(1) is None:
            raise ValueError(f"feed URI {redact(template)[:200]!r}: only %(key)s parameters (no width, precision "
                             "or other conversion) and %% for a literal % are allowed")
    try:
        uri = template % _Checked(params)
    except KeyError as e:
        raise ValueError(f"feed URI {redact(template)[:200]!r} needs the parameter {e.args[0]!r}") from None
    except TypeError as e:
        raise ValueError(f"feed URI {redact(template)[:200]!r} is not a %(name)s template: {e}") from None
    target = parse_target(uri)
    _check_lengths(target, template)
    return uri


def _check_lengths(target: Target, template: str) -> None:
    """Refuse names no file system takes (a failing upload would be retried, and logged, forever)."""
    path = posixpath.join(target.directory, target.name)
    too_long = [part for part in path.split("/") if len(part.encode("utf-8")) > NAME_MAX]
    if too_long or len(path.encode("utf-8")) > PATH_MAX:
        raise ValueError(f"feed URI {redact(template)[:200]!r} renders a name longer than a file system takes "
                         f"({NAME_MAX} bytes a name, {PATH_MAX} a path)")


# -- targets ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """Where a feed file goes: a directory and a final name, on an FTP host or the local disk."""

    scheme: str
    directory: str
    name: str
    host: str = ""
    port: int = 21
    user: str = ""
    password: str = field(default="", repr=False)
    tag: str = ""  # one upload's own mark in its temp name (two files bound for one name never share it)

    @property
    def temp_name(self) -> str:
        """The upload name: hidden, not matching ``*.jl``, and the upload's own when it has a tag."""
        return f".{self.name}.{self.tag}.part" if self.tag else f".{self.name}.part"

    def __str__(self) -> str:
        path = posixpath.join(self.directory, self.name)
        if self.scheme == "file":
            return f"file://{path}"
        user = f"{self.user}@" if self.user else ""
        return f"ftp://{user}{self.host}:{self.port}{path}"


def parse_target(uri: str) -> Target:
    """``ftp://[user[:pass]@]host[:port]/dir/name`` or ``file:///dir/name``; ValueError otherwise."""
    shown = redact(uri)
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError as e:
        raise ValueError(f"bad feed URI {shown!r}: {e}") from None
    if parts.scheme not in ("ftp", "file") or parts.query or parts.fragment:
        raise ValueError(f"feed URI {shown!r}: expected ftp://USER:PASS@HOST/DIR/NAME or file:///DIR/NAME")
    directory, name = _split_path(parts.path, shown)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"feed URI {shown!r}: a file:// URI names a local path (file:///DIR/NAME)")
        return Target("file", directory, name)
    if not parts.hostname:
        raise ValueError(f"feed URI {shown!r} has no host")
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    return Target("ftp", directory, name, parts.hostname, port or 21, user, password)


def _split_path(path: str, shown: str) -> tuple[str, str]:
    segments = path.split("/")
    if (not path.startswith("/") or "\\" in path or _CONTROL.search(path)
            or any(s in ("", ".", "..") for s in segments[1:])):
        raise ValueError(f"feed URI {shown!r}: the path must be absolute, end in a file name, "
                         "and have no '.', '..', empty segments, backslashes or control characters")
    return posixpath.dirname(path), segments[-1]


# -- JSON lines check -------------------------------------------------------------------------


def validate_jsonl(path: str) -> int:
    """The number of records of a JSON-lines file Spark reads with no corrupt record.

    Raises BadFeedError on the first bad line: invalid UTF-8, blank, not a JSON object, NaN or
    Infinity, a bare carriage return (Hadoop splits lines there), or no final newline.
    """
    count = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            _check_line(raw, number)
            count += 1
    return count


def _check_line(raw: bytes, number: int) -> None:
    if not raw.endswith(b"\n"):
        raise BadFeedError(f"line {number}: no final newline (a torn last line?)")
    body = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadFeedError(f"line {number}: invalid UTF-8 at byte {e.start}") from None
    if not text.strip():
        raise BadFeedError(f"line {number}: blank line")
    if "\r" in text:
        raise BadFeedError(f"line {number}: carriage return inside the line")
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as e:
        raise BadFeedError(f"line {number}: not JSON: {e}") from None
    if not isinstance(value, dict):
        raise BadFeedError(f"line {number}: a JSON {type(value).__name__}, not an object")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# -- blocking uploads (run in a thread) -------------------------------------------------------


class Abort:
    """Breaks a blocking transfer from another thread: flags it and shuts its sockets down."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.is_set = False

    def register(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.is_set:
                _shutdown(sock)

    def set(self) -> None:
        with self._lock:
            self.is_set = True
            for sock in self._sockets:
                _shutdown(sock)

    def check(self) -> None:
        if self.is_set:
            raise FeedError("upload aborted")


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _FTP(ftplib.FTP):
    """ftplib.FTP whose control and data sockets an Abort can shut down."""

    def __init__(self, abort: Abort, timeout: float) -> None:
        super().__init__(timeout=timeout)
        self._abort = abort

    def connect(self, *args: Any, **kwargs: Any) -> str:
        welcome = super().connect(*args, **kwargs)
        self._abort.register(self.sock)
        return welcome

    def ntransfercmd(self, cmd: str, rest: Any = None) -> tuple[socket.socket, int | None]:
        conn, size = super().ntransfercmd(cmd, rest)
        self._abort.register(conn)
        return conn, size


class _Reader:
    """A file whose reads stop once the upload is aborted."""

    def __init__(self, f: BinaryIO, abort: Abort) -> None:
        self._f, self._abort = f, abort

    def read(self, size: int = -1) -> bytes:
        self._abort.check()
        return self._f.read(size)


def upload(local_path: str, target: Target, *, timeout: float = 60.0, abort: Abort | None = None,
           renamed_before: bool = False, before_rename: Callable[[], None] = lambda: None) -> None:
    """Blocking: put ``local_path`` at ``target`` under its temp name, then rename it to the final name.

    ``renamed_before`` says an earlier attempt sent the rename (``before_rename`` runs just before
    it does), so a final file equal to ours is our own upload, not a clash.
    """
    abort = abort or Abort()
    if target.scheme == "file":
        _upload_file(local_path, target, renamed_before, before_rename)
    else:
        _upload_ftp(local_path, target, timeout, abort, renamed_before, before_rename)


def _upload_file(local: str, target: Target, renamed_before: bool, before_rename: Callable[[], None]) -> None:
    os.makedirs(target.directory, exist_ok=True)
    final = os.path.join(target.directory, target.name)
    temp = os.path.join(target.directory, target.temp_name)
    if os.path.exists(final):
        if renamed_before and filecmp.cmp(local, final, shallow=False):
            unlink_quietly(temp)
            return
        raise FeedExistsError(f"{target} already exists; not overwritten")
    _copy_no_follow(local, temp)
    before_rename()
    _link_no_overwrite(temp, final, target)
    fsync_dir(target.directory)


def _copy_no_follow(local: str, temp: str) -> None:
    """Copy ``local`` to a new ``temp`` and fsync it; a symbolic link (or anything) already at ``temp`` is
    removed first, never written through."""
    unlink_quietly(temp)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with open(fd, "wb") as out, open(local, "rb") as source:
        shutil.copyfileobj(source, out, 1024 * 1024)
        out.flush()
        os.fsync(out.fileno())


def _link_no_overwrite(temp: str, final: str, target: Target) -> None:
    """Rename ``temp`` to ``final`` unless ``final`` exists (atomically where hard links work)."""
    try:
        os.link(temp, final)
    except FileExistsError:
        unlink_quietly(temp)
        raise FeedExistsError(f"{target} already exists; not overwritten") from None
    except OSError:
        if os.path.exists(final):
            raise FeedExistsError(f"{target} already exists; not overwritten") from None
        os.replace(temp, final)
        return
    os.unlink(temp)


def _upload_ftp(local: str, target: Target, timeout: float, abort: Abort,
                renamed_before: bool, before_rename: Callable[[], None]) -> None:
    size = os.path.getsize(local)
    ftp = _FTP(abort, timeout)
    try:
        ftp.connect(target.host, target.port)
        ftp.login(target.user, target.password)  # anonymous when there is no user
        ftp.set_pasv(True)
        ftp.voidcmd("TYPE I")
        _ftp_makedirs_cwd(ftp, target.directory)
        if _ftp_already_there(ftp, target, size, renamed_before):
            return
        with open(local, "rb") as f:
            ftp.storbinary("STOR " + target.temp_name, _Reader(f, abort))  # type: ignore[arg-type]
        stored = _ftp_size(ftp, target.temp_name)
        if stored not in (size, -1):
            raise FeedError(f"{target}: the server holds {stored} bytes of {size}")
        if _ftp_size(ftp, target.name) is not None:
            raise FeedExistsError(f"{target} appeared during the upload; not overwritten")
        before_rename()
        ftp.rename(target.temp_name, target.name)
        _quietly(ftp.quit)
    finally:
        ftp.close()


def _ftp_already_there(ftp: ftplib.FTP, target: Target, size: int, renamed_before: bool) -> bool:
    """True if an earlier attempt's rename went through; FeedExistsError if another file has the name."""
    found = _ftp_size(ftp, target.name)
    if found is None:
        return False
    if renamed_before and found in (size, -1) and _ftp_size(ftp, target.temp_name) is None:
        return True
    raise FeedExistsError(f"{target} already exists; not overwritten")


def _ftp_size(ftp: ftplib.FTP, name: str) -> int | None:
    """The size of ``name`` in the current directory, -1 if it exists but SIZE is unsupported, None if absent."""
    try:
        found = ftp.size(name)
        return -1 if found is None else found
    except ftplib.error_perm as e:
        code = str(e)[:3]
        if code == "550":
            return None
        if code not in ("500", "501", "502", "504"):
            raise
    return -1 if name in _ftp_names(ftp) else None


def _ftp_names(ftp: ftplib.FTP) -> set[str]:
    try:
        return {posixpath.basename(n) for n in ftp.nlst()}
    except ftplib.error_perm:  # "550 no files" on some servers
        return set()


def _ftp_makedirs_cwd(ftp: ftplib.FTP, directory: str) -> None:
    try:
        ftp.cwd(directory)
        return
    except ftplib.error_perm:
        pass
    parts = directory.strip("/").split("/")
    for i in range(1, len(parts) + 1):
        try:
            ftp.mkd("/" + "/".join(parts[:i]))
        except ftplib.error_perm:
            pass  # exists already (or cwd below says why not)
    ftp.cwd(directory)


def _quietly(call: Callable[[], Any]) -> None:
    try:
        call()
    except (*ftplib.all_errors, AttributeError):
        pass


# -- spool files (run in a thread) ---------------------------------------------------------------


def _write_json(path: str, record: dict[str, Any]) -> None:
    """Atomically: a temp file, fsynced, renamed over ``path``."""
    write_atomically(path, json.dumps(record).encode())


def _move(src: str, dst: str) -> None:
    """Rename, or copy then remove across filesystems."""
    try:
        os.replace(src, dst)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        shutil.copyfile(src, dst + ".tmp")
        fsync_file(dst + ".tmp")
        os.replace(dst + ".tmp", dst)
        os.unlink(src)


# -- the service ----------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Entry:
    """One spooled file."""

    id: str
    target: str
    name: str
    first_seen: float
    attempts: int = 0
    rename_sent: bool = False
    delay: float = 0.0
    warned: bool = False
    busy: bool = False
    timer: Any = None
    abort: Abort | None = None

    def record(self) -> dict[str, Any]:
        return {"target": self.target, "name": self.name, "attempts": self.attempts,
                "first_seen": self.first_seen, "rename_sent": self.rename_sent}


_SKIPPED = object()


class FeedShipper(Service):
    """Spools finished feed files and uploads them in the background, retrying until they go through.

    ``lane`` (default: one of its own, ``concurrency`` + 1 threads wide) runs the spooling and the
    uploads; ``clock`` (default ``reactor``) drives the retry timers and the stop deadline.
    """

    def __init__(self, reactor: Any, spool_dir: str, *, clock: Any = None, retry_first: float = 1.0,
                 retry_max: float = 300.0, stop_timeout: float = 30.0, concurrency: int = 2,
                 ftp_timeout: float = 60.0, lane: Lane | None = None) -> None:
        self._reactor = reactor
        self._clock = reactor if clock is None else clock
        self.spool_dir = spool_dir
        self.incoming_dir = os.path.join(spool_dir, "incoming")
        self.queue_dir = os.path.join(spool_dir, "queue")
        self.bad_dir = os.path.join(spool_dir, "bad")
        self._retry = Backoff(retry_first, retry_max)
        self._stop_timeout = stop_timeout
        self._concurrency = concurrency
        self._ftp_timeout = ftp_timeout
        self._entries: dict[str, _Entry] = {}
        self._inflight = InFlight()
        self._lane = lane or Lane(reactor, "feed", concurrency + 1)
        self._slots = defer.DeferredSemaphore(concurrency)
        self._names: dict[str, defer.DeferredLock] = {}  # target URI -> its uploads, one at a time
        self.shipped = 0
        self.failures = 0
        self.quarantined = 0
        self.last_error: str | None = None

    @property
    def waiting(self) -> int:
        """Files in the spool, not yet shipped."""
        return len(self._entries)

    def status(self) -> dict[str, Any]:
        """Counters for the status API (``last_error`` never shows a password)."""
        return {"shipped": self.shipped, "waiting": self.waiting, "failures": self.failures,
                "quarantined": self.quarantined, "last_error": self.last_error}

    def settled(self) -> Deferred[None]:
        """Fires when no spooling or upload attempt is running (retry timers may be pending)."""
        return self._inflight.wait()

    # -- start ------------------------------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        for path in (self.incoming_dir, self.queue_dir, self.bad_dir):
            os.makedirs(path, mode=0o700, exist_ok=True)
        self._lane.start()
        self._slots = defer.DeferredSemaphore(self._concurrency)
        self._entries = {e.id: e for e in self._recover()}
        if self._entries:
            log.info("Resuming {count} spooled feed files", count=len(self._entries))
        for entry in list(self._entries.values()):
            self._attempt(entry)

    def _recover(self) -> list[_Entry]:
        names = set(os.listdir(self.queue_dir))
        entries = []
        for name in sorted(names):
            stem, ext = os.path.splitext(name)
            if ext == ".tmp":
                os.unlink(os.path.join(self.queue_dir, name))
            elif ext == ".json" and stem + ".jl" not in names:
                os.unlink(os.path.join(self.queue_dir, name))
            elif ext == ".json":
                entries.extend(self._load(stem))
            elif ext == ".jl" and stem + ".json" not in names:
                self._refuse_at_start(stem, "a spooled file without its sidecar (the target is unknown)")
        return sorted(entries, key=lambda e: (e.first_seen, e.id))

    def _load(self, stem: str) -> list[_Entry]:
        try:
            with open(os.path.join(self.queue_dir, stem + ".json"), encoding="utf-8") as f:
                raw = json.load(f)
            entry = _Entry(stem, raw["target"], raw["name"], float(raw["first_seen"]),
                           int(raw["attempts"]), bool(raw.get("rename_sent")))
            parse_target(entry.target)
        except (ValueError, KeyError, TypeError) as e:
            self._refuse_at_start(stem, f"unreadable sidecar: {redact(str(e))}")
            return []
        return [entry]

    def _refuse_at_start(self, stem: str, reason: str) -> None:
        self._quarantine(stem, reason)
        self.quarantined += 1
        log.error("Spooled feed file {id} moved to {bad}: {reason}", id=stem, bad=self.bad_dir, reason=reason)

    # -- ship -------------------------------------------------------------------------------------

    def ship(self, local_path: str, target_uri: str) -> Deferred[None]:
        """Move a finished file into the spool for ``target_uri``; fires once it is there, not when uploaded.

        Fails with ValueError for a bad URI, BadFeedError (file moved to ``bad/``) for bad JSON lines.
        """
        if not self.running or not self._lane.running:
            return defer.fail(RuntimeError("the feed shipper is not running"))
        try:
            parse_target(target_uri)
        except ValueError as e:
            return defer.fail(e)
        entry = _Entry(self._new_id(), target_uri, os.path.basename(local_path), self._clock.seconds())
        inner = self._lane.run(self._spool, entry, local_path)
        inner.addCallbacks(self._accepted, self._not_accepted, (entry,), None, (entry,))
        self._inflight.track(inner)
        outer: Deferred[None] = Deferred()
        inner.chainDeferred(outer)
        return outer

    def _new_id(self) -> str:
        return f"{int(self._clock.seconds() * 1000):013d}-{os.urandom(4).hex()}"

    def _spool(self, entry: _Entry, local_path: str) -> None:
        """Thread: sidecar first, then the file; then the JSON-lines check."""
        sidecar = self._path(entry.id, ".json")
        _write_json(sidecar, entry.record())
        try:
            _move(local_path, self._path(entry.id, ".jl"))
        except OSError:
            unlink_quietly(sidecar)
            raise
        fsync_dir(self.queue_dir)
        self._check(entry)

    def _accepted(self, _: None, entry: _Entry) -> None:
        self._entries[entry.id] = entry
        log.debug("Feed {name} spooled for {target}", name=entry.name, target=redact(entry.target))
        self._attempt(entry)

    def _not_accepted(self, failure: Failure, entry: _Entry) -> Failure:
        if failure.check(BadFeedError):
            self._refused(entry, failure)
        return failure

    # -- uploads ---------------------------------------------------------------------------------

    def _attempt(self, entry: _Entry) -> None:
        entry.timer = None
        if not self.running or entry.busy:
            return
        entry.busy = True
        d = self._one_at_a_time(entry)
        d.addCallbacks(self._uploaded, self._upload_failed, (entry,), None, (entry,))
        d.addErrback(lambda f: log.failure("Feed shipper bug with {name}", f, name=entry.name))
        self._inflight.track(d)

    def _one_at_a_time(self, entry: _Entry) -> Deferred[Any]:
        """Uploads bound for one name go one after the other: FTP cannot rename without overwriting, so a
        second file for a name must find the first one there (and be refused), not race it."""
        lock = self._names.setdefault(entry.target, defer.DeferredLock())
        d = lock.run(self._slots.run, self._upload, entry)

        def forget(result: Any) -> Any:
            if not lock.locked and not lock.waiting:
                self._names.pop(entry.target, None)
            return result

        return d.addBoth(forget)

    def _upload(self, entry: _Entry) -> Deferred[Any]:
        if not self.running or not self._lane.running:
            return defer.succeed(_SKIPPED)
        entry.abort = Abort()
        return self._lane.run(self._deliver, entry, entry.abort)

    def _deliver(self, entry: _Entry, abort: Abort) -> int:
        """Thread: check, upload, then forget the spool entry (file first, sidecar last)."""
        records = self._check(entry)
        try:
            target = replace(parse_target(entry.target), tag=entry.id.rsplit("-", 1)[-1])
            upload(self._path(entry.id, ".jl"), target, timeout=self._ftp_timeout,
                   abort=abort, renamed_before=entry.rename_sent, before_rename=lambda: self._renaming(entry))
        except FeedExistsError as e:
            self._quarantine(entry.id, str(e))
            raise
        except Exception:
            _write_json(self._path(entry.id, ".json"), dict(entry.record(), attempts=entry.attempts + 1))
            raise
        os.unlink(self._path(entry.id, ".jl"))
        os.unlink(self._path(entry.id, ".json"))
        return records

    def _check(self, entry: _Entry) -> int:
        """Thread: the number of records, or quarantine and BadFeedError."""
        try:
            return validate_jsonl(self._path(entry.id, ".jl"))
        except BadFeedError as e:
            self._quarantine(entry.id, str(e))
            raise

    def _renaming(self, entry: _Entry) -> None:
        entry.rename_sent = True
        _write_json(self._path(entry.id, ".json"), entry.record())

    def _uploaded(self, records: Any, entry: _Entry) -> None:
        entry.busy, entry.abort = False, None
        if records is _SKIPPED:
            return
        del self._entries[entry.id]
        self.shipped += 1
        log.info("Feed {name} shipped to {target}: {records} records, {failed} failed attempts before",
                 name=entry.name, target=redact(entry.target), records=records, failed=entry.attempts)

    def _upload_failed(self, failure: Failure, entry: _Entry) -> None:
        entry.busy, entry.abort = False, None
        if failure.check(BadFeedError, FeedExistsError):
            del self._entries[entry.id]
            self._refused(entry, failure)
            return
        self.failures += 1
        entry.attempts += 1
        error = self._describe(failure, entry)
        self.last_error = f"{entry.name}: {error}"
        if not self.running:
            log.info("Feed {name} not shipped before stop ({error}); it stays spooled", name=entry.name, error=error)
            return
        entry.delay = self._retry.after(entry.delay)
        entry.timer = self._clock.callLater(entry.delay, self._attempt, entry)
        emit = log.debug if entry.warned else log.warn
        entry.warned = True
        emit("Feed {name} not shipped to {target} ({error}); spooled, retrying in {delay}s and backing off",
             name=entry.name, target=redact(entry.target), error=error, delay=entry.delay)

    def _refused(self, entry: _Entry, failure: Failure) -> None:
        self.quarantined += 1
        error = self._describe(failure, entry)
        self.last_error = f"{entry.name}: {error}"
        log.error("Feed {name} refused, moved to {bad}, never uploaded: {error}",
                  name=entry.name, bad=self.bad_dir, error=error)

    @staticmethod
    def _describe(failure: Failure, entry: _Entry) -> str:
        """The error as text with no password in it."""
        message = failure.getErrorMessage()
        text = f"{failure.type.__name__}: {message}" if message else f"{failure.type.__name__} (connection closed?)"
        secret = parse_target(entry.target).password
        if secret:
            text = text.replace(secret, "***")
        return redact(text)

    # -- spool paths ------------------------------------------------------------------------------

    def _path(self, stem: str, ext: str) -> str:
        return os.path.join(self.queue_dir, stem + ext)

    def _quarantine(self, stem: str, reason: str) -> None:
        """Move a spool entry into ``bad/`` with a ``.reason`` file."""
        with open(os.path.join(self.bad_dir, stem + ".reason"), "w", encoding="utf-8") as f:
            f.write(reason + "\n")
        for ext in (".jl", ".json"):
            if os.path.exists(self._path(stem, ext)):
                os.replace(self._path(stem, ext), os.path.join(self.bad_dir, stem + ext))

    # -- stop -------------------------------------------------------------------------------------

    @defer.inlineCallbacks
    def stopService(self) -> Any:
        """Wait for uploads in flight up to ``stop_timeout``, then abort them; unshipped files stay spooled."""
        super().stopService()
        for entry in self._entries.values():
            if entry.timer is not None and entry.timer.active():
                entry.timer.cancel()
            entry.timer = None
        finished = yield _within(self._clock, self._stop_timeout, self._inflight.wait())
        if not finished:
            log.warn("Feed uploads still running after {timeout}s: aborted, the files stay spooled",
                     timeout=self._stop_timeout)
            for entry in self._entries.values():
                if entry.abort is not None:
                    entry.abort.set()
            yield self._inflight.wait()
        self._lane.stop()


def _within(clock: Any, seconds: float, d: Deferred[Any]) -> Deferred[bool]:
    """Fires True when ``d`` fires, or False after ``seconds`` on ``clock`` (``d`` is left alone)."""
    result: Deferred[bool] = Deferred()

    def fire(value: bool) -> None:
        if not result.called:
            result.callback(value)

    timer = clock.callLater(seconds, fire, False)

    def done(_: Any) -> None:
        if timer.active():
            timer.cancel()
        fire(True)

    d.addBoth(done)
    return result
