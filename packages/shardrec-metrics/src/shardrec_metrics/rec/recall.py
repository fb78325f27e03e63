"""Recall: weighted TP / (TP + FN) at `threshold` (0 when there are no positives).

As TorchRec, a positive predicted exactly at the threshold counts as a true positive and as a
false negative (TP: p >= threshold, FN: p <= threshold).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import ratio_or_zero
from shardrec_metrics.rec._thresholded import ThresholdedComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.precision import compute_true_pos_sum
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric

__all__ = [
    "RecallMetric",
    "RecallMetricComputation",
    "compute_false_neg_sum",
    "compute_recall",
    "compute_true_pos_sum",
    "get_recall_states",
]


def compute_recall(num_true_positives: Tensor, num_false_negitives: Tensor) -> Tensor:
    return ratio_or_zero(num_true_positives, num_true_positives + num_false_negitives)


def compute_false_neg_sum(
    labels: Tensor, predictions: Tensor, weights: Tensor, threshold: float = 0.5
) -> Tensor:
    return (weights * ((predictions.double() <= threshold) * labels)).sum(dim=-1)


def get_recall_states(
    labels: Tensor, predictions: Tensor, weights: Tensor | None, threshold: float = 0.5
) -> dict[str, Tensor]:
    w = torch.ones_like(predictions) if weights is None else weights
    return {
        "true_pos_sum": compute_true_pos_sum(labels, predictions, w, threshold),
        "false_neg_sum": compute_false_neg_sum(labels, predictions, w, threshold),
    }


class RecallMetricComputation(ThresholdedComputation):
    _state_names: ClassVar[tuple[str, ...]] = ("true_pos_sum", "false_neg_sum")

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        return get_recall_states(labels, predictions, weights, self._threshold)

    def _compute(self) -> list[MetricComputationReport]:
        return self._reports(
            MetricName.RECALL, lambda get: compute_recall(get("true_pos_sum"), get("false_neg_sum"))
        )


class RecallMetric(RecMetric):
    _namespace = MetricNamespace.RECALL
    _computation_class = RecallMetricComputation
