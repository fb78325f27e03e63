"""Throughput: samples per second over all ranks, since the start and over the last seconds.

The clock starts at construction or `reset`. `update(n)` records that this rank finished n
samples now. `compute` (a collective when distributed) sums the sample counts over ranks and
divides by this rank group's mean elapsed time, so every rank reports the same number:
lifetime = all samples / elapsed; window = samples recorded in the last `window_seconds` /
min(window_seconds, elapsed). Before any time has passed both are 0.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from shardrec_metrics._comm import all_reduce_sum, resolve_group


class Throughput:
    """Global samples/s, lifetime and over the last `window_seconds`.

    `clock` (seconds, monotonic) is injectable for tests; the default is `time.monotonic`.
    """

    name = "throughput"

    def __init__(
        self,
        *,
        window_seconds: float = 10.0,
        process_group: dist.ProcessGroup | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if (
            isinstance(window_seconds, bool)
            or not isinstance(window_seconds, int | float)
            or not math.isfinite(window_seconds)
            or window_seconds <= 0
        ):
            raise ValueError(f"window_seconds must be a positive number, got {window_seconds!r}")
        self.window_seconds = float(window_seconds)
        self.process_group = process_group
        self._clock = clock
        self._events: collections.deque[tuple[float, int]] = collections.deque()
        self.reset()

    def reset(self) -> None:
        """Restart the clock and forget every sample."""
        self._start = self._clock()
        self._total = 0
        self._window_total = 0
        self._events.clear()

    def update(self, num_samples: int) -> None:
        """Record that this rank finished `num_samples` samples (>= 0) just now."""
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 0:
            raise ValueError(f"num_samples must be an int >= 0, got {num_samples!r}")
        now = self._clock()
        self._total += num_samples
        self._window_total += num_samples
        self._events.append((now, num_samples))
        self._expire(now)

    def _expire(self, now: float) -> None:
        while self._events and self._events[0][0] < now - self.window_seconds:
            self._window_total -= self._events.popleft()[1]

    def compute(self) -> dict[str, float]:
        """`{"throughput/lifetime": s/s, "throughput/window": s/s}` summed over ranks."""
        now = self._clock()
        self._expire(now)
        elapsed = now - self._start
        values = torch.tensor(
            [float(self._total), float(self._window_total), elapsed, 1.0], dtype=torch.float64
        )
        group = resolve_group(self.process_group)
        if group is not None:
            values = all_reduce_sum(values, group)
        total, window_total, elapsed_sum, ranks = (float(v) for v in values.tolist())
        mean_elapsed = elapsed_sum / ranks
        window_span = min(self.window_seconds, mean_elapsed)
        return {
            "throughput/lifetime": total / mean_elapsed if mean_elapsed > 0 else 0.0,
            "throughput/window": window_total / window_span if window_span > 0 else 0.0,
        }
