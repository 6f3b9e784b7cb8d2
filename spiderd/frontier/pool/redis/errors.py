"""The Redis pool's errors: each names host:port, never the password."""

from __future__ import annotations

from spiderd.contracts.pool import PoolUnavailable


class RedisPoolError(PoolUnavailable):
    """Redis could not be reached or answered with an error; the message names host:port, never the password."""


class RedisReplyError(RedisPoolError):
    """Redis answered with an error (``reply``: its text, e.g. ``MOVED 3999 127.0.0.1:7002``); the connection is fine."""

    def __init__(self, message: str, reply: str) -> None:
        super().__init__(message)
        self.reply = reply


class Unacknowledged(RedisPoolError):
    """A write its master answered, not seen on a replica (or in the AOF: ``[pool] redis_durability``) before the
    connection ended or the master was demoted: it may be lost, so it is sent again."""
