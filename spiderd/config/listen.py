"""Where the two HTTP APIs listen (``[api]`` and ``[worker]``): Twisted server endpoint strings, checked at load.

A ``listen`` key takes one of ``tcp:PORT[:interface=ADDR][:backlog=N]``, ``tcp6:...``,
``unix:PATH[:mode=660][:lockfile=1][:backlog=N]`` or a socket systemd passes,
``systemd:domain=INET|INET6|UNIX:index=N`` (or ``:name=NAME``, the socket unit's FileDescriptorName).  Without it,
``bind`` and ``port`` make ``tcp:PORT:interface=BIND``.  The ``backlog`` key is added to a tcp, tcp6 or unix
endpoint that names none (a systemd socket has its unit's ``Backlog=``).  The grammar is Twisted's
(``serverFromString``): ``:`` separates fields, the first ``=`` of a field makes it ``key=value``, and a backslash
takes the next character as it is (``interface=\\:\\:1``).

One rule guards both APIs: an API that other machines can reach asks for credentials (:func:`check_exposure`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Mapping

from twisted.internet.endpoints import quoteStringArgument

from spiderd.config.values import expect
from spiderd.core.secrets import is_loopback

KINDS = ("tcp", "tcp6", "unix", "systemd")
OPTIONS = {"tcp": ("interface", "backlog"), "tcp6": ("interface", "backlog"), "unix": ("mode", "lockfile", "backlog"),
           "systemd": ("domain", "index", "name")}
SYSTEMD_DOMAINS = ("INET", "INET6", "UNIX")
MAX_BACKLOG = 65535  # Linux caps a listen queue at net.core.somaxconn (4096 on recent kernels) anyway


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A server endpoint string, split: its kind, its positional fields, its ``key=value`` fields."""

    kind: str
    args: tuple[str, ...]
    options: Mapping[str, str]

    @property
    def local(self) -> bool:
        """True when only this machine can connect: a loopback address or a UNIX socket (a systemd INET socket's
        address is set in its unit, out of sight at load: not local)."""
        if self.kind == "unix":
            return True
        if self.kind == "systemd":
            return self.options["domain"] == "UNIX"
        return is_loopback(self.options.get("interface", "::" if self.kind == "tcp6" else ""))

    @property
    def tcp(self) -> bool:
        """True when the API is reached over TCP (a port on loopback can take the all role's batches)."""
        return self.kind in ("tcp", "tcp6") or (self.kind == "systemd" and self.options["domain"] != "UNIX")


def split(text: str) -> Endpoint:
    """``text`` split as Twisted splits an endpoint string; ValueError when it is not one."""
    fields: list[list[str]] = [[""]]
    chars = iter(text)
    for char in chars:
        if char == "\\":
            escaped = next(chars, None)
            if escaped is None:
                raise ValueError(f"{text!r} ends in a lone backslash")
            fields[-1][-1] += escaped
        elif char == ":":
            fields.append([""])
        elif char == "=" and len(fields[-1]) == 1:
            fields[-1].append("")
        else:
            fields[-1][-1] += char
    kind, *rest = fields
    options = {f[0]: f[1] for f in rest if len(f) == 2}
    if len(options) != sum(len(f) == 2 for f in rest):
        raise ValueError(f"{text!r} names an option twice")
    return Endpoint(kind[0] if len(kind) == 1 else "=".join(kind), tuple(f[0] for f in rest if len(f) == 1), options)


def endpoint(value: Any) -> str:
    """The ``listen`` key: "" (use bind and port) or an endpoint string of a kind spiderd listens on."""
    text = expect(value, str, "a string")
    if text:
        _check(split(text), text)
    return text


def _check(parsed: Endpoint, text: str) -> None:
    if parsed.kind not in KINDS:
        raise ValueError(f"{text!r}: expected tcp:PORT:interface=ADDRESS, tcp6:..., unix:PATH or "
                         f"systemd:domain=INET:index=0 (Twisted endpoint strings)")
    unknown = set(parsed.options) - set(OPTIONS[parsed.kind])
    if unknown:
        raise ValueError(f"{text!r}: unknown option {sorted(unknown)[0]!r} for {parsed.kind} "
                         f"(known: {', '.join(OPTIONS[parsed.kind])})")
    if "backlog" in parsed.options:
        _number(parsed.options["backlog"], 1, MAX_BACKLOG, "backlog", text)
    if parsed.kind == "systemd":
        _check_systemd(parsed, text)
    elif len(parsed.args) != 1 or not parsed.args[0]:
        usage = "unix:PATH" if parsed.kind == "unix" else f"{parsed.kind}:PORT"
        raise ValueError(f"{text!r}: expected {usage}, then options")
    elif parsed.kind == "unix":
        _check_unix(parsed, text)
    else:
        _number(parsed.args[0], 0, 65535, "the port", text)
        if parsed.kind == "tcp6" and parsed.options.get("interface"):
            _ipv6(parsed.options["interface"], text)


