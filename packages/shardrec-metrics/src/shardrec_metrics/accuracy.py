"""Accuracy: the weighted share of samples whose thresholded prediction equals the label.

A prediction p counts as class 1 when p >= threshold (TorchRec's rule). No samples give NaN.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from shardrec_metrics._sums import SumState
from shardrec_metrics.rec_metric import NO_SAMPLES, RecMetric


class Accuracy(RecMetric):
    """Weighted accuracy at `threshold` (default 0.5), lifetime and window."""

    name = "accuracy"

    def __init__(
        self,
        *,
        window_size: int = 100_000,
        process_group: dist.ProcessGroup | None = None,
        threshold: float = 0.5,
    ) -> None:
        super().__init__(window_size=window_size, process_group=process_group)
        if isinstance(threshold, bool) or not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be a probability in [0, 1], got {threshold!r}")
        self.threshold = float(threshold)
        # columns: weight of correct samples, weight
        self._sums = SumState(2, window_size)

    def reset(self) -> None:
        self._sums.clear()

    def _update(self, predictions: Tensor, labels: Tensor, weights: Tensor) -> None:
        w = weights.double()
        correct = ((predictions >= self.threshold).double() == labels.double()).double()
        self._sums.add(torch.stack([w * correct, w]))

    def _compute(self, group: dist.ProcessGroup | None) -> tuple[float, float]:
        lifetime, window = self._sums.totals(group)
        return _share(lifetime), _share(window)


def _share(sums: Tensor) -> float:
    correct, weight = (float(v) for v in sums.tolist())
    return correct / weight if weight > 0 else NO_SAMPLES
