"""Access to the machine's Redis and MariaDB: skip with a reason where absent, fail under SPIDERD_REQUIRE_SERVICES=1."""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest
from twisted.internet import defer

REDIS = ("127.0.0.1", int(os.environ.get("SPIDERD_TEST_REDIS_PORT", "6379")))
MYSQL = {
    "host": os.environ.get("SPIDERD_TEST_MYSQL_HOST", "127.0.0.1"),
    "port": int(os.environ.get("SPIDERD_TEST_MYSQL_PORT", "3306")),
    "user": os.environ.get("SPIDERD_TEST_MYSQL_USER", "root"),
    "password": os.environ.get("SPIDERD_TEST_MYSQL_PASSWORD", ""),
    "database": os.environ.get("SPIDERD_TEST_MYSQL_DB", "test"),
}


def required() -> bool:
    """True when the services must be there (CI sets SPIDERD_REQUIRE_SERVICES=1)."""
    return os.environ.get("SPIDERD_REQUIRE_SERVICES") == "1"


def _unavailable(what: str, error: Exception) -> None:
    message = f"{what} is not reachable ({error}); start it or unset SPIDERD_REQUIRE_SERVICES"
    if required():
        pytest.fail(message)
    pytest.skip(f"{what} is not reachable ({error})")


def need_redis() -> tuple[str, int]:
    """The (host, port) of a Redis that answers PING, or skip/fail."""
    try:
        with socket.create_connection(REDIS, timeout=2) as s:
            s.sendall(b"PING\r\n")
            if not s.recv(16).startswith(b"+PONG"):
                raise OSError("no PONG")
    except OSError as e:
        _unavailable(f"Redis at {REDIS[0]}:{REDIS[1]}", e)
    return REDIS


def need_mysql() -> dict[str, object]:
    """Connection arguments of a MariaDB/MySQL that accepts them, or skip/fail."""
    try:
        import pymysql

        pymysql.connect(connect_timeout=2, **MYSQL).close()  # type: ignore[arg-type]
    except Exception as e:  # pymysql raises OperationalError, socket errors, ...
        _unavailable(f"MySQL at {MYSQL['host']}:{MYSQL['port']}", e)
    return dict(MYSQL)


def mysql_url(database: str | None = None) -> str:
    """A spiderd store URL for the test MariaDB."""
    m = need_mysql()
    auth = m["user"] + (f":{m['password']}" if m["password"] else "")
    return f"mysql://{auth}@{m['host']}:{m['port']}/{database or m['database']}"


def need_redis_cluster_tools() -> None:
    """redis-server and redis-cli on PATH (a test starts its own Redis Cluster with them), or skip/fail."""
    from .rediscluster import available

    missing = available()
    if missing is not None:
        _unavailable("a Redis Cluster", OSError(missing))


CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def need_chromium() -> None:
    """Debian's Chromium and chromedriver and the selenium package, or skip/fail (.ci/run installs them)."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package (pip install '.[test]')")
    if missing:
        _unavailable("a headless browser", OSError(f"missing {', '.join(missing)}; "
                                                   "apt-get install -y chromium chromium-driver"))


def need_playwright() -> str:
    """Debian's Chromium and the playwright package (``spiderd[render]``), or skip/fail; the browser's path."""
    missing = [] if os.access(CHROMIUM, os.X_OK) else [f"{CHROMIUM} (apt-get install -y chromium)"]
    try:
        import playwright  # noqa: F401
    except ImportError:
        missing.append("the playwright package (pip install '.[render]')")
    if missing:
        _unavailable("a browser to render pages", OSError(f"missing {', '.join(missing)}"))
    return CHROMIUM


@defer.inlineCallbacks
def delete_redis_keys(redis_url: str, pattern: str) -> Any:
    """Delete the keys of the Redis at ``redis_url`` that match ``pattern`` (a test's own key space)."""
    from spiderd.frontier.pool.redis.link import RedisLink, parse_redis_url

    admin = RedisLink(parse_redis_url(redis_url))
    try:
        cursor, found = "0", set()
        while True:
            cursor, batch = yield admin.execute("SCAN", cursor, "MATCH", pattern, "COUNT", "1000")
            found.update(batch)
            if cursor == "0":
                break
        if found:
            yield admin.execute("DEL", *found)
    finally:
        yield admin.close()
