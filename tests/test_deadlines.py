"""spiderd.core.deadlines: keys held until a deadline, expired earliest first."""

from __future__ import annotations

from spiderd.core.deadlines import Deadlines


def test_keys_expire_at_their_deadline_earliest_first() -> None:
    """A key is held until its deadline is reached; expire returns the keys gone, earliest deadline first."""
    table: Deadlines[str] = Deadlines()
    table.set("b", 20.0)
    table.set("a", 10.0)
    assert table.expire(9.9) == [] and "a" in table
    assert table.expire(20.0) == ["a", "b"]
    assert len(table) == 0 and table.get("a") is None


def test_a_key_set_again_keeps_only_its_last_deadline() -> None:
    """Setting a key again moves its deadline (earlier or later); its old deadline expires nothing."""
    table: Deadlines[str] = Deadlines()
    table.set("a", 10.0)
    table.set("a", 30.0)
    assert table.expire(15.0) == [] and table.get("a") == 30.0
    table.set("a", 5.0)
    assert table.expire(6.0) == ["a"]
    assert table.expire(100.0) == []


def test_stale_entries_do_not_pile_up() -> None:
    """A key set again and again keeps the heap within a bound of the keys held."""
    table: Deadlines[int] = Deadlines()
    for n in range(10_000):
        table.set(n % 3, float(n))
    assert len(table) == 3 and len(table._heap) <= 2 * 3 + 64
    assert sorted(table.expire(1e9)) == [0, 1, 2]
