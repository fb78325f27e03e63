"""NE positive: NE's normalizer under the cross entropy of the positive labels only (bits).

    NE+ = sum_i -w_i y_i log2 p_i / CE_norm      (CE_norm as in ne.py)

With `allow_missing_label_with_zero_weight`, a total weight of 0 in any task gives `[eta]`
(TorchRec's value).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from shardrec_metrics.ne import ETA
from shardrec_metrics.rec._sum_computation import StateGetter, SumStatesComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.ne import compute_ne
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric

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
    return {
        "cross_entropy_positive_sum": ce.sum(dim=-1),
        "weighted_num_samples": weights.sum(dim=-1),
        "pos_labels": (weights * labels).sum(dim=-1),
        "neg_labels": (weights * (1.0 - labels)).sum(dim=-1),
    }


class NEPositiveMetricComputation(SumStatesComputation):
    _state_names: ClassVar[tuple[str, ...]] = (
        "cross_entropy_positive_sum",
        "weighted_num_samples",
        "pos_labels",
        "neg_labels",
    )

    eta = ETA  # allow_missing_label_with_zero_weight is a RecMetricComputation argument

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        return get_ne_positive_states(labels, predictions, weights, self.eta)

    def _ne_positive(self, get: StateGetter) -> Tensor:
        return compute_ne_positive(
            get("cross_entropy_positive_sum"),
            get("weighted_num_samples"),
            get("pos_labels"),
            get("neg_labels"),
            self.eta,
            self._allow_missing_label_with_zero_weight,
        )

    def _compute(self) -> list[MetricComputationReport]:
        return self._reports(MetricName.NE_POSITIVE, self._ne_positive)


class NEPositiveMetric(RecMetric):
    _namespace = MetricNamespace.NE_POSITIVE
    _computation_class = NEPositiveMetricComputation
