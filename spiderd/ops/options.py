"""``twistd spiderd``'s command line: the options :mod:`spiderd.tap` builds a node from."""

from __future__ import annotations

from typing import Any, ClassVar

from twisted.python import usage

__all__ = ["Options"]


class Options(usage.Options):
    """``twistd -n spiderd [--config FILE] [--role ROLE] [--demo]``."""

    optFlags: ClassVar[list[list[Any]]] = [
        ["demo", None, "Crawl the bundled demo site on loopback to completion (starts from a clean demo data dir)."],
        ["exit-when-done", None, "Stop when nothing is left to crawl."],
    ]
    optParameters: ClassVar[list[list[Any]]] = [
        ["config", "c", None, "Path to the spiderd TOML configuration."],
        ["role", "r", None, "all, frontier or worker (overrides spiderd.role)."],
        ["data-dir", "d", None, "Data directory (overrides spiderd.data_dir)."],
    ]

    def postOptions(self) -> None:
        if not self["demo"] and not self["config"]:
            raise usage.UsageError("give --config FILE (see etc/spiderd.toml), or --demo")

    def overrides(self) -> dict[str, Any]:
        """The ``section.key`` values the command line sets."""
        given = {"spiderd.role": self["role"], "spiderd.data_dir": self["data-dir"],
                 "spiderd.exit_when_done": True if self["exit-when-done"] else None}
        return {key: value for key, value in given.items() if value}
