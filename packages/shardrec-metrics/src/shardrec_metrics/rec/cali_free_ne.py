"""Calibration-free NE: NE divided by the NE a perfectly calibrated mean prediction would get.

    CF-NE = NE / (-(P log2 q + (W - P) log2 (1 - q))),   q = sum(w p) / W

(P: positive weight, W: total weight; q is the weighted mean prediction, unclamped as in
TorchRec). With `allow_missing_label_with_zero_weight`, a total weight of 0 in any task gives
`[eta]`.
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
    compute_cross_entropy,
    compute_ne,
    get_ne_states,
)
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "CaliFreeNEMetric",
    "CaliFreeNEMetricComputation",
    "compute_cali_free_ne",
    "compute_cross_entropy",
    "get_cali_free_ne_states",
]


def compute_cali_free_ne(
    ce_sum: Tensor,
    weighted_num_samples: Tensor,
    pos_labels: Tensor,
    neg_labels: Tensor,
    weighted_sum_predictions: Tensor,
    eta: float,
    allow_missing_label_with_zero_weight: bool = False,
) -> Tensor:
    if allow_missing_label_with_zero_weight and not bool(weighted_num_samples.all()):
        return torch.tensor([eta])
    raw_ne = compute_ne(ce_sum, weighted_num_samples, pos_labels, neg_labels, eta)
    q = weighted_sum_predictions / weighted_num_samples
    return raw_ne / (
        -pos_labels * torch.log2(q) - (weighted_num_samples - pos_labels) * torch.log2(1 - q)
    )


def get_cali_free_ne_states(
    labels: Tensor, predictions: Tensor, weights: Tensor, eta: float
) -> dict[str, Tensor]:
    return {
        **get_ne_states(labels, predictions, weights, eta),
        "weighted_sum_predictions": (weights * predictions).sum(dim=-1),
    }


class CaliFreeNEMetricComputation(EntropyComputation):
    _state_names = (*NE_STATES, "weighted_sum_predictions")
    _batch_sums = staticmethod(get_cali_free_ne_states)
    _formulas = (Formula(MetricName.CALI_FREE_NE, compute_cali_free_ne, _state_names, NE_OPTIONS),)


class CaliFreeNEMetric(RecMetric):
    _namespace = MetricNamespace.CALI_FREE_NE
    _computation_class = CaliFreeNEMetricComputation
