"""A thin client that follows a Redis Cluster, over one RedisLink (a txredisapi connection) per master.

``redis+cluster://[:password@]host:port,host:port/`` names seed nodes; the
slot map comes from ``CLUSTER SLOTS`` of the first that answers, and is asked
again after a ``MOVED`` (whose target serves the slot at once) and after a
master was lost.  A command goes to the master of its slot (CRC16 of the key's
hash tag, :func:`key_slot`); ``ASK`` sends ``ASKING`` and the command to the
node named, once; ``TRYAGAIN``, ``CLUSTERDOWN``, ``LOADING`` and a master that cannot
be reached are tried again after the project's backoff (:class:`spiderd.core.retry.
Backoff`), until the master answers or the client is closed: a status or an add
given while a master is down goes out once it is back.  ``wait=False`` fails
at once with :class:`SlotUnavailable` instead while the slot's master is known
to be down (a pop skips that partition).  Scripts are loaded on each master's
connection (RedisLink); a node that lost the function library (or, before Redis 7, a script) gets it again.

Why not redis-py's cluster client: it is blocking (a lane thread per call, or its
asyncio client under the asyncio reactor, a change of the whole daemon), and
what the pool needs of a cluster is small: one slot per script, pipelined
calls, scripts loaded per node.  The routing is this module; txredisapi keeps
the wire.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence
from urllib.parse import unquote

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core.retry import Backoff
from spiderd.core.secrets import redact
from spiderd.frontier.pool.redis.link import RedisAddress, RedisLink, RedisPoolError, RedisReplyError, Script

log = Logger()

SLOTS = 16384
SCHEME = "redis+cluster://"
REDIRECTS = 16  # MOVED/ASK hops of one command before it fails
BACKOFF = Backoff(0.1, 5.0)
RETRIED = ("TRYAGAIN", "CLUSTERDOWN", "LOADING")  # replies of a command not run: tried again after the backoff

_CRC = []
for _byte in range(256):
    _c = _byte << 8
    for _ in range(8):
        _c = ((_c << 1) ^ 0x1021) if _c & 0x8000 else _c << 1
    _CRC.append(_c & 0xFFFF)


def crc16(data: bytes) -> int:
    """CRC16-XMODEM, as Redis Cluster hashes keys."""
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC[(crc >> 8) ^ byte]
    return crc


def key_slot(key: str) -> int:
    """The slot of ``key``: of its hash tag (what is between the first ``{`` and the next ``}``) if not empty."""
    raw = key.encode()
    start = raw.find(b"{")
    if start >= 0:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1:end]
    return crc16(raw) % SLOTS


def is_cluster_url(url: str) -> bool:
    return url.startswith(SCHEME)


def parse_cluster_url(url: str) -> list[RedisAddress]:
    """The seed nodes of ``redis+cluster://[:password@]host:port[,host:port...][/]``; errors without the password."""
    if not is_cluster_url(url):
        raise ValueError(f"not a redis+cluster:// URL: {redact(url)!r}")
    rest = url[len(SCHEME):].rstrip("/")
    auth, _, hosts = rest.rpartition("@")
    password = unquote(auth.partition(":")[2]) if auth else None
    seeds = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"not a valid Redis Cluster URL (host:port,host:port): {redact(url)!r}")
        seeds.append(RedisAddress(host.strip("[]"), int(port), 0, password or None))
    return seeds


class SlotUnavailable(RedisPoolError):
    """The master of a slot is known to be down (asked with ``wait=False``)."""


