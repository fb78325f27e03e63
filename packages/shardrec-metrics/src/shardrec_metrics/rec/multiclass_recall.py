"""Multiclass recall at k: the weighted share of samples whose label is among the k + 1
highest-scored classes, for k = 0 .. n_classes - 1 (a (n_classes,) value per task).

Predictions are (..., B, n_classes) scores, labels (..., B) class indices. Pass
`number_of_classes=C` to the metric.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "MulticlassRecallMetric",
    "MulticlassRecallMetricComputation",
    "compute_multiclass_recall_at_k",
    "compute_true_positives_at_k",
    "get_multiclass_recall_states",
]


def compute_true_positives_at_k(
    predictions: Tensor, labels: Tensor, weights: Tensor, n_classes: int
) -> Tensor:
    """(..., n_classes): weight of samples whose label ranks at position <= k, per k."""
    ranks = torch.argsort(predictions, dim=-1, descending=True)
    position = (ranks == labels.unsqueeze(-1).to(ranks.dtype)).to(torch.int64).argmax(dim=-1)
    hit = torch.nn.functional.one_hot(position, n_classes).to(weights.dtype) * weights.unsqueeze(-1)
    return torch.cumsum(hit.sum(dim=-2), dim=-1)


def compute_multiclass_recall_at_k(tp_at_k: Tensor, total_weights: Tensor) -> Tensor:
    return tp_at_k / total_weights.unsqueeze(-1)


def get_multiclass_recall_states(
    predictions: Tensor, labels: Tensor, weights: Tensor, n_classes: int
) -> dict[str, Tensor]:
    return {
        "tp_at_k": compute_true_positives_at_k(predictions, labels, weights, n_classes),
        "total_weights": weights.sum(dim=-1),
    }


class MulticlassRecallMetricComputation(SumStatesComputation):
    _state_names = ()  # added with their (n_tasks, C) shape below
    _formulas = (
        Formula(
            MetricName.MULTICLASS_RECALL,
            compute_multiclass_recall_at_k,
            ("tp_at_k", "total_weights"),
        ),
    )

    def __init__(self, *args: Any, number_of_classes: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if number_of_classes < 1:
            raise ValueError(f"number_of_classes must be >= 1, got {number_of_classes}")
        self._n_classes = number_of_classes
        for name, shape in (
            ("tp_at_k", (self._n_tasks, number_of_classes)),
            ("total_weights", (self._n_tasks,)),
        ):
            self._add_state(name, torch.zeros(shape, dtype=torch.double), persistent=True)

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        if predictions.shape[-1] != self._n_classes:
            raise ValueError(
                f"predictions have {predictions.shape[-1]} classes in their last dimension, "
                f"number_of_classes is {self._n_classes}"
            )
        return get_multiclass_recall_states(predictions, labels, weights, self._n_classes)


class MulticlassRecallMetric(RecMetric):
    _namespace = MetricNamespace.MULTICLASS_RECALL
    _computation_class = MulticlassRecallMetricComputation
