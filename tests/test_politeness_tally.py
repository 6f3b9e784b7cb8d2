"""Politeness counts its active hosts, files them by waiting URLs and finds its idle and blocked ones as they
change, and agrees with a look at every host."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from spiderd.engine.politeness import Politeness

HOSTS = [f"h{i}.example" for i in range(4)]
STEPS = st.lists(st.tuples(st.sampled_from(["add", "pop", "release", "drop", "group", "collect", "tick", "block"]),
                           st.integers(0, len(HOSTS) - 1), st.integers(0, 3)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(STEPS)
@example([("add", 0, 0), ("pop", 0, 0), ("drop", 0, 3), ("collect", 0, 0), ("release", 0, 0), ("tick", 0, 3),
          ("collect", 0, 0)])  # the last URL ends after a collect: found idle at its release
@example([("group", 0, 1), ("group", 1, 1), ("group", 0, 2), ("collect", 0, 0), ("group", 1, 0),
          ("collect", 0, 0)])  # a group left by its hosts one by one goes
def test_tally_agrees_with_a_scan(steps: list[tuple[str, int, int]]) -> None:
    """After any steps, active_hosts counts the hosts with waiting URLs, top and attention give what a look at
    every host gives (ties aside), and collect forgets exactly the hosts with nothing waiting, nothing in flight
    and no pending delay, and the groups none of its hosts is in."""
    politeness = Politeness(delay=1.0, concurrency=2)
    now = 0.0
    for op, n, arg in steps:
        host = HOSTS[n]
        slot = politeness.slot(host)
        if op == "add":
            slot.waiting += arg + 1
            politeness.requeue(slot)
        elif op == "pop" and slot.waiting and slot.inflight < slot.concurrency:
            politeness.taken(slot, 1, now)
        elif op == "release":
            politeness.release(slot)
        elif op == "drop":
            slot.waiting = max(0, slot.waiting - arg)
        elif op == "group":
            politeness.set_group(host, f"10.0.0.{arg}" if arg else host)
        elif op == "tick":
            now += arg / 2
        elif op == "block":
            politeness.block(slot, now + arg)
        elif op == "collect":
            idle = {h for h, s in politeness.hosts.items()
                    if not s.waiting and not s.own_inflight and s.next_allowed <= now}
            kept = set(politeness.hosts) - idle
            politeness.collect(now)
            assert set(politeness.hosts) == kept
            used = {id(s.group) for s in politeness.hosts.values() if s.group is not None}
            assert {id(g) for g in politeness._groups.values()} == used
        assert politeness.active_hosts() == sum(1 for s in politeness.hosts.values() if s.waiting)
        slots = list(politeness.hosts.values())
        for count in (1, 3, 10):
            assert [w for _, w in politeness.top(count)] == sorted((s.waiting for s in slots if s.waiting),
                                                                      reverse=True)[:count]
            key = lambda s: (s.throttled_until if s.throttled_until > now else 0.0, s.waiting)  # noqa: E731
            wanted = sorted((key(s) for s in slots if s.waiting or s.throttled_until > now), reverse=True)[:count]
            assert [key(s) for s in politeness.attention(count, now)] == wanted
