"""Accuracy: the weighted share of samples whose thresholded prediction equals the label.

A prediction p counts as class 1 when p >= threshold (TorchRec's rule). No samples give NaN.
"""

from __future__ import annotations

import torch.distributed as dist
from torch import Tensor

from shardrec_metrics._sums import SumMetric
from shardrec_metrics.rec_metric import NO_SAMPLES


class Accuracy(SumMetric):
    """Weighted accuracy at `threshold` (default 0.5), lifetime and window."""

    name = "accuracy"
    _columns = 2  # weight of correct samples, weight

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

    def _per_sample(self, predictions: Tensor, labels: Tensor, weights: Tensor) -> list[Tensor]:
        w = weights.double()
        correct = ((predictions >= self.threshold).double() == labels.double()).double()
        return [w * correct, w]

    def _value(self, sums: list[float]) -> float:
        correct, weight = sums
        return correct / weight if weight > 0 else NO_SAMPLES
