"""Rank 0's progress bar (tqdm): step, samples/s over all ranks, and the loss."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm  # type: ignore[import-untyped]  # tqdm ships no type hints

LOSS_EVERY = 10
"""Read the loss (a device sync on GPU) every this many steps only."""


class Progress:
    """A tqdm bar on rank 0, nothing on the other ranks."""

    def __init__(self, *, enabled: bool, total: int, initial: int, samples_per_step: int) -> None:
        self._samples_per_step = samples_per_step
        self._bar: tqdm | None = None
        if enabled:
            self._bar = tqdm(
                total=total,
                initial=initial,
                desc="train",
                unit="step",
                file=sys.stdout,
                dynamic_ncols=True,
                mininterval=0.5,
            )
        self._since = time.perf_counter()
        self._steps_since = 0
        self._detail = ""

    def detail(self, text: str) -> None:
        """Extra text after the loss from the next loss reading on (the dynamic tables'
        counters)."""
        self._detail = text

    def step(self, step: int, loss: float | None) -> None:
        """One finished step; `loss` when it was read this step."""
        if self._bar is None:
            return
        self._steps_since += 1
        if loss is not None:
            elapsed = time.perf_counter() - self._since
            rate = self._steps_since * self._samples_per_step / max(elapsed, 1e-9)
            extra = f", {self._detail}" if self._detail else ""
            self._bar.set_postfix_str(
                f"{rate:,.0f} samples/s, loss {loss:.4f}{extra}", refresh=False
            )
        self._bar.update(1)

    def pause(self) -> None:
        """Restart the rate measurement after an evaluation or checkpoint."""
        self._since, self._steps_since = time.perf_counter(), 0

    def write(self, text: str) -> None:
        """Print above the bar (rank 0 only)."""
        if self._bar is not None:
            self._bar.write(text, file=sys.stdout)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
