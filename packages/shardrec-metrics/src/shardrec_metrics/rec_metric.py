"""`RecMetric`: the contract every per-sample metric (AUC, NE, log loss, accuracy) follows.

A metric keeps a lifetime value (every sample since construction or `reset`) and a window value
(the last `window_size` samples of each rank). `update` is local and cheap; `compute` is a
collective when a process group is given or the default one is initialized: every rank of the
group must call it, in the same order as its other collectives, and every rank gets the same
numbers, equal to the metric of all ranks' samples pooled in one process.
"""

from __future__ import annotations

import abc
import math

import torch.distributed as dist
from torch import Tensor

from shardrec_metrics._comm import resolve_group
from shardrec_metrics._validate import check_window_size, validated_inputs

NO_SAMPLES = math.nan
"""What a metric computes over no samples (or samples of total weight 0): not a number."""


class RecMetric(abc.ABC):
    """Base of the per-sample metrics. Subclasses set `name` and implement three hooks."""

    name: str

    def __init__(
        self, *, window_size: int = 100_000, process_group: dist.ProcessGroup | None = None
    ) -> None:
        self.window_size = check_window_size(window_size)
        self.process_group = process_group

    def update(self, *, predictions: Tensor, labels: Tensor, weights: Tensor | None = None) -> None:
        """Add one batch of this rank's samples.

        predictions: (B,) probabilities in [0, 1] (after sigmoid); labels: (B,) of 0/1;
        weights: (B,) >= 0, default ones. Bad input raises ValueError/TypeError naming it.
        """
        self._update(*validated_inputs(predictions, labels, weights))

    def compute(self) -> dict[str, float]:
        """`{"<name>/lifetime": v, "<name>/window": v}`, a collective when distributed."""
        lifetime, window = self._compute(resolve_group(self.process_group))
        return {f"{self.name}/lifetime": lifetime, f"{self.name}/window": window}

    @abc.abstractmethod
    def reset(self) -> None:
        """Forget every sample (lifetime and window)."""

    @abc.abstractmethod
    def _update(self, predictions: Tensor, labels: Tensor, weights: Tensor) -> None:
        """Add validated float32 (B,) tensors on one device."""

    @abc.abstractmethod
    def _compute(self, group: dist.ProcessGroup | None) -> tuple[float, float]:
        """(lifetime, window) over every rank of `group` (this process alone when None)."""