def _check_unix(parsed: Endpoint, text: str) -> None:
    mode = parsed.options.get("mode", "666")
    if not mode or any(c not in "01234567" for c in mode) or int(mode, 8) > 0o777:
        raise ValueError(f"{text!r}: mode must be octal permissions such as 660, got {mode!r}")
    if parsed.options.get("lockfile", "1") not in ("0", "1"):
        raise ValueError(f"{text!r}: lockfile must be 0 or 1")


def _check_systemd(parsed: Endpoint, text: str) -> None:
    if parsed.args:
        raise ValueError(f"{text!r}: a systemd socket takes options only (domain=INET:index=0)")
    if parsed.options.get("domain") not in SYSTEMD_DOMAINS:
        raise ValueError(f"{text!r}: domain must be one of {', '.join(SYSTEMD_DOMAINS)}")
    if ("index" in parsed.options) == ("name" in parsed.options):
        raise ValueError(f"{text!r}: name the socket by index=N or by name=NAME (its FileDescriptorName), not both")
    if "index" in parsed.options:
        _number(parsed.options["index"], 0, 1023, "index", text)
    elif not parsed.options["name"]:
        raise ValueError(f"{text!r}: name must not be empty")


def _number(field: str, low: int, high: int, what: str, text: str) -> int:
    if not field.isdigit() or not low <= int(field) <= high:
        raise ValueError(f"{text!r}: {what} must be a number in {low}..{high}, got {field!r}")
    return int(field)


def _ipv6(address: str, text: str) -> None:
    try:
        ipaddress.IPv6Address(address.strip("[]"))
    except ValueError:
        raise ValueError(f"{text!r}: a tcp6 interface is an IPv6 address, got {address!r}") from None


def listen_endpoint(listen: str, bind: str, port: int, backlog: int) -> str:
    """The endpoint an API listens on: ``listen`` (with ``backlog`` unless it names one or is systemd's), else
    ``tcp:PORT:interface=BIND`` with ``backlog``."""
    if not listen:
        interface = f":interface={quoteStringArgument(bind)}" if bind else ""
        return f"tcp:{port}{interface}:backlog={backlog}"
    parsed = split(listen)
    if parsed.kind == "systemd" or "backlog" in parsed.options:
        return listen
    return f"{listen}:backlog={backlog}"


@dataclass(frozen=True, slots=True)
class Exposure:
    """What one API's keys say about who may reach it."""

    section: str  # "api" or "worker"
    listen: str
    bind: str
    credentials: bool  # a token or basic auth is set
    why: str  # what anyone reaching it could do
    how: str  # the keys that set credentials


def check_exposure(exposure: Exposure) -> str | None:
    """Why an API must not start (None: it may): other machines could reach it, and it asks no credentials."""
    if exposure.credentials:
        return None
    key, shown = ("listen", exposure.listen) if exposure.listen else ("bind", exposure.bind or "(all interfaces)")
    parsed = split(exposure.listen) if exposure.listen else Endpoint("tcp", ("0",), {"interface": exposure.bind})
    if parsed.local:
        return None
    what = ("is a systemd socket whose address is set in its unit" if parsed.kind == "systemd"
            else "is not a loopback address")
    fix = ("listen on 127.0.0.1 or a UNIX socket (unix:PATH, systemd:domain=UNIX)" if exposure.listen
           else "bind 127.0.0.1")
    return (f"{exposure.section}.{key}: {shown!r} {what}, and {exposure.why}: set {exposure.how}, or {fix}")


def check_credentials(section: str, username: str, password: str) -> str | None:
    """Why a pair of basic-auth keys cannot work (None: it can)."""
    if bool(username) != bool(password):
        return f"{section}.username, {section}.password: set both (HTTP basic auth) or neither"
    if ":" in username:  # RFC 7617: the user-id cannot contain a colon (Scrapyd refuses it too)
        return f"{section}.username: must not contain ':'"
    return None
