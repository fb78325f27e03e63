"""Precision: weighted TP / (TP + FP) at `threshold` (0 when nothing is predicted positive)."""

from __future__ import annotations

from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, ratio_or_zero, weights_or_ones
from shardrec_metrics.rec._thresholded import ThresholdedComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "PrecisionMetric",
    "PrecisionMetricComputation",
    "compute_false_pos_sum",
    "compute_precision",
    "compute_true_pos_sum",
    "get_precision_states",
]


def compute_precision(num_true_positives: Tensor, num_false_positives: Tensor) -> Tensor:
    return ratio_or_zero(num_true_positives, num_true_positives + num_false_positives)


def compute_true_pos_sum(
    labels: Tensor, predictions: Tensor, weights: Tensor, threshold: float = 0.5
) -> Tensor:
    return (weights * ((predictions.double() >= threshold) * labels)).sum(dim=-1)


def compute_false_pos_sum(
    labels: Tensor, predictions: Tensor, weights: Tensor, threshold: float = 0.5
) -> Tensor:
    return (weights * ((predictions.double() >= threshold) * (1 - labels))).sum(dim=-1)


def get_precision_states(
    labels: Tensor, predictions: Tensor, weights: Tensor | None, threshold: float = 0.5
) -> dict[str, Tensor]:
    w = weights_or_ones(weights, predictions)
    return {
        "true_pos_sum": compute_true_pos_sum(labels, predictions, w, threshold),
        "false_pos_sum": compute_false_pos_sum(labels, predictions, w, threshold),
    }


class PrecisionMetricComputation(ThresholdedComputation):
    _state_names = ("true_pos_sum", "false_pos_sum")
    _batch_sums = staticmethod(get_precision_states)
    _formulas = (Formula(MetricName.PRECISION, compute_precision, _state_names),)


class PrecisionMetric(RecMetric):
    _namespace = MetricNamespace.PRECISION
    _computation_class = PrecisionMetricComputation
