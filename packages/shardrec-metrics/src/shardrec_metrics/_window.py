"""Sums over the last `size` samples of one rank, exact to the sample.

The window keeps the recent batches' per-sample values as they arrived, with each batch's sum:

    batches   [ b0: 5 samples ][ b1: 5 ][ b2: 5 ]      size = 8
    window            skip=2 ->[...3 of b1][ b2 ]

so after batches of 5, 5 and 5 a window of 8 holds 3 samples of b1 (TorchRec's drops whole
batches). Batches wholly before the window are released; the oldest kept batch may lie partly
outside, so memory is at most `size` samples plus one batch. Nothing is copied on update.
"""

from __future__ import annotations

import collections

import torch
from torch import Tensor


class SampleWindow:
    """Column sums of the most recent `size` samples appended as `(C, N)` batches."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._batches: collections.deque[tuple[Tensor, Tensor]] = collections.deque()
        self._held = 0  # samples in the kept batches
        self._skip = 0  # leading samples of the oldest kept batch that are outside the window

    def __len__(self) -> int:
        return self._held - self._skip

    def clear(self) -> None:
        self._batches.clear()
        self._held = 0
        self._skip = 0

    def append(self, values: Tensor, sums: Tensor) -> None:
        """Add `values: (C, N)` as the newest N samples; `sums: (C,)` is `values.sum(1)`."""
        n = values.shape[1]
        if n == 0:
            return
        self._batches.append((values, sums))
        self._held += n
        excess = len(self) - self.size
        while excess > 0:
            oldest = self._batches[0][0].shape[1]
            inside = oldest - self._skip
            if excess < inside:
                self._skip += excess
                break
            self._batches.popleft()
            self._held -= oldest
            self._skip = 0
            excess -= inside

    def sums(self, columns: int) -> Tensor:
        """(C,) float64 sums over the window's samples, on the batches' device."""
        if not self._batches:
            return torch.zeros(columns, dtype=torch.float64)
        first, first_sums = self._batches[0]
        parts = [first[:, self._skip :].sum(dim=1) if self._skip else first_sums]
        parts += [s for _, s in list(self._batches)[1:]]
        return torch.stack(parts).sum(dim=0)
