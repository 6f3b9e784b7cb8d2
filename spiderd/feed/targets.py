"""Where a feed file goes: ``ftp://[user[:pass]@]host[:port]/dir/name`` or ``file:///dir/name``, parsed into a
:class:`Target`.

Paths are taken literally (no percent-decoding; only the password is URL-decoded) and, as in Scrapy, from the FTP
root the server shows the user.  A path must be absolute and end in a file name.  Errors show the URI redacted
(:func:`spiderd.core.secrets.redact`).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from spiderd.core.secrets import redact

CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # control characters: never in a feed path or a template parameter


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
    if (not path.startswith("/") or "\\" in path or CONTROL.search(path)
            or any(s in ("", ".", "..") for s in segments[1:])):
        raise ValueError(f"feed URI {shown!r}: the path must be absolute, end in a file name, "
                         "and have no '.', '..', empty segments, backslashes or control characters")
    return posixpath.dirname(path), segments[-1]
