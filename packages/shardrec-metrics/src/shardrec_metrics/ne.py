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
from torch import Tensor

from shardrec_metrics._sums import SumMetric
from shardrec_metrics.rec_metric import NO_SAMPLES

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


class NE(SumMetric):
    """Normalized entropy (TorchRec's NE), lifetime and window."""

    name = "ne"
    _columns = 4  # cross entropy (nats), weight, positive weight, negative weight

    def _per_sample(self, predictions: Tensor, labels: Tensor, weights: Tensor) -> list[Tensor]:
        w = weights.double()
        y = labels.double()
        return [cross_entropy(predictions, labels, weights), w, w * y, w * (1.0 - y)]

    def _value(self, sums: list[float]) -> float:
        return normalized_entropy(*sums)
