"""Feed URI templates: Scrapy FEED_URI templates (``ftp://anonymous@spark/%(batch)s_%(name)s_%(time)s.jl``)
rendered by :func:`render_uri`.

A parameter names a file, never a directory (:func:`check_param`); only ``%(key)s`` and ``%%`` are directives, and a
rendered name longer than a file system takes is refused.  ``%(time)s`` is :func:`uri_time`.  Errors show the
template redacted (:func:`spiderd.core.secrets.redact`).
"""

from __future__ import annotations

import posixpath
import re
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping

from spiderd.core.secrets import redact
from spiderd.feed.targets import CONTROL, Target, parse_target

_NOT_IN_PARAM = ("/", "\\", "?", "#")
_DIRECTIVE = re.compile(r"%(%|\((?P<key>[A-Za-z_][A-Za-z0-9_]*)\)s)?")  # %% or %(key)s; anything else is refused
NAME_MAX = 255  # bytes in one file name (Linux and most file systems; FTP servers take no more either)
PATH_MAX = 4096


def uri_time(seconds: float) -> str:
    """``%(time)s`` as Scrapy (2.6 and later) renders it: UTC ISO time to the second, with its offset, and
    ``:`` replaced by ``-`` (``2023-11-14T22-13-20+00-00``)."""
    utc = datetime.fromtimestamp(seconds, timezone.utc).replace(microsecond=0)
    return utc.isoformat().replace(":", "-")


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
