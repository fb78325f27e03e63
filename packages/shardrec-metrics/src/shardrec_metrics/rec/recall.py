"""Recall: weighted TP / (TP + FN) at `threshold` (0 when there are no positives).

As TorchRec, a positive predicted exactly at the threshold counts as a true positive and as a
false negative (TP: p >= threshold, FN: p <= threshold).
"""

from __future__ import annotations

from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, ratio_or_zero, weights_or_ones
from shardrec_metrics.rec._thresholded import ThresholdedComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.precision import compute_true_pos_sum
from shardrec_metrics.rec.rec_metric import RecMetric

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
    w = weights_or_ones(weights, predictions)
    return {
        "true_pos_sum": compute_true_pos_sum(labels, predictions, w, threshold),
        "false_neg_sum": compute_false_neg_sum(labels, predictions, w, threshold),
    }


class RecallMetricComputation(ThresholdedComputation):
    _state_names = ("true_pos_sum", "false_neg_sum")
    _batch_sums = staticmethod(get_recall_states)
    _formulas = (Formula(MetricName.RECALL, compute_recall, _state_names),)


class RecallMetric(RecMetric):
    _namespace = MetricNamespace.RECALL
    _computation_class = RecallMetricComputation
