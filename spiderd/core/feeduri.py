"""Feed URIs: where a feed file goes, and the templates that name it.

A target is ``ftp://``, ``ftps://`` (explicit TLS), ``sftp://`` (``[user[:pass]@]host[:port]/dir/name``) or
``file:///dir/name``, parsed into a :class:`Target` (:func:`parse_target`).  Paths are taken literally (no
percent-decoding; only the user and password are URL-decoded) and, as in Scrapy, from the FTP root the server shows
the user (SFTP: from the server's root).  A path must be absolute and end in a file name.

A template is a Scrapy FEED_URI (``ftp://anonymous@spark/%(batch)s_%(name)s_%(time)s.jl``) rendered by
:func:`render_uri`.  A parameter names a file, never a directory (:func:`check_param`); only ``%(key)s`` and ``%%``
are directives, and a rendered name longer than a file system takes is refused.  ``%(time)s`` is :func:`uri_time`;
``%(date)s`` and ``%(hour)s`` (:func:`time_params`) name partition directories (``dt=%(date)s/hour=%(hour)s/``), and
:func:`partition_window` says which time window a template's directory stands for.

Pure: the configuration checks its templates with these at load, the worker and the feed shipper use them at run
time.  Errors show the URI redacted (:func:`spiderd.core.secrets.redact`).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping
from urllib.parse import unquote, urlsplit

from spiderd.core.secrets import redact

CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # control characters: never in a feed path or a template parameter
PORTS = {"ftp": 21, "ftps": 21, "sftp": 22}  # the remote schemes and their default ports (ftps: explicit TLS on 21)
SCHEMES = ("file", *PORTS)


@dataclass(frozen=True, slots=True)
class Target:
    """Where a feed file goes: a directory and a final name, on an FTP, FTPS or SFTP host or the local disk."""

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
        return f"{self.scheme}://{user}{self.host}:{self.port}{path}"

    @property
    def host_port(self) -> str:
        """``host:port`` (IPv6 in brackets), as messages show it."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_target(uri: str) -> Target:
    """``ftp|ftps|sftp://[user[:pass]@]host[:port]/dir/name`` or ``file:///dir/name``; ValueError otherwise."""
    shown = redact(uri)
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError as e:
        raise ValueError(f"bad feed URI {shown!r}: {e}") from None
    if parts.scheme not in SCHEMES or parts.query or parts.fragment:
        raise ValueError(f"feed URI {shown!r}: expected ftp://, ftps:// or sftp://USER:PASS@HOST/DIR/NAME, "
                         "or file:///DIR/NAME")
    directory, name = _split_path(parts.path, shown)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"feed URI {shown!r}: a file:// URI names a local path (file:///DIR/NAME)")
        return Target("file", directory, name)
    if not parts.hostname:
        raise ValueError(f"feed URI {shown!r} has no host")
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    return Target(parts.scheme, directory, name, parts.hostname, port or PORTS[parts.scheme], user, password)


def template_target(template: str) -> Target:
    """The host, port and user of a feed URI template (its parameters filled with placeholders)."""
    return parse_target(_DIRECTIVE.sub(lambda m: "%" if m.group(1) == "%" else "x", template))


def _split_path(path: str, shown: str) -> tuple[str, str]:
    segments = path.split("/")
    if (not path.startswith("/") or "\\" in path or CONTROL.search(path)
            or any(s in ("", ".", "..") for s in segments[1:])):
        raise ValueError(f"feed URI {shown!r}: the path must be absolute, end in a file name, "
                         "and have no '.', '..', empty segments, backslashes or control characters")
    return posixpath.dirname(path), segments[-1]


_NOT_IN_PARAM = ("/", "\\", "?", "#")
_DIRECTIVE = re.compile(r"%(%|\((?P<key>[A-Za-z_][A-Za-z0-9_]*)\)s)?")  # %% or %(key)s; anything else is refused
NAME_MAX = 255  # bytes in one file name (Linux and most file systems; FTP servers take no more either)
PATH_MAX = 4096


def uri_time(seconds: float) -> str:
    """``%(time)s`` as Scrapy (2.6 and later) renders it: UTC ISO time to the second, with its offset, and
    ``:`` replaced by ``-`` (``2023-11-14T22-13-20+00-00``)."""
    utc = datetime.fromtimestamp(seconds, timezone.utc).replace(microsecond=0)
    return utc.isoformat().replace(":", "-")


def time_params(seconds: float) -> dict[str, str]:
    """``%(time)s``, ``%(date)s`` (``2026-12-05``) and ``%(hour)s`` (``09``), in UTC, of the Unix time ``seconds``."""
    utc = datetime.fromtimestamp(seconds, timezone.utc)
    return {"time": uri_time(seconds), "date": utc.strftime("%Y-%m-%d"), "hour": utc.strftime("%H")}


def partition_window(template: str, seconds: float) -> tuple[float, float] | None:
    """The time window (start, end) of the partition directory a file of time ``seconds`` lands in: the hour when
    the template's directory names ``%(hour)s``, the day when it names ``%(date)s`` only; None when it names
    neither (the files land in no partition, and no marker is written)."""
    directory = template.rsplit("/", 1)[0]
    if "%(hour)s" in directory:
        span = 3600
    elif "%(date)s" in directory:
        span = 86400
    else:
        return None
    start = seconds - seconds % span
    return float(start), float(start + span)


def check_param(key: str, value: Any) -> str:
    """``value`` as text, if it can only name a file inside the template's directory."""
    text = str(value)
    bad = [c for c in _NOT_IN_PARAM if c in text] or CONTROL.findall(text)
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
