"""The connection to Redis: ``redis://`` URLs, connecting, Lua scripts (a function library and FCALL on Redis 7;
EVALSHA, EVAL on NOSCRIPT before), clear errors.

txredisapi is imported only when a connection is opened: importing it
installs the default reactor, so no module that the twistd plugin or
``spiderd.tap`` imports at import time may import it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Iterable, Protocol, Sequence
from urllib.parse import unquote, urlsplit

from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from spiderd.core.secrets import mask_secret, redact
from spiderd.frontier.pool.redis.durability import NONE, Acknowledger, Durability, writes_command, writes_script
from spiderd.frontier.pool.redis.errors import RedisPoolError, RedisReplyError, Unacknowledged

log = Logger()

__all__ = ["Link", "RedisAddress", "RedisLink", "RedisPoolError", "RedisReplyError", "Script", "Unacknowledged",
           "load_scripts", "parse_redis_url"]

SCRIPTS = ("add", "pop", "status", "claim", "seen", "hubs", "next_due", "stats", "why", "hosts", "seeds",
           "restore", "recrawl", "links", "group", "batched")
PAIRS = {"statuspop": ("status", "pop")}  # two scripts run in one call: the statuses waiting go out with a pop


class Link(Protocol):
    """What a pool sends through: scripts and commands to one Redis (RedisLink) or to one slot of a cluster."""

    def open(self) -> defer.Deferred[None]: ...

    def run(self, script: Script, args: Sequence[Any]) -> defer.Deferred[Any]: ...

    def execute(self, *args: Any) -> defer.Deferred[Any]: ...

    def close(self) -> defer.Deferred[None]: ...


@dataclass(frozen=True, slots=True)
class RedisAddress:
    """Where Redis is: ``redis://[:password@]host:port/db``."""

    host: str
    port: int
    db: int
    password: str | None = field(default=None, repr=False)

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_redis_url(url: str) -> RedisAddress:
    """Parse ``redis://[[user]:password@]host[:port][/db]``; a bad URL raises ValueError without the password."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 6379
        db = int(parts.path.strip("/") or 0)
    except ValueError:
        raise ValueError(f"not a valid Redis URL: {redact(url)!r}") from None
    if parts.scheme != "redis":
        raise ValueError(f"not a redis:// URL: {redact(url)!r}")
    password = unquote(parts.password) if parts.password else None
    return RedisAddress(host, port, db, password)


@dataclass(frozen=True, slots=True)
class Script:
    """A Lua script with the shared prelude; ``sha`` is what EVALSHA takes.  ``function`` is its name in
    ``library``, the function library of every script (Redis 7: FUNCTION LOAD once per server, then FCALL)."""

    name: str
    source: str
    sha: str
    function: str = ""
    library: str = field(default="", repr=False)


def load_scripts() -> dict[str, Script]:
    """The pool's scripts, each prefixed with ``common.lua`` (as EVAL scripts) and together as one library whose
    prelude runs once, when loaded; its name carries a digest of its code, so nodes of two versions sharing a
    Redis each call their own."""
    folder = resources.files(__package__)
    common = folder.joinpath("common.lua").read_text()
    bodies = {name: folder.joinpath(f"{name}.lua").read_text() for name in SCRIPTS}
    code = common + "".join(_body(name, body) + _registered(name, f"return body_{name}(ARGV)")
                            for name, body in bodies.items())
    code += "".join(_registered(name, _pair(first, second)) for name, (first, second) in PAIRS.items())
    lib = "spiderd_" + hashlib.sha1(code.encode()).hexdigest()[:16]
    library = f"#!lua name={lib}\n" + code.replace("{lib}", lib)
    scripts = {}
    for name, body in bodies.items():
        source = common + _body(name, body) + f"\nreturn body_{name}(ARGV)\n"  # as EVAL: the same function, called
        scripts[name] = Script(name, source, hashlib.sha1(source.encode()).hexdigest(), f"{lib}_{name}", library)
    for name, (first, second) in PAIRS.items():
        source = common + _body(first, bodies[first]) + _body(second, bodies[second]) + _pair(first, second)
        scripts[name] = Script(name, source, hashlib.sha1(source.encode()).hexdigest(), f"{lib}_{name}", library)
    return scripts


PER_CALL = "\n-- (per call)\n"  # a script's definitions above this line (built once per library), its call below


def _body(name: str, body: str) -> str:
    """A script's body as a local function of the library (each its own closure: Lua 5.1 allows 60 upvalues).  The
    part of a body above a line ``-- (per call)`` (its local functions and state) is built once, when the library is
    loaded (where only ``redis`` exists: the globals are bound by the first begin()), in a block of its own (Lua 5.1
    allows 200 locals a function); the part below it runs at every call."""
    defs, _, call = body.rpartition(PER_CALL)
    return f"\nlocal body_{name}\ndo\n{defs}\nfunction body_{name}(ARGV)\nbegin(ARGV)\n{call}\nend\nend\n"


def _registered(name: str, block: str) -> str:
    return f"\nredis.register_function('{{lib}}_{name}', function(KEYS, ARGV)\n{block}\nend)\n"


def _pair(first: str, second: str) -> str:
    """Two scripts in one call, the first run first: ARGV[7] says how many of the arguments after it are the
    first's, the rest the second's (both given the common six); answers {first's answer, second's answer}."""
    return (f"\nlocal first = body_{first}(split_call(ARGV, 1))\n"
            f"return {{first, body_{second}(split_call(ARGV, 2))}}\n")


class RedisLink:
    """One pipelined connection: fails fast with a clear error when Redis is gone, reconnects on the next call.

    A command that was never sent (the connection was already gone) is sent
    again once reconnected; one that was in flight when the connection broke
    fails, because Redis may have run it.
    """

    def __init__(
        self,
        address: RedisAddress,
        scripts: Iterable[Script] = (),
        *,
        connect_timeout: float = 10.0,
        reply_timeout: float = 30.0,
        durability: Durability = NONE,
    ) -> None:
        """``durability``: when a write is answered (``[pool] redis_durability``, :mod:`.durability`)."""
        self.address = address
        self.durability = durability
        self._acks: Acknowledger | None = None  # the connection's writes waiting for a replica
        self._scripts = tuple(scripts)
        self._connect_timeout = connect_timeout
        self._reply_timeout = reply_timeout
        self._conn: Any = None
        self._waiters: list[defer.Deferred[Any]] = []
        self._inflight: set[defer.Deferred[Any]] = set()
        self._closers: list[defer.Deferred[None]] = []
        self._closed = False
        self._functions = False  # Redis has functions (7.0 on) and the library is loaded: FCALL

    def open(self) -> defer.Deferred[None]:
        """Connect (loading the scripts, so EVALSHA finds them); fails with RedisPoolError."""
        return self._connection().addCallback(lambda _: None)

    def run(self, script: Script, args: Sequence[Any], keys: Sequence[str] = ()) -> defer.Deferred[Any]:
        """Run ``script`` with ``args`` (and ``keys``, which a cluster routes by): FCALL where Redis has functions
        (loading the library again if Redis lost it), else EVALSHA, falling back to EVAL when Redis lost it."""
        if self._conn is None and not self._closed:  # which of the two is known once connected
            d = self._connection().addCallback(lambda _: self._call(script, args, keys))
        else:
            d = self._call(script, args, keys)
        if self.durability.on and writes_script(script.name):
            d.addCallback(self._acknowledged)
        return self._track(d.addErrback(self._wrap))

    def _call(self, script: Script, args: Sequence[Any], keys: Sequence[str]) -> defer.Deferred[Any]:
        if self._functions and script.function:
            d = self._send("FCALL", script.function, len(keys), *keys, *args)
            return d.addErrback(self._nofunction, script, args, keys)
        return self._send("EVALSHA", script.sha, len(keys), *keys, *args).addErrback(self._noscript, script, args, keys)

    def execute(self, *args: Any) -> defer.Deferred[Any]:
        """Run one Redis command."""
        d = self._send(*args)
        if self.durability.on and writes_command(args):
            d.addCallback(self._acknowledged)
        return self._track(d.addErrback(self._wrap))

    def _acknowledged(self, result: Any) -> defer.Deferred[Any]:
        """A write's answer, once the connection's Acknowledger says a replica (or the AOF) has it."""
        if self._acks is None:
            raise Unacknowledged(f"Redis at {self.address}: the connection ended before a replica acknowledged "
                                 "a write")
        return self._acks.covered(result)

    def close(self) -> defer.Deferred[None]:
        """Let the commands on their way finish, then disconnect; later calls fail."""
        self._closed = True
        closed: defer.Deferred[None] = defer.Deferred()
        self._closers.append(closed)
        if not self._inflight:
            self._disconnect()
        return closed

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        closers, self._closers = self._closers, []
        d = conn.disconnect() if conn is not None else defer.succeed(None)

        def disconnected(_: object) -> None:
            for closed in closers:
                closed.callback(None)

        d.addBoth(disconnected)

    def _track(self, d: defer.Deferred[Any]) -> defer.Deferred[Any]:
        self._inflight.add(d)
        return d.addBoth(self._untrack, d)

    def _untrack(self, result: Any, d: defer.Deferred[Any]) -> Any:
        self._inflight.discard(d)
        if not self._inflight and self._closers:
            self._disconnect()
        return result

    # -- internals ------------------------------------------------------------------

    def _send(self, *args: Any) -> defer.Deferred[Any]:
        if self._conn is None:
            return self._connection().addCallback(lambda conn: conn.execute_command(*args))
        d: defer.Deferred[Any] = self._conn.execute_command(*args)  # (txredisapi is untyped)
        d.addErrback(self._unsent, args)
        return d

    def _unsent(self, failure: Failure, args: tuple[Any, ...]) -> Any:
        """A command that found the connection gone was not sent: reconnect and send it once."""
        import txredisapi

        if failure.check(txredisapi.ConnectionError) and str(failure.value) == "Not connected":
            self._forget()
            return self._connection().addCallback(lambda conn: conn.execute_command(*args))
        return failure

    def _noscript(self, failure: Failure, script: Script, args: Sequence[Any], keys: Sequence[str]) -> Any:
        import txredisapi

        if failure.check(txredisapi.ResponseError) and str(failure.value).startswith("NOSCRIPT"):
            log.info("Redis at {address} lost script {name}: sending it again", address=str(self.address), name=script.name)
            return self._send("EVAL", script.source, len(keys), *keys, *args)
        return failure

    def _nofunction(self, failure: Failure, script: Script, args: Sequence[Any], keys: Sequence[str]) -> Any:
        import txredisapi

        if failure.check(txredisapi.ResponseError) and "Function not found" in str(failure.value):
            log.info("Redis at {address} lost the function library: loading it again", address=str(self.address))
            d = self._send("FUNCTION", "LOAD", "REPLACE", script.library)
            return d.addCallback(lambda _: self._send("FCALL", script.function, len(keys), *keys, *args))
        return failure

    def _wrap(self, failure: Failure) -> Failure:
        import txredisapi

        if failure.check(RedisPoolError):
            return failure
        if failure.check(txredisapi.ConnectionError):
            self._forget()
            what = "timed out" if failure.check(txredisapi.TimeoutError) else "connection lost"
            raise RedisPoolError(f"Redis at {self.address}: {what}: {self._scrub(failure)}")
        if failure.check(txredisapi.ResponseError):
            reply = self._scrub(failure)
            raise RedisReplyError(f"Redis at {self.address}: {reply}", reply)
        raise RedisPoolError(f"Redis at {self.address}: {self._scrub(failure)}")

    def _forget(self) -> None:
        """Drop the connection after a command on it failed for the connection's sake (lost, or a reply timed
        out: txredisapi then aborts it); ``disconnect()`` closes whatever is left of it, and the next command
        connects again."""
        conn, self._conn = self._conn, None
        acks, self._acks = self._acks, None
        if acks is not None:
            acks.lost("the connection ended")
        if conn is None:
            return
        try:
            closed = conn.disconnect()
        except Exception:  # already gone ("Not connected")
            return
        if isinstance(closed, defer.Deferred):
            closed.addErrback(lambda _: None)

    def _connection(self) -> defer.Deferred[Any]:
        if self._closed:
            return defer.fail(RedisPoolError(f"Redis at {self.address}: the pool is closed"))
        if self._conn is not None:
            return defer.succeed(self._conn)
        waiter: defer.Deferred[Any] = defer.Deferred()
        self._waiters.append(waiter)
        if len(self._waiters) == 1:
            self._connect().addBoth(self._connected)
        return waiter

    def _connect(self) -> defer.Deferred[Any]:
        import txredisapi

        a = self.address
        d: defer.Deferred[Any] = txredisapi.Connection(
            a.host, a.port, dbid=a.db, password=a.password, reconnect=False, convertNumbers=False,
            connectTimeout=self._connect_timeout, replyTimeout=self._reply_timeout,
        )

        def failed(failure: Failure) -> None:
            raise RedisPoolError(f"Redis at {a}: cannot connect: {self._scrub(failure)}")

        return d.addCallbacks(self._load_scripts, failed)

    def _load_scripts(self, conn: Any) -> defer.Deferred[Any]:
        """On a new connection (Redis may have restarted), FUNCTION LOAD the library (one already there of the same
        name is the same code), or on a Redis without functions (before 7.0) SCRIPT LOAD every script; fires with
        the connection."""
        libraries = {script.library for script in self._scripts if script.library}
        loads = [conn.execute_command("FUNCTION", "LOAD", library).addErrback(self._loaded)
                 for library in libraries]
        d = defer.gatherResults(loads, consumeErrors=True)
        d.addCallback(lambda answers: self._eval_scripts(conn, all(answers)))
        d.addCallback(self._acknowledging)

        def failed(failure: Failure) -> Failure:
            conn.disconnect()
            return failure.value.subFailure if isinstance(failure.value, defer.FirstError) else failure

        return d.addErrback(failed).addErrback(self._wrap)

    def _acknowledging(self, conn: Any) -> defer.Deferred[Any]:
        """The new connection's Acknowledger (with a durability: ROLE tells whether a replica is there; with "aof",
        ``WAITAOF 1 0`` whether this Redis has it and its AOF on); fires with the connection."""
        acks = Acknowledger(self.durability, lambda *args: conn.execute_command(*args), str(self.address))
        if not self.durability.on:
            self._acks = acks
            return defer.succeed(conn)
        d = acks.check_role().addErrback(lambda _: None)  # not a master: its writes will say so
        if self.durability.mode == "aof":
            d.addCallback(lambda _: conn.execute_command("WAITAOF", "1", "0", str(self.durability.timeout_ms)))
            d.addErrback(self._no_waitaof)

        def ready(_: object) -> Any:
            self._acks = acks
            return conn

        return d.addCallback(ready)

    def _no_waitaof(self, failure: Failure) -> None:
        raise RedisPoolError(f"Redis at {self.address}: redis_durability = \"aof\" needs WAITAOF (Redis 7.2 or later) "
                             f"and appendonly yes: {self._scrub(failure)}")

    @staticmethod
    def _loaded(failure: Failure) -> bool | Failure:
        """A library already there is ours (its name is its code's digest); a Redis without functions says so."""
        message = str(failure.value)
        if "already exists" in message:
            return True
        if "unknown command" in message.lower():
            return False
        return failure

    def _eval_scripts(self, conn: Any, functions: bool) -> defer.Deferred[Any]:
        self._functions = functions and any(script.library for script in self._scripts)
        if self._functions:
            return defer.succeed(conn)
        loads = [conn.execute_command("SCRIPT", "LOAD", script.source) for script in self._scripts]
        return defer.gatherResults(loads, consumeErrors=True).addCallback(lambda _: conn)

    def _connected(self, result: Any) -> None:
        if not isinstance(result, Failure):
            if self._closed:
                result.disconnect()
                result = Failure(RedisPoolError(f"Redis at {self.address}: the pool is closed"))
            else:
                self._conn = result
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.callback(result) if not isinstance(result, Failure) else waiter.errback(result)

    def _scrub(self, failure: Failure) -> str:
        message = failure.getErrorMessage()
        return mask_secret(message, self.address.password)
