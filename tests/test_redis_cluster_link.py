"""The client that follows a real Redis Cluster: slots, MOVED, ASK, NOSCRIPT, a master down and back."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any, Generator

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent
from twisted.trial.unittest import TestCase

from spiderd.frontier.pool.redis.cluster import (ClusterLink, SlotUnavailable, crc16, key_slot, parse_cluster_url)
from spiderd.frontier.pool.redis.link import RedisAddress, RedisPoolError, Script

from .clusterkeys import ClusterCase, settle

Gen = Generator[Any, Any, None]
ECHO_SOURCE = "return {KEYS[1], ARGV[1], redis.call('INCR', KEYS[1])}"
ECHO = Script("echo", ECHO_SOURCE, hashlib.sha1(ECHO_SOURCE.encode()).hexdigest())
ECHO_LIBRARY = ("#!lua name=echo_lib\nredis.register_function('echo_f', function(KEYS, ARGV) "
                "return {KEYS[1], ARGV[1], redis.call('INCR', KEYS[1])} end)\n")
ECHO_FCALL = Script("echo", ECHO.source, ECHO.sha, "echo_f", ECHO_LIBRARY)  # the same, as a Redis 7 function


def test_key_slots_follow_redis() -> None:
    """CRC16-XMODEM of the key or of its hash tag, modulo 16384, as Redis computes it."""
    assert crc16(b"123456789") == 0x31C3
    assert key_slot("foo") == 12182  # CLUSTER KEYSLOT foo
    assert key_slot("{user1000}.following") == key_slot("{user1000}.followers") == key_slot("user1000")
    assert key_slot("foo{}{bar}") == key_slot("foo{}{bar}")  # an empty tag: the whole key
    assert key_slot("foo{}{bar}") != key_slot("bar")


def test_cluster_urls_parse_without_showing_the_password() -> None:
    """Seed nodes with a shared password; a bad URL's error hides the password."""
    seeds = parse_cluster_url("redis+cluster://:s3cret@127.0.0.1:7000,10.0.0.2:7001/")
    assert [(s.host, s.port, s.password) for s in seeds] == [("127.0.0.1", 7000, "s3cret"), ("10.0.0.2", 7001, "s3cret")]
    with pytest.raises(ValueError) as e:
        parse_cluster_url("redis+cluster://:s3cret@127.0.0.1,10.0.0.2:7001/")
    assert "s3cret" not in str(e.value)