class ClusterLink:
    """Routes commands and scripts by slot to the cluster's masters, following redirections and outages."""

    def __init__(self, seeds: Sequence[RedisAddress], scripts: Sequence[Script], clock: IReactorTime, *,
                 connect_timeout: float = 10.0, reply_timeout: float = 30.0, backoff: Backoff = BACKOFF) -> None:
        if not seeds:
            raise ValueError("a Redis Cluster needs at least one seed node")
        self._seeds = list(seeds)
        self._scripts = tuple(scripts)
        self._clock = clock
        self._timeouts = (connect_timeout, reply_timeout)
        self._backoff = backoff
        self._slots: list[RedisAddress | None] = [None] * SLOTS
        self._links: dict[tuple[str, int], RedisLink] = {}
        self._down: dict[tuple[str, int], str] = {}  # master -> why, while it cannot be reached
        self._refreshing: list[defer.Deferred[None]] = []  # callers of the refresh under way
        self._timers: dict[Any, defer.Deferred[None]] = {}  # retries waiting for their backoff
        self._closed = False

    # -- the slot map -----------------------------------------------------------------

    def open(self) -> defer.Deferred[None]:
        """Read the slot map (fails with RedisPoolError when no seed answers)."""
        return self.refresh()

    def refresh(self) -> defer.Deferred[None]:
        """Ask a known node for ``CLUSTER SLOTS`` (one request at a time; callers share it)."""
        d: defer.Deferred[None] = defer.Deferred()
        self._refreshing.append(d)
        if len(self._refreshing) == 1:
            self._ask_slots(self._known()).addBoth(self._refreshed)
        return d

    def _refreshed(self, result: Any) -> None:
        waiting, self._refreshing = self._refreshing, []
        for d in waiting:
            d.errback(result) if isinstance(result, Failure) else d.callback(None)

    def _known(self) -> list[RedisAddress]:
        """Masters of the map (those not known to be down first), then the seeds."""
        known = {(a.host, a.port): a for a in self._slots if a is not None}
        for seed in self._seeds:
            known.setdefault((seed.host, seed.port), seed)
        return sorted(known.values(), key=lambda a: (a.host, a.port) in self._down)

    def _ask_slots(self, nodes: list[RedisAddress]) -> defer.Deferred[None]:
        node, rest = nodes[0], nodes[1:]
        d = self._link(node).execute("CLUSTER", "SLOTS").addCallback(self._map, node)
        if rest:
            d.addErrback(lambda _: self._ask_slots(rest))
        return d

    def _map(self, reply: list[Any], asked: RedisAddress) -> None:
        slots: list[RedisAddress | None] = [None] * SLOTS
        for entry in reply:
            start, end, master = int(entry[0]), int(entry[1]), entry[2]
            host = _text(master[0]) or asked.host
            address = RedisAddress(host, int(master[1]), 0, asked.password)
            slots[start:end + 1] = [address] * (end - start + 1)
        self._slots = slots

    def master(self, slot: int) -> RedisAddress | None:
        """The master serving ``slot`` as last known."""
        return self._slots[slot]

    def _link(self, address: RedisAddress) -> RedisLink:
        key = (address.host, address.port)
        link = self._links.get(key)
        if link is None:
            connect, reply = self._timeouts
            link = self._links[key] = RedisLink(address, self._scripts, connect_timeout=connect, reply_timeout=reply)
        return link

    # -- sending ----------------------------------------------------------------------

    def run(self, key: str, script: Script, args: Sequence[Any], *, wait: bool = True,
            slot: int | None = None) -> defer.Deferred[Any]:
        """Run ``script`` with KEYS ``[key]`` (every key it touches shares that key's slot) on its master
        (``slot``: ``key``'s, if the caller knows it)."""
        return self._call(key_slot(key) if slot is None else slot, lambda link: link.run(script, args, (key,)), wait)

    def execute(self, slot: int, *args: Any, wait: bool = True) -> defer.Deferred[Any]:
        """Run one command on the master of ``slot`` (its keys must be of that slot)."""
        return self._call(slot, lambda link: link.execute(*args), wait)

    def _call(self, slot: int, send: Callable[[RedisLink], defer.Deferred[Any]], wait: bool,
              failures: int = 0, redirects: int = 0) -> defer.Deferred[Any]:
        if self._closed:
            return defer.fail(RedisPoolError("Redis Cluster: the pool is closed"))
        address = self._slots[slot]
        if address is None:  # not mapped yet (or the map was lost): ask, then send
            return self.refresh().addCallback(lambda _: self._first(slot, send, wait, failures, redirects))
        if not wait and (address.host, address.port) in self._down:
            why = self._down[(address.host, address.port)]
            return defer.fail(SlotUnavailable(f"Redis Cluster: slot {slot} at {address} is unavailable: {why}"))
        d = send(self._link(address))
        d.addCallback(self._answered, address)
        return d.addErrback(self._failed, slot, send, wait, failures, redirects, address)

    def _first(self, slot: int, send: Callable[[RedisLink], defer.Deferred[Any]], wait: bool, failures: int,
               redirects: int) -> defer.Deferred[Any]:
        if self._slots[slot] is None:
            raise RedisPoolError(f"Redis Cluster: no master serves slot {slot}")
        return self._call(slot, send, wait, failures, redirects)

    def _answered(self, result: Any, address: RedisAddress) -> Any:
        if self._down.pop((address.host, address.port), None) is not None:
            log.info("Redis Cluster: {address} answers again", address=str(address))
        return result

    def _failed(self, failure: Failure, slot: int, send: Callable[[RedisLink], defer.Deferred[Any]], wait: bool,
                failures: int, redirects: int, address: RedisAddress) -> Any:
        if self._closed:
            return failure
        if failure.check(RedisReplyError):
            reply = failure.value.reply
            word, _, rest = reply.partition(" ")
            if word in ("MOVED", "ASK") and redirects < REDIRECTS:
                return self._redirected(word, rest, slot, send, wait, failures, redirects)
            if word in RETRIED:
                log.info("Redis Cluster: slot {slot} at {address}: {reply}; trying again", slot=slot,
                         address=str(address), reply=reply)
                return self._later(slot, send, wait, failures + 1, redirects)
            return failure
        if failure.check(SlotUnavailable):
            return failure
        self._lost(address, failure.getErrorMessage(), slot)
        if not wait:
            return failure
        return self._later(slot, send, wait, failures + 1, redirects)

    def _redirected(self, word: str, rest: str, slot: int, send: Callable[[RedisLink], defer.Deferred[Any]],
                    wait: bool, failures: int, redirects: int) -> defer.Deferred[Any]:
        moved_slot, _, target = rest.partition(" ")
        host, _, port = target.rpartition(":")
        current = self._slots[slot]
        address = RedisAddress(host or (current.host if current else "127.0.0.1"), int(port), 0,
                               self._seeds[0].password)
        if word == "MOVED":
            self._slots[int(moved_slot)] = address
            self.refresh().addErrback(lambda _: None)  # the rest of the map may have moved too
            return self._call(slot, send, wait, failures, redirects + 1)
        link = self._link(address)
        link.execute("ASKING").addErrback(lambda _: None)  # the next command on that connection may go there
        d = send(link)
        return d.addErrback(self._failed, slot, send, wait, failures, redirects + 1, address)

    def _lost(self, address: RedisAddress, why: str, slot: int) -> None:
        key = (address.host, address.port)
        if key not in self._down:
            log.warn("Redis Cluster: master {address} is unavailable ({why}): its slots (slot {slot} among them) "
                     "wait; their commands are tried again until it is back", address=str(address), why=why,
                     slot=slot)
        self._down[key] = why
        self.refresh().addErrback(lambda _: None)  # another master may have taken its slots over

    def _later(self, slot: int, send: Callable[[RedisLink], defer.Deferred[Any]], wait: bool, failures: int,
               redirects: int) -> defer.Deferred[Any]:
        d: defer.Deferred[None] = defer.Deferred()
        timer = self._clock.callLater(self._backoff.delay(failures), d.callback, None)
        self._timers[timer] = d

        def again(_: object) -> defer.Deferred[Any]:
            self._timers.pop(timer, None)
            return self._call(slot, send, wait, failures, redirects)

        d.addCallback(again)
        return d

    # -- closing ----------------------------------------------------------------------

    def drop_connections(self) -> defer.Deferred[None]:
        """Close the masters' connections (after a failed open): the next command connects again."""
        links, self._links = list(self._links.values()), {}
        return defer.gatherResults([link.close() for link in links], consumeErrors=True).addCallback(lambda _: None)

    def close(self) -> defer.Deferred[None]:
        """Stop trying again (waiting commands fail), let the commands on their way finish, disconnect."""
        self._closed = True
        for timer, d in list(self._timers.items()):
            if timer.active():
                timer.cancel()
                d.callback(None)  # the closed client fails its command
        self._timers.clear()
        closing = [link.close() for link in self._links.values()]
        return defer.gatherResults(closing, consumeErrors=True).addCallback(lambda _: None)


class SlotLink:
    """A Link (see :mod:`.link`) for one hash tag: every command and script goes to the master of ``key``'s slot.

    Everything waits for a master that is down, but the scripts in NO_WAIT: a pop
    hands out nothing from there, the next due time is the others'."""

    NO_WAIT = frozenset({"pop", "next_due"})

    def __init__(self, cluster: ClusterLink, key: str) -> None:
        self.cluster = cluster
        self.key = key
        self.slot = key_slot(key)

    def open(self) -> defer.Deferred[None]:
        return self.cluster.open()

    def run(self, script: Script, args: Sequence[Any]) -> defer.Deferred[Any]:
        return self.cluster.run(self.key, script, args, wait=script.name not in self.NO_WAIT, slot=self.slot)

    def execute(self, *args: Any) -> defer.Deferred[Any]:
        return self.cluster.execute(self.slot, *args)

    def close(self) -> defer.Deferred[None]:
        """The cluster's connections are its owner's to close."""
        return defer.succeed(None)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
