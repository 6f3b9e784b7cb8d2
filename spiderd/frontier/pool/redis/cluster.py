"""A thin client that follows a Redis Cluster, over one RedisLink (a txredisapi connection) per master.

``redis+cluster://[:password@]host:port,host:port/`` names seed nodes; the
slot map comes from ``CLUSTER SLOTS`` of the first that answers, and is asked
again after a ``MOVED`` (whose target serves the slot at once) and after a
master was lost.  A command goes to the master of its slot (CRC16 of the key's
hash tag, :func:`key_slot`); ``ASK`` sends ``ASKING`` and the command to the
node named, once; ``TRYAGAIN``, ``CLUSTERDOWN``, ``LOADING`` and a master that cannot
be reached are tried again after the project's backoff (:class:`spiderd.core.retry.
Backoff`), until the master answers or the client is closed: a status or an add
given while a master is down goes out once it is back, or once the map names the
replica promoted in its place (a map that gives slots back to a master that
could not be reached, from a node that has not heard of the failover yet, is
not believed for those slots: were it back, the other would answer ``MOVED``).
Each outage of a master (unreachable, or answering ``TRYAGAIN``, ``CLUSTERDOWN``,
``LOADING``) logs one warning, and its end one line with its length (the
clock's).  ``wait=False`` fails at once with :class:`SlotUnavailable` instead
while the slot's master is known to be down (a pop skips that partition), but
for one call a backoff step, which tries it (and reads the map again).  A write
answered but not acknowledged by a replica (``[pool] redis_durability``,
:mod:`.durability`: the connection ended first, or the master was demoted) is
sent again at once, to whichever master the map names by then.  Scripts are
loaded on each master's connection (RedisLink); a node that lost the function
library (or, before Redis 7, a script) gets it again.

Why not redis-py's cluster client: it is blocking (a lane thread per call, or its
asyncio client under the asyncio reactor, a change of the whole daemon), and
what the pool needs of a cluster is small: one slot per script, pipelined
calls, scripts loaded per node.  The routing is this module; txredisapi keeps
the wire.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence
from urllib.parse import unquote

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core.retry import Backoff
from spiderd.core.secrets import redact
from spiderd.frontier.pool.redis.durability import NONE, Durability
from spiderd.frontier.pool.redis.link import (RedisAddress, RedisLink, RedisPoolError, RedisReplyError, Script,
                                              Unacknowledged)

log = Logger()

SLOTS = 16384
SCHEME = "redis+cluster://"
REDIRECTS = 16  # MOVED/ASK hops of one command before it fails
BACKOFF = Backoff(0.1, 5.0)
# replies of a command not run: tried again after the backoff, the map asked again (READONLY: a master demoted by a
# failover whose slot table still names it; the fault suite's cluster-failover under load met it for good otherwise)
RETRIED = ("TRYAGAIN", "CLUSTERDOWN", "LOADING", "READONLY")

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


@dataclass(slots=True)
class Outage:
    """A master that cannot be reached, or answers that the cluster is down (``TRYAGAIN``, ``CLUSTERDOWN``,
    ``LOADING``): since when (the clock's), why, and when a call that would not wait may try it next."""

    why: str
    since: float
    tries: int = 0
    next_try: float = 0.0


class ClusterLink:
    """Routes commands and scripts by slot to the cluster's masters, following redirections and outages."""

    def __init__(self, seeds: Sequence[RedisAddress], scripts: Sequence[Script], clock: IReactorTime, *,
                 connect_timeout: float = 10.0, reply_timeout: float = 30.0, backoff: Backoff = BACKOFF,
                 durability: Durability = NONE) -> None:
        if not seeds:
            raise ValueError("a Redis Cluster needs at least one seed node")
        self._seeds = list(seeds)
        self._scripts = tuple(scripts)
        self._clock = clock
        self._timeouts = (connect_timeout, reply_timeout)
        self._backoff = backoff
        self._durability = durability
        self._slots: list[RedisAddress | None] = [None] * SLOTS
        self._links: dict[tuple[str, int], RedisLink] = {}
        self._down: dict[tuple[str, int], Outage] = {}  # master -> its outage, until it answers or is replaced
        self._unreachable: set[tuple[str, int]] = set()  # nodes whose last connection failed (asked last)
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
        return sorted(known.values(), key=lambda a: (a.host, a.port) in self._unreachable)

    def _ask_slots(self, nodes: list[RedisAddress]) -> defer.Deferred[None]:
        node, rest = nodes[0], nodes[1:]
        d = self._link(node).execute("CLUSTER", "SLOTS").addCallback(self._map, node)
        if rest:
            d.addErrback(self._ask_next, node, rest)
        return d

    def _ask_next(self, failure: Failure, node: RedisAddress, rest: list[RedisAddress]) -> defer.Deferred[None]:
        if not failure.check(RedisReplyError):
            self._unreachable.add((node.host, node.port))
        return self._ask_slots(rest)

    def _map(self, reply: list[Any], asked: RedisAddress) -> None:
        """The slot map of ``CLUSTER SLOTS``, but for slots it gives back to a master that could not be reached
        when another serves them already: the answer of a node that has not heard of a failover yet (were the
        master back and serving them, the other would answer MOVED)."""
        previous = self._slots
        slots: list[RedisAddress | None] = [None] * SLOTS
        for entry in reply:
            start, end, master = int(entry[0]), int(entry[1]), entry[2]
            host = _text(master[0]) or asked.host
            address = RedisAddress(host, int(master[1]), 0, asked.password)
            slots[start:end + 1] = [address] * (end - start + 1)
            if (host, address.port) in self._unreachable:
                for slot in range(start, end + 1):
                    if previous[slot] is not None and previous[slot] != address:
                        slots[slot] = previous[slot]
        self._unreachable.discard((asked.host, asked.port))
        self._slots = slots
        self._taken_over(previous)

    def _taken_over(self, previous: list[RedisAddress | None]) -> None:
        """A master down whose slots the new map gives to others (its replica, promoted): its outage is over."""
        masters = {(a.host, a.port) for a in self._slots if a is not None}
        for key in [key for key in self._down if key not in masters]:
            outage = self._down.pop(key)
            heirs = sorted({str(self._slots[s]) for s, old in enumerate(previous)
                            if old is not None and (old.host, old.port) == key and self._slots[s] is not None})
            if heirs:
                log.info("Redis Cluster: the slots of {address} are served by {heirs} now, {seconds:.1f} s after "
                         "it was lost", address=f"{key[0]}:{key[1]}", heirs=", ".join(heirs),
                         seconds=self._clock.seconds() - outage.since)

    def master(self, slot: int) -> RedisAddress | None:
        """The master serving ``slot`` as last known."""
        return self._slots[slot]

    def _link(self, address: RedisAddress) -> RedisLink:
        key = (address.host, address.port)
        link = self._links.get(key)
        if link is None:
            connect, reply = self._timeouts
            link = self._links[key] = RedisLink(address, self._scripts, connect_timeout=connect, reply_timeout=reply,
                                                durability=self._durability)
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
        outage = self._down.get((address.host, address.port))
        if not wait and outage is not None and not self._may_try(address, outage):
            return defer.fail(SlotUnavailable(f"Redis Cluster: slot {slot} at {address} is unavailable: "
                                              f"{outage.why}"))
        d = send(self._link(address))
        d.addCallback(self._answered, address)
        return d.addErrback(self._failed, slot, send, wait, failures, redirects, address)

    def _first(self, slot: int, send: Callable[[RedisLink], defer.Deferred[Any]], wait: bool, failures: int,
               redirects: int) -> defer.Deferred[Any]:
        if self._slots[slot] is None:
            raise RedisPoolError(f"Redis Cluster: no master serves slot {slot}")
        return self._call(slot, send, wait, failures, redirects)

    def _may_try(self, address: RedisAddress, outage: Outage) -> bool:
        """Whether a call that would not wait may go to a master in an outage: once a backoff step the map is asked
        again, and the master is tried (so that calls that do not wait notice the end of an outage too): with
        this call if it answered (``CLUSTERDOWN``...), else with a PING of its own, not to hold the call for a
        connection that may take ``connect_timeout`` to fail."""
        now = self._clock.seconds()
        if now < outage.next_try:
            return False
        outage.tries += 1
        outage.next_try = now + self._backoff.delay(outage.tries)
        self.refresh().addErrback(lambda _: None)
        if (address.host, address.port) not in self._unreachable:
            return True
        self._link(address).execute("PING").addCallbacks(self._answered, lambda _: None, (address,))
        return False

    def _answered(self, result: Any, address: RedisAddress) -> Any:
        key = (address.host, address.port)
        self._unreachable.discard(key)
        outage = self._down.pop(key, None)
        if outage is not None:
            log.info("Redis Cluster: {address} answers again, {seconds:.1f} s after {why}", address=str(address),
                     seconds=self._clock.seconds() - outage.since, why=outage.why)
        return result

    def _trouble(self, address: RedisAddress, why: str, slot: int) -> None:
        """One warning per outage of a master (the first failure); the map is asked again."""
        key = (address.host, address.port)
        if key not in self._down:
            log.warn("Redis Cluster: master {address} is unavailable ({why}): its slots (slot {slot} among them) "
                     "wait; their commands are tried again until it or its replica answers", address=str(address),
                     why=why, slot=slot)
            now = self._clock.seconds()
            self._down[key] = Outage(why, now, 1, now + self._backoff.delay(1))
        self.refresh().addErrback(lambda _: None)  # another master may have taken its slots over

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
                log.debug("Redis Cluster: slot {slot} at {address}: {reply}; trying again", slot=slot,
                          address=str(address), reply=reply)
                self._trouble(address, reply, slot)
                return self._later(slot, send, wait, failures + 1, redirects) if wait else failure
            return failure
        if failure.check(SlotUnavailable):
            return failure
        if failure.check(Unacknowledged) and redirects < REDIRECTS:  # answered, perhaps lost: sent again
            self.refresh().addErrback(lambda _: None)  # (a demoted master answers MOVED meanwhile)
            return self._call(slot, send, wait, failures, redirects + 1) if wait else failure
        self._unreachable.add((address.host, address.port))
        if self._slots[slot] != address and redirects < REDIRECTS:  # its slot moved meanwhile (a failover)
            return self._call(slot, send, wait, failures, redirects + 1) if wait else failure
        self._trouble(address, failure.getErrorMessage(), slot)
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
