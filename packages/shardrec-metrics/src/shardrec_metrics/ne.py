"""Normalized entropy: the cross entropy of the predictions over that of the positive rate.

TorchRec's definition, clamping included: predictions are clamped to [eta, 1 - eta] with
eta = 1e-12 before the logs, and so is the weighted positive rate p in the normalizer
`-(P log p + N log (1 - p))` (P, N: positive and negative weight). NE < 1 means the model
beats always predicting the positive rate. A single-class input gives a normalizer near 0 and so
a very large NE, as in TorchRec; no samples give NaN.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import Tensor

from shardrec_metrics._sums import SumState
from shardrec_metrics.rec_metric import NO_SAMPLES, RecMetric

ETA = 1e-12
"""TorchRec's clamp for probabilities inside logs."""


def cross_entropy(predictions: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
    """Per-sample weighted cross entropy in nats, float64 (B,), predictions clamped by ETA.

    TorchRec works in bits (log2); NE is a ratio of two entropies, so the unit cancels, and nats
    let NE and log loss share this function.
    """
    return -weights.double() * torch.log(true_class_probability(predictions, labels))


def true_class_probability(predictions: Tensor, labels: Tensor) -> Tensor:
    """float64 (B,): the clamped probability given to each sample's own label.

    Labels are exactly 0 or 1, so one log per sample replaces TorchRec's two (same value).
    """
    p = predictions.double().clamp(ETA, 1.0 - ETA)
    return torch.where(labels == 1, p, 1.0 - p)


def normalized_entropy(ce_sum: float, weight: float, pos: float, neg: float) -> float:
    """NE from sums, TorchRec's `compute_ne` in plain floats; NaN for total weight 0."""
    if weight <= 0:
        return NO_SAMPLES
    # pos / weight as TorchRec (no floor on weight: a total weight below ETA is still a rate)
    rate = min(max(pos / weight, ETA), 1.0 - ETA)
    norm = -pos * math.log(rate) - neg * math.log(1.0 - rate)
    return ce_sum / norm


class NE(RecMetric):
    """Normalized entropy (TorchRec's NE), lifetime and window."""

    name = "ne"

    def __init__(
        self, *, window_size: int = 100_000, process_group: dist.ProcessGroup | None = None
    ) -> None:
        super().__init__(window_size=window_size, process_group=process_group)
        # columns: cross entropy (nats), weight, positive weight, negative weight
        self._sums = SumState(4, window_size)

    def reset(self) -> None:
        self._sums.clear()

    def _update(self, predictions: Tensor, labels: Tensor, weights: Tensor) -> None:
        w = weights.double()
        y = labels.double()
        ce = cross_entropy(predictions, labels, weights)
        self._sums.add(torch.stack([ce, w, w * y, w * (1.0 - y)]))

    def _compute(self, group: dist.ProcessGroup | None) -> tuple[float, float]:
        lifetime, window = self._sums.totals(group)
        return (
            normalized_entropy(*[float(v) for v in lifetime.tolist()]),
            normalized_entropy(*[float(v) for v in window.tolist()]),
        )
