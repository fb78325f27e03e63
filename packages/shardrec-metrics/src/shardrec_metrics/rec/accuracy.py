"""Accuracy: weighted share of samples whose (prediction >= threshold) equals the label.

0 over no weight.
"""

from __future__ import annotations

from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, ratio_or_zero, weights_or_ones
from shardrec_metrics.rec._thresholded import ThresholdedComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "AccuracyMetric",
    "AccuracyMetricComputation",
    "compute_accuracy",
    "compute_accuracy_sum",
    "get_accuracy_states",
]


def compute_accuracy(accuracy_sum: Tensor, weighted_num_samples: Tensor) -> Tensor:
    return ratio_or_zero(accuracy_sum, weighted_num_samples)


def compute_accuracy_sum(
    labels: Tensor, predictions: Tensor, weights: Tensor, threshold: float = 0.5
) -> Tensor:
    return (weights * ((predictions.double() >= threshold) == labels)).sum(dim=-1)


def get_accuracy_states(
    labels: Tensor, predictions: Tensor, weights: Tensor | None, threshold: float = 0.5
) -> dict[str, Tensor]:
    w = weights_or_ones(weights, predictions)
    return {
        "accuracy_sum": compute_accuracy_sum(labels, predictions, w, threshold),
        "weighted_num_samples": w.sum(dim=-1),
    }


class AccuracyMetricComputation(ThresholdedComputation):
    _state_names = ("accuracy_sum", "weighted_num_samples")
    _batch_sums = staticmethod(get_accuracy_states)
    _formulas = (Formula(MetricName.ACCURACY, compute_accuracy, _state_names),)


class AccuracyMetric(RecMetric):
    _namespace = MetricNamespace.ACCURACY
    _computation_class = AccuracyMetricComputation
