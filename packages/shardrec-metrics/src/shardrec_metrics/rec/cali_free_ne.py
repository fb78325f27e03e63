"""Calibration-free NE: NE divided by the NE a perfectly calibrated mean prediction would get.

    CF-NE = NE / (-(P log2 q + (W - P) log2 (1 - q))),   q = sum(w p) / W

(P: positive weight, W: total weight; q is the weighted mean prediction, unclamped as in
TorchRec). With `allow_missing_label_with_zero_weight`, a total weight of 0 in any task gives
`[eta]`.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from shardrec_metrics.ne import ETA
from shardrec_metrics.rec._sum_computation import StateGetter, SumStatesComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.ne import compute_cross_entropy, compute_ne
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric

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
        "cross_entropy_sum": compute_cross_entropy(labels, predictions, weights, eta).sum(dim=-1),
        "weighted_num_samples": weights.sum(dim=-1),
        "pos_labels": (weights * labels).sum(dim=-1),
        "neg_labels": (weights * (1.0 - labels)).sum(dim=-1),
        "weighted_sum_predictions": (weights * predictions).sum(dim=-1),
    }


class CaliFreeNEMetricComputation(SumStatesComputation):
    _state_names: ClassVar[tuple[str, ...]] = (
        "cross_entropy_sum",
        "weighted_num_samples",
        "pos_labels",
        "neg_labels",
        "weighted_sum_predictions",
    )

    eta = ETA  # allow_missing_label_with_zero_weight is a RecMetricComputation argument

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        return get_cali_free_ne_states(labels, predictions, weights, self.eta)

    def _value(self, get: StateGetter) -> Tensor:
        return compute_cali_free_ne(
            get("cross_entropy_sum"),
            get("weighted_num_samples"),
            get("pos_labels"),
            get("neg_labels"),
            get("weighted_sum_predictions"),
            self.eta,
            self._allow_missing_label_with_zero_weight,
        )

    def _compute(self) -> list[MetricComputationReport]:
        return self._reports(MetricName.CALI_FREE_NE, self._value)


class CaliFreeNEMetric(RecMetric):
    _namespace = MetricNamespace.CALI_FREE_NE
    _computation_class = CaliFreeNEMetricComputation
