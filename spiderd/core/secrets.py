"""Secrets: the one redaction of passwords in URIs and text, and the one loopback rule.

Every place that shows a URI (logs, errors, ``listjobs.json``, the status API,
configuration errors) goes through :func:`redact` or :func:`redact_text`; a known password that an
error may quote on its own goes through :func:`mask_secret`.
A URI's password is whatever sits between the ``:`` after the user name and
the last ``@`` of the authority, whatever characters it holds (spaces,
quotes, ``@``, ``/``, ``#``): it becomes ``***``.
"""

from __future__ import annotations

import ipaddress
import re

MASK = "***"
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")


def redact(uri: str) -> str:
    """``uri`` with its password (if any) replaced by ``***``; a URI without one is returned as it is."""
    match = _SCHEME.match(uri)
    if match is None:
        return uri
    rest = uri[match.end() :]
    return _mask(uri[: match.end()], rest, _userinfo_end(rest, alone=True))


def redact_text(text: str) -> str:
    """``text`` with the password of every URI in it replaced by ``***`` (a URI may run to the end of its
    line, so a password holding spaces or quotes is masked too)."""
    out, position = [], 0
    for match in _SCHEME.finditer(text):
        if match.start() < position:
            continue
        line_end = text.find("\n", match.start())
        candidate = text[match.start() : len(text) if line_end < 0 else line_end]
        following = _SCHEME.search(candidate, match.end() - match.start())
        if following is not None:  # the next URI on the line starts a candidate of its own
            candidate = candidate[: following.start()]
        rest = candidate[match.end() - match.start() :]
        out.append(text[position : match.start()])
        out.append(_mask(text[match.start() : match.end()], rest, _userinfo_end(rest, alone=False)))
        position = match.start() + len(candidate)
    out.append(text[position:])
    return "".join(out)


def redact_value(value: str) -> str:
    """A value that is a URI is redacted as one (its password may hold anything); any other as text."""
    return redact(value) if _SCHEME.match(value) else redact_text(value)


_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~%-]+)(:\d*)?([/?#\s\"'<>\\)\],;]|$)")


def _userinfo_end(rest: str, alone: bool) -> int:
    """The index in ``rest`` (a URI after ``//``) of the ``@`` that ends its userinfo, or -1 if it has none.

    The authority ends at the first ``/``, ``?`` or ``#``, and its last ``@`` ends the userinfo; a password
    holding one of those three (it should have been percent-encoded) runs to an ``@`` that a host follows.
    In running text (not ``alone``) the first ``@`` that a host follows counts, so that a later ``@`` of the
    sentence is not taken for the URI's, and a password may hold spaces and quotes."""
    stops = [i for i in (rest.find(c) for c in "/?#") if i >= 0]
    authority_end = min(stops) if stops else len(rest)
    candidates = [i for i, c in enumerate(rest) if c == "@" and _HOST.match(rest, i + 1) is not None]
    inside = [i for i in candidates if i < authority_end]
    if alone and rest.rfind("@", 0, authority_end) >= 0:
        return rest.rfind("@", 0, authority_end)
    if inside:
        return inside[0] if not alone else inside[-1]
    authority = rest[:authority_end]
    if ":" not in authority or authority.rpartition(":")[2].isdigit():
        return -1  # host or host:port: no userinfo
    if not candidates:
        return -1
    return candidates[-1] if alone else candidates[0]


def _mask(head: str, rest: str, end: int) -> str:
    """``head + rest`` with the password of the userinfo ``rest[:end]`` masked."""
    if end < 0:
        return head + rest
    user, colon, _ = rest[:end].partition(":")
    if not colon:
        return head + rest  # a user name, no password
    if any(c in user for c in "/?#@ \"'"):  # not a plain user name: hide the whole userinfo
        return f"{head}{MASK}{rest[end:]}"
    return f"{head}{user}:{MASK}{rest[end:]}"


def mask_secret(text: str, secret: str | None) -> str:
    """``text`` with every copy of a known ``secret`` (a password an error message may quote outside any URI)
    replaced by ``***``; ``text`` as it is when there is no secret (empty or None)."""
    return text.replace(secret, MASK) if secret else text


def is_loopback(address: str) -> bool:
    """True for 127.0.0.0/8, ::1 (bracketed or not) and the usual names of the loopback host."""
    if address.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def is_loopback_host_header(host: str) -> bool:
    """True if an HTTP ``Host`` header (``name[:port]`` or ``[v6][:port]``) names the loopback host."""
    name = host[1:].partition("]")[0] if host.startswith("[") else host.rpartition(":")[0] or host
    return is_loopback(name)