class ClusterLinkTests(ClusterCase, TestCase):
    """One ClusterLink over the three masters of a real cluster."""

    def setUp(self) -> None:
        super().setUp()
        self.clock = Clock()
        self.tag = uuid.uuid4().hex[:8]
        self.link = self.make_link()

    def make_link(self) -> ClusterLink:
        seeds = [RedisAddress("127.0.0.1", self.cluster.ports[0], 0)]
        link = ClusterLink(seeds, [ECHO], self.clock, reply_timeout=10)
        self.addCleanup(link.close)
        return link

    def key_on(self, master: int) -> str:
        """A key of this test whose slot the given master serves."""
        n = 0
        while True:
            key = f"t{self.tag}:{n}"
            if self.cluster.master_of(key_slot(key)) == master:
                return key
            n += 1

    @defer.inlineCallbacks
    def test_commands_and_scripts_reach_every_master(self) -> Gen:
        """From one seed, commands and scripts of keys on each master answer (the slot map sends them there)."""
        yield self.link.open()
        for master in range(3):
            key = self.key_on(master)
            assert (yield self.link.run(key, ECHO, ["a"])) == [key, "a", 1]
            assert (yield self.link.execute(key_slot(key), "INCRBY", key, "10")) == 11
            assert self.link.master(key_slot(key)).port == self.cluster.ports[master]  # type: ignore[union-attr]
            assert self.cluster.cli(self.cluster.ports[master], "GET", key) == "11"

    @defer.inlineCallbacks
    def test_moved_is_followed_and_remembered(self) -> Gen:
        """A stale map (every slot on master 0) is corrected by MOVED: the command lands on the right master."""
        yield self.link.open()
        key = self.key_on(2)
        self.link._slots = [self.link.master(0)] * len(self.link._slots)
        assert (yield self.link.execute(key_slot(key), "SET", key, "moved")) == "OK"
        assert self.cluster.cli(self.cluster.ports[2], "GET", key) == "moved"
        assert self.link.master(key_slot(key)).port == self.cluster.ports[2]  # type: ignore[union-attr]

    @defer.inlineCallbacks
    def test_ask_during_a_migration_sends_asking(self) -> Gen:
        """A slot migrating from master 0 to 1: a new key goes to the importing master with ASKING."""
        yield self.link.open()
        key = self.key_on(0)
        slot = key_slot(key)
        source, target = self.cluster.ports[0], self.cluster.ports[1]
        ids = [self.cluster.cli(port, "CLUSTER", "MYID") for port in (source, target)]
        assert self.cluster.cli(target, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", ids[0]) == "OK"
        assert self.cluster.cli(source, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", ids[1]) == "OK"
        try:
            assert (yield self.link.execute(slot, "SET", key, "asked")) == "OK"
            assert self.cluster.cli(target, "CLUSTER", "COUNTKEYSINSLOT", str(slot)) == "1"
            assert self.cluster.cli(source, "CLUSTER", "COUNTKEYSINSLOT", str(slot)) == "0"
        finally:
            for port in (source, target):
                self.cluster.cli(port, "CLUSTER", "SETSLOT", str(slot), "NODE", ids[0])
            self.cluster.cli(target, "DEL", key)

    @defer.inlineCallbacks
    def test_noscript_loads_the_script_on_that_master(self) -> Gen:
        """A master that lost its scripts (SCRIPT FLUSH) gets the script again."""
        yield self.link.open()
        key = self.key_on(1)
        assert (yield self.link.run(key, ECHO, ["x"])) == [key, "x", 1]
        assert self.cluster.cli(self.cluster.ports[1], "SCRIPT", "FLUSH") == "OK"
        assert (yield self.link.run(key, ECHO, ["y"])) == [key, "y", 2]

    @defer.inlineCallbacks
    def test_every_master_gets_the_function_library(self) -> Gen:
        """A function whose key (KEYS[1]) is on any master runs there by FCALL; a master that lost the library
        (FUNCTION FLUSH) gets it again."""
        link = ClusterLink([RedisAddress("127.0.0.1", self.cluster.ports[0], 0)], [ECHO_FCALL], self.clock,
                           reply_timeout=10)
        self.addCleanup(link.close)
        keys = [self.key_on(master) for master in range(3)]
        assert (yield defer.gatherResults([link.run(k, ECHO_FCALL, ["x"]) for k in keys])) == [[k, "x", 1] for k in keys]
        assert self.cluster.cli(self.cluster.ports[2], "FUNCTION", "FLUSH") == "OK"
        assert (yield link.run(keys[2], ECHO_FCALL, ["y"])) == [keys[2], "y", 2]
        # the same answer would come from EVAL: the library back on that master shows the call was an FCALL
        assert "echo_lib" in self.cluster.cli(self.cluster.ports[2], "FUNCTION", "LIST", "LIBRARYNAME", "echo_lib")

    @defer.inlineCallbacks
    def test_a_master_down_is_logged_waited_for_and_used_again(self) -> Gen:
        """While a master is down its commands wait (tried again on the backoff) and a pop-like call fails at
        once; one warning names it; once it is back the waiting command runs there, nothing lost."""
        yield self.link.open()
        key, other = self.key_on(1), self.key_on(2)
        assert (yield self.link.run(key, ECHO, ["before"])) == [key, "before", 1]
        self.cluster.kill(1)
        with capturedLogs() as events:
            failed = self.link.execute(key_slot(key), "GET", key, wait=False)
            self.assertFailure(failed, RedisPoolError)  # the connection was lost under it
            yield failed
            waiting = self.link.run(key, ECHO, ["during"])
            answered: list[Any] = []
            waiting.addBoth(lambda result: answered.append(result) or result)
            yield settle(lambda: bool(self.clock.getDelayedCalls()), "a retry on the backoff")
            self.assertNoResult(waiting)
            assert (yield self.link.run(other, ECHO, ["elsewhere"])) == [other, "elsewhere", 1]
            fast = self.link.execute(key_slot(key), "GET", key, wait=False)
            self.assertFailure(fast, SlotUnavailable)
            yield fast
            self.cluster.restart(1)
            while not answered:
                self.clock.advance(5)
                yield settle(lambda: bool(answered or self.clock.getDelayedCalls()), "the retry")
            assert (yield waiting) == [key, "during", 2]
        text = [formatEvent(e) for e in events]
        down = [line for line in text if "is unavailable" in line]
        assert len(down) == 1 and f"127.0.0.1:{self.cluster.ports[1]}" in down[0], text
        assert any("answers again" in line for line in text), text

    @defer.inlineCallbacks
    def test_calls_that_do_not_wait_notice_a_master_back(self) -> Gen:
        """With only calls that do not wait (pops) for a master that was down, one a backoff step has it PINGed
        (the call itself fails at once, not held by a connection): once it answers they go to it again."""
        yield self.link.open()
        key = self.key_on(0)
        slot = key_slot(key)
        self.cluster.kill(0)
        lost = self.link.execute(slot, "GET", key, wait=False)
        self.assertFailure(lost, RedisPoolError)
        yield lost
        self.cluster.restart(0)
        early = self.link.execute(slot, "GET", key, wait=False)
        self.assertFailure(early, SlotUnavailable)  # within the backoff step: not tried
        yield early
        self.clock.advance(1)
        with capturedLogs() as events:
            probed = self.link.execute(slot, "GET", key, wait=False)
            self.assertFailure(probed, SlotUnavailable)  # a PING goes out instead
            yield probed
            yield settle(lambda: any("answers again" in formatEvent(e) for e in events), "the PING")
        assert (yield self.link.execute(slot, "SET", key, "back", wait=False)) == "OK"

    @defer.inlineCallbacks
    def test_readonly_is_tried_again_after_the_backoff(self) -> Gen:
        """A READONLY reply (a master demoted by a failover whose slot table still names it: seen in the fault
        suite's cluster-failover under load, where every later call got it for ten minutes) counts as an outage
        of that master: the map is asked again and the command tried again on the backoff; it is not handed back
        as the command's error."""
        from spiderd.frontier.pool.redis.errors import RedisReplyError

        yield self.link.open()
        key = self.key_on(1)
        slot = key_slot(key)
        master = self.link._link(self.link.master(slot))  # type: ignore[arg-type]
        real = master.execute

        def demoted(*args: Any) -> defer.Deferred[Any]:
            master.execute = real  # type: ignore[method-assign]
            reply = "READONLY You can't write against a read only replica."
            return defer.fail(RedisReplyError(f"Redis at {master}: {reply}", reply))

        master.execute = demoted  # type: ignore[method-assign]
        answered: list[Any] = []
        d = self.link.execute(slot, "SET", key, "after")
        d.addBoth(lambda result: answered.append(result) or result)
        while not answered:
            yield settle(lambda: bool(answered or self.clock.getDelayedCalls()), "a retry on the backoff")
            self.clock.advance(1)
        assert (yield d) == "OK" and self.cluster.cli(self.cluster.ports[1], "GET", key) == "after"

    @defer.inlineCallbacks
    def test_clusterdown_is_tried_again_after_the_backoff(self) -> Gen:
        """A slot its master stopped serving (CLUSTER DELSLOTS: CLUSTERDOWN) is tried again on the backoff (a pop-like
        call fails at once meanwhile), with one warning for the outage however many tries, and the command runs once
        the slot is served again, the end of the outage logged."""
        yield self.link.open()
        key = self.key_on(2)
        slot, port = key_slot(key), self.cluster.ports[2]
        assert self.cluster.cli(port, "CLUSTER", "DELSLOTS", str(slot)) == "OK"
        with capturedLogs() as events:
            try:
                answered: list[Any] = []
                d = self.link.execute(slot, "SET", key, "later")
                d.addBoth(lambda result: answered.append(result) or result)
                for _ in range(3):  # three tries, still down
                    yield settle(lambda: bool(answered or self.clock.getDelayedCalls()), "a retry on the backoff")
                    self.clock.advance(0.1 * 2 ** _)
                yield settle(lambda: bool(answered or self.clock.getDelayedCalls()), "a retry on the backoff")
                assert not answered
                fast = self.link.execute(slot, "GET", key, wait=False)
                self.assertFailure(fast, RedisPoolError)  # (SlotUnavailable, or CLUSTERDOWN once a backoff step)
                yield fast
            finally:
                assert self.cluster.cli(port, "CLUSTER", "ADDSLOTS", str(slot)) == "OK"
            while not answered:
                self.clock.advance(5)
                yield settle(lambda: bool(answered or self.clock.getDelayedCalls()), "the retry")
            assert (yield d) == "OK" and self.cluster.cli(port, "GET", key) == "later"
        text = [formatEvent(e) for e in events]
        warned = [e for e in events if e["log_level"].name == "warn"]
        assert len(warned) == 1 and "CLUSTERDOWN" in formatEvent(warned[0]), text
        assert any("answers again" in line and "CLUSTERDOWN" in line for line in text), text
