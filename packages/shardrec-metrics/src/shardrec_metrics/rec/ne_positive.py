"""NE positive: NE's normalizer under the cross entropy of the positive labels only (bits).

    NE+ = sum_i -w_i y_i log2 p_i / CE_norm      (CE_norm as in ne.py)

With `allow_missing_label_with_zero_weight`, a total weight of 0 in any task gives `[eta]`
(TorchRec's value).
"""

from __future__ import annotations

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.ne import (
    NE_OPTIONS,
    NE_STATES,
    EntropyComputation,
    compute_ne,
    label_sums,
)
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "NEPositiveMetric",
    "NEPositiveMetricComputation",
    "compute_cross_entropy_positive",
    "compute_ne_positive",
    "get_ne_positive_states",
]


def compute_cross_entropy_positive(
    labels: Tensor, predictions: Tensor, weights: Tensor, eta: float
) -> Tensor:
    """Per-sample -w y log2 p, float64, predictions clamped to [eta, 1 - eta]."""
    return -weights * labels * torch.log2(predictions.double().clamp(min=eta, max=1 - eta))


def compute_ne_positive(
    ce_positive_sum: Tensor,
    weighted_num_samples: Tensor,
    pos_labels: Tensor,
    neg_labels: Tensor,
    eta: float,
    allow_missing_label_with_zero_weight: bool = False,
) -> Tensor:
    if allow_missing_label_with_zero_weight and not bool(weighted_num_samples.all()):
        return torch.tensor([eta])
    return compute_ne(ce_positive_sum, weighted_num_samples, pos_labels, neg_labels, eta)


def get_ne_positive_states(
    labels: Tensor, predictions: Tensor, weights: Tensor, eta: float
) -> dict[str, Tensor]:
    ce = compute_cross_entropy_positive(labels, predictions, weights, eta)
    return {"cross_entropy_positive_sum": ce.sum(dim=-1), **label_sums(labels, weights)}


class NEPositiveMetricComputation(EntropyComputation):
    _state_names = ("cross_entropy_positive_sum", *NE_STATES[1:])
    _batch_sums = staticmethod(get_ne_positive_states)
    _formulas = (Formula(MetricName.NE_POSITIVE, compute_ne_positive, _state_names, NE_OPTIONS),)


class NEPositiveMetric(RecMetric):
    _namespace = MetricNamespace.NE_POSITIVE
    _computation_class = NEPositiveMetricComputation
