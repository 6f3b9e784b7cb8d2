"""The reactor as a part needs it, for type hints: Twisted's interfaces, combined where a part needs several.

Twisted types each of the reactor's facilities by its own interface (``IReactorTime`` for timers,
``IReactorTCP`` for ports, ...); a part that uses only one is typed by it.  A part that uses two is typed
by one of these, which a checker takes for both; one that hands the reactor on to parts of its own takes
the whole ``INodeReactor``.  They are make-believe, like Twisted's own ``_IReactorCommon`` (the type of
``twisted.internet.reactor``): nothing checks them at run time, and the reactor provides each of
Twisted's interfaces, not these.
"""

from __future__ import annotations

from twisted.internet.interfaces import (
    IReactorCore,
    IReactorFromThreads,
    IReactorPluggableNameResolver,
    IReactorProcess,
    IReactorSocket,
    IReactorTCP,
    IReactorTime,
    IReactorUNIX,
)


class IThreadedClock(IReactorTime, IReactorFromThreads):
    """Timers, and results from threads (``deferToThreadPool``)."""


class ITCPClock(IReactorTime, IReactorTCP):
    """Timers, and TCP: connections out, ports to listen on."""


class IProcessClock(IReactorTime, IReactorProcess):
    """Timers, and child processes."""


class IServingClock(ITCPClock, IReactorUNIX, IReactorSocket):
    """Timers, and ports to listen on: TCP, UNIX sockets, and sockets systemd passes (adopted)."""


class INodeReactor(IThreadedClock, IServingClock, IProcessClock, IReactorCore, IReactorPluggableNameResolver):
    """The reactor a node runs on, as the composition root hands it out."""
