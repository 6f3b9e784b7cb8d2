"""The reactor as a part needs it, for type hints: Twisted's interfaces, combined where a part needs several.

Twisted types each of the reactor's facilities by its own interface (``IReactorTime`` for timers,
``IReactorTCP`` for ports, ...); a part that uses only one is typed by it.  A part that uses two is typed
by one of these, which a checker takes for both.  Nothing checks them at run time: the reactor provides
each of Twisted's interfaces, not these.
"""

from __future__ import annotations

from twisted.internet.interfaces import IReactorFromThreads, IReactorProcess, IReactorTCP, IReactorTime


class IThreadedClock(IReactorTime, IReactorFromThreads):
    """Timers, and results from threads (``deferToThreadPool``)."""



class ITCPClock(IReactorTime, IReactorTCP):
    """Timers, and TCP: connections out, ports to listen on."""


class IProcessClock(IReactorTime, IReactorProcess):
    """Timers, and child processes."""
