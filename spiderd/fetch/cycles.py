"""The reference cycles Twisted leaves in a closed client connection, broken so that it is freed at once.

A closed TCP connection made through an endpoint stays as a ring: the
``tcp.Client`` names its ``Connector`` and the connector names it back; the
connector's factory (the endpoint's ``_WrappingFactory``) names the connector,
and its connection Deferred holds the protocol, whose transport is the client.
Only the garbage collector frees such a ring.  A crawl of many hosts closes
connections at hundreds a second (past ``max_idle_connections``, or at the
server's word), and those rings were most of what each full collection walked
and freed: passes of 100-470 ms that held the reactor (``bench/stalls.py`` on
``bench/hosts.py``).  :func:`unlink` cuts the back references once the
connection is lost; what is left is a tree that reference counting frees.
"""

from __future__ import annotations

from typing import Any

DEPTH = 4  # transports below transports: TLS over TCP, a proxy's tunnel over TLS


def unlink(transport: Any) -> None:
    """Cut the back references of the lost connection ``transport`` (and of the transports it wraps): the
    connector's of its client, the wrapping factory's of its connector and of its connection Deferred."""
    for _ in range(DEPTH):
        if transport is None:
            return
        connector = getattr(transport, "connector", None)
        if connector is not None:
            factory: Any = getattr(connector, "factory", None)
            if getattr(getattr(factory, "_onConnection", None), "called", False):
                factory._onConnection = None  # (fired: its result is the protocol)
                factory._connector = None
            connector.transport = None
            return
        transport = getattr(transport, "transport", None)  # TLS: the connection below
