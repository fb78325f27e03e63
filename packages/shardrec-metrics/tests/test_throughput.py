"""Throughput with an injected clock: lifetime rate, sliding window, reset."""

from __future__ import annotations

import pytest

from shardrec_metrics import Throughput


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_lifetime_and_window_rates() -> None:
    clock = FakeClock()
    tp = Throughput(window_seconds=10.0, clock=clock)
    assert tp.compute() == {"throughput/lifetime": 0.0, "throughput/window": 0.0}
    for _ in range(20):  # 1000 samples every second for 20 s
        clock.now += 1.0
        tp.update(1000)
    got = tp.compute()
    assert got["throughput/lifetime"] == pytest.approx(1000.0)
    # updates at t = 110..120 are within the last 10 s (inclusive edge): 11 of them
    assert got["throughput/window"] == pytest.approx(11 * 1000 / 10)


def test_window_shorter_than_run_and_idle_time() -> None:
    clock = FakeClock()
    tp = Throughput(window_seconds=5.0, clock=clock)
    clock.now += 2.0
    tp.update(400)
    got = tp.compute()
    # 2 s elapsed: the window spans only those 2 s
    assert got == {"throughput/lifetime": 200.0, "throughput/window": 200.0}
    clock.now += 30.0  # idle: the window empties, the lifetime rate decays
    got = tp.compute()
    assert got["throughput/window"] == 0.0
    assert got["throughput/lifetime"] == pytest.approx(400 / 32)


def test_reset_restarts_the_clock() -> None:
    clock = FakeClock()
    tp = Throughput(clock=clock)
    clock.now += 4.0
    tp.update(100)
    tp.reset()
    clock.now += 1.0
    tp.update(50)
    assert tp.compute()["throughput/lifetime"] == pytest.approx(50.0)


def test_real_clock_gives_a_positive_rate() -> None:
    tp = Throughput()
    tp.update(10)
    got = tp.compute()
    assert got["throughput/lifetime"] > 0 and got["throughput/window"] > 0
