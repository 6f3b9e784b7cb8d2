"""The composition root: command-line options and ``makeService``."""

from __future__ import annotations

from twisted.application.service import IService, MultiService
from twisted.python import usage


class Options(usage.Options):
    """``twistd spiderd`` options."""

    optParameters = [["config", "c", None, "Path to the spiderd TOML configuration."]]


def makeService(options: Options) -> IService:
    """Build the spiderd service tree from the options."""
    return MultiService()
