"""Lifetime and window sums of per-sample columns, summed over ranks at compute time.

NE, log loss and accuracy are ratios of sums. The lifetime sums are running float64 totals; the
window keeps each recent sample's C float64 values (8 * C bytes per sample, for at most
`window_size` samples plus one batch) so that it is exact to the sample. One all_reduce of
2 * C values per compute.
"""

from __future__ import annotations

import abc
from typing import ClassVar

import torch
import torch.distributed as dist
from torch import Tensor

from shardrec_metrics._comm import all_reduce_sum
from shardrec_metrics._window import SampleWindow
from shardrec_metrics.rec_metric import RecMetric


class SumState:
    """Sums of C per-sample values added so far, for the lifetime and the last `window_size`."""

    def __init__(self, columns: int, window_size: int) -> None:
        self.columns = columns
        self._window = SampleWindow(window_size)
        self._lifetime: Tensor | None = None  # (C,) float64 on the inputs' device

    def clear(self) -> None:
        self._window.clear()
        self._lifetime = None

    def add(self, values: Tensor) -> None:
        """values: (C, B) float64, one column per sample."""
        total = values.sum(dim=1)
        self._lifetime = total if self._lifetime is None else self._lifetime + total
        self._window.append(values, total)

    def totals(self, group: dist.ProcessGroup | None) -> tuple[Tensor, Tensor]:
        """(lifetime (C,), window (C,)) float64 on the CPU, summed over `group`'s ranks."""
        cols = self.columns
        lifetime = (
            torch.zeros(cols, dtype=torch.float64)
            if self._lifetime is None
            else self._lifetime.cpu()
        )
        window = self._window.sums(cols).cpu()
        both = torch.cat([lifetime, window])
        if group is not None:
            both = all_reduce_sum(both, group)
        return both[:cols], both[cols:]


class SumMetric(RecMetric):
    """A metric that is a function of `_columns` per-sample sums (NE, log loss, accuracy):
    subclasses give the columns of a batch and the value of their sums."""

    _columns: ClassVar[int]

    def __init__(
        self, *, window_size: int = 100_000, process_group: dist.ProcessGroup | None = None
    ) -> None:
        super().__init__(window_size=window_size, process_group=process_group)
        self._sums = SumState(self._columns, window_size)

    def reset(self) -> None:
        self._sums.clear()

    def _update(self, predictions: Tensor, labels: Tensor, weights: Tensor) -> None:
        self._sums.add(torch.stack(self._per_sample(predictions, labels, weights)))

    def _compute(self, group: dist.ProcessGroup | None) -> tuple[float, float]:
        lifetime, window = self._sums.totals(group)
        return self._value(lifetime.tolist()), self._value(window.tolist())

    @abc.abstractmethod
    def _per_sample(self, predictions: Tensor, labels: Tensor, weights: Tensor) -> list[Tensor]:
        """The `_columns` float64 (B,) values of each sample of a validated batch."""

    @abc.abstractmethod
    def _value(self, sums: list[float]) -> float:
        """The metric of the column sums (NaN when they hold no weight)."""
