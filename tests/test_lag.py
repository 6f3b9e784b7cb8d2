"""The reactor's lag on an injected clock: samples, the status summary, the metric."""

from __future__ import annotations

from twisted.internet.task import Clock

from spiderd.ops.lag import ReactorLag


def test_a_late_timer_is_lag_and_an_early_one_is_none() -> None:
    clock = Clock()
    seen: list[float] = []
    lag = ReactorLag(clock, interval=0.05, window=10.0, observe=seen.append)
    lag.start()
    for _ in range(98):
        clock.advance(0.05)  # on time
    clock.advance(0.35)  # the reactor was held: this sample ran 0.3 s late
    clock.advance(0.05)
    assert [round(s, 6) for s in seen[-2:]] == [0.3, 0.0]
    summary = lag.summary()
    assert summary["samples"] == 100
    assert (summary["p50_ms"], summary["p99_ms"], summary["max_ms"]) == (0.0, 300.0, 300.0)


def test_the_summary_covers_the_window_only() -> None:
    clock = Clock()
    lag = ReactorLag(clock, interval=0.05, window=10.0)
    lag.start()
    clock.advance(1.05)  # one sample, 1 s late
    assert lag.summary()["max_ms"] == 1000.0
    for _ in range(300):
        clock.advance(0.05)
    assert lag.summary()["max_ms"] == 0.0
    lag.stop()
    assert clock.getDelayedCalls() == []
