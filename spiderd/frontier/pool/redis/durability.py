"""When a write to Redis counts as acknowledged: ``[pool] redis_durability``.

Redis replicates asynchronously: a master that dies after answering a write and before its replica has it loses
the write once the replica is promoted (a status given, a lease taken, an add).  With ``"replica"`` a write call
of the pool (every script but the read-only ones, every command but the reads) is answered to the node only once
``WAIT 1 <timeout>`` on the same connection says one replica has it; with ``"aof"`` once ``WAITAOF 1 1
<timeout>`` says the master's AOF and a replica's have it fsynced (Redis 7.2 or later).  A node whose master
dies before that sees the call fail, as if the master had died before running it: a status, an add or a
checkpoint is sent again to the promoted replica (each one may be run twice: a status of a done URL changes
nothing, an add of a known URL queues nothing), a pop hands nothing out (what it leased comes back when the
lease ends).

One ``WAIT`` covers every write answered on its connection before its own answer (Redis answers a connection's
commands in order), so the writes of one node to one master are acknowledged in groups, at most one ``WAIT``
on its way at a time (it holds the connection while it waits).  A master with no replica connected
(``ROLE``) acknowledges alone, with one warning until a replica is back; a replica connected but behind is
waited for (``WAIT`` again after each timeout), with one warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.frontier.pool.redis.errors import Unacknowledged

log = Logger()

MODES = ("none", "replica", "aof")
ACK_TIMEOUT_MS = 1000  # a WAIT's timeout: then ROLE tells whether a replica is there to wait for
READ_SCRIPTS = frozenset({"next_due", "stats", "why", "hosts"})  # scripts that change nothing worth keeping
READ_COMMANDS = frozenset({
    "GET", "HGET", "HMGET", "HGETALL", "HSCAN", "HLEN", "HEXISTS", "LRANGE", "LLEN", "SCAN", "SSCAN", "ZSCAN",
    "SMEMBERS", "SCARD", "SISMEMBER", "SMISMEMBER", "ZCARD", "ZSCORE", "ZRANGE", "ZRANGEBYSCORE", "ZCOUNT",
    "EXISTS", "TYPE", "TTL", "PTTL", "INFO", "PING", "ROLE", "CLUSTER", "ASKING", "OBJECT", "MEMORY", "WAIT",
    "WAITAOF", "FUNCTION", "SCRIPT",
})


@dataclass(frozen=True, slots=True)
class Durability:
    """``mode``: "none" (a write is acknowledged when its master answers), "replica" or "aof"."""

    mode: str = "none"
    timeout_ms: int = ACK_TIMEOUT_MS

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"redis_durability must be one of {', '.join(MODES)}, not {self.mode!r}")

    @property
    def on(self) -> bool:
        return self.mode != "none"

    def ask(self, replicas: int) -> tuple[str, ...]:
        """The command that waits for ``replicas`` replicas (0 or 1) and, with "aof", the master's own fsync."""
        if self.mode == "aof":
            return ("WAITAOF", "1", str(replicas), str(self.timeout_ms))
        return ("WAIT", str(replicas), str(self.timeout_ms))

    def enough(self, reply: Any, replicas: int) -> bool:
        """Whether the answer to :meth:`ask` covers what was asked."""
        if self.mode == "aof":
            local, copies = (int(n) for n in reply)
            return local >= 1 and copies >= replicas
        return int(reply) >= replicas


NONE = Durability()


def writes_script(name: str) -> bool:
    return name not in READ_SCRIPTS


def writes_command(args: tuple[Any, ...]) -> bool:
    return bool(args) and str(args[0]).upper() not in READ_COMMANDS


def replicas_connected(role: Any) -> int:
    """Replicas a master's ``ROLE`` answer lists (``["master", offset, [[ip, port, offset], ...]]``); -1 when the
    node is not a master (it was demoted: the writes it answered may be lost)."""
    if not role or _text(role[0]) != "master":
        return -1
    return len(role[2]) if len(role) > 2 and role[2] else 0


class Acknowledger:
    """One connection's writes waiting to be acknowledged: :meth:`covered` holds a write's answer until a
    ``WAIT`` (``WAITAOF``) sent after it says a replica has it; ``send`` sends a command on that connection."""

    def __init__(self, durability: Durability, send: Callable[..., defer.Deferred[Any]], where: str) -> None:
        self.durability = durability
        self._send = send
        self._where = where
        self._waiting: list[tuple[defer.Deferred[Any], Any]] = []
        self._asking = False
        self.alone = False  # the master has no replica connected: it acknowledges alone
        self._behind = False  # a replica is connected but did not acknowledge within the timeout

    def covered(self, result: Any) -> defer.Deferred[Any]:
        """``result`` (a write's answer), once a replica (or the AOF) has the write."""
        d: defer.Deferred[Any] = defer.Deferred()
        self._waiting.append((d, result))
        if not self._asking:
            self._ask()
        return d

    def check_role(self) -> defer.Deferred[None]:
        """Ask ``ROLE`` whether a replica is connected (at each new connection, before any write)."""
        return self._send("ROLE").addCallback(self._role_known)

    def _role_known(self, role: Any) -> None:
        connected = replicas_connected(role)
        if connected < 0:
            raise Unacknowledged(f"Redis at {self._where} is not a master (ROLE: {_text(role[0])})")
        self._alone(connected == 0)

    def _ask(self) -> None:
        self._asking = True
        if self.alone:  # is a replica back? (ROLE first, then the wait it allows)
            d = self.check_role().addCallback(lambda _: self._wait())
        else:
            d = self._wait()
        d.addErrback(self._failed)

    def _wait(self) -> defer.Deferred[None]:
        replicas = 0 if self.alone else 1
        return self._send(*self.durability.ask(replicas)).addCallback(self._answered, replicas)

    def _answered(self, reply: Any, replicas: int) -> defer.Deferred[None] | None:
        if self.durability.enough(reply, replicas):
            if replicas and self._behind:
                self._behind = False
                log.info("Redis at {where}: its replica acknowledges writes again", where=self._where)
            self._release()
            return None
        return self.check_role().addCallback(self._short, replicas)

    def _short(self, _: None, replicas: int) -> defer.Deferred[None] | None:
        """A wait ended short: the replica left (acknowledged alone now) or is behind (waited for again)."""
        if replicas and not self.alone and not self._behind:
            self._behind = True
            log.warn("Redis at {where}: its replica has not acknowledged writes within {ms} ms; they wait for it "
                     "(redis_durability = {mode!r})", where=self._where, ms=self.durability.timeout_ms,
                     mode=self.durability.mode)
        return self._wait()

    def _alone(self, alone: bool) -> None:
        if alone and not self.alone:
            log.warn("Redis at {where} has no replica connected: its writes are acknowledged without one "
                     "(redis_durability = {mode!r}) until one is back", where=self._where, mode=self.durability.mode)
        elif self.alone and not alone:
            log.info("Redis at {where}: a replica is connected again", where=self._where)
        self.alone = alone

    def _release(self) -> None:
        waiting, self._waiting = self._waiting, []
        self._asking = False
        for d, result in waiting:
            d.callback(result)

    def _failed(self, failure: Failure) -> None:
        self.lost(failure.getErrorMessage())

    def lost(self, why: str) -> None:
        """The connection ended (or the master was demoted): every write waiting is unacknowledged."""
        waiting, self._waiting = self._waiting, []
        self._asking = False
        for d, _ in waiting:
            d.errback(Unacknowledged(f"Redis at {self._where}: a write was answered but not acknowledged "
                                     f"(redis_durability = {self.durability.mode!r}): {why}"))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
