"""TorchRec's thresholded ratios: accuracy, precision and recall (TorchRec's modules of those
names re-export them from here). A prediction p counts as positive when p >= `threshold`
(default 0.5); recall, as TorchRec, also counts p <= threshold as a false negative, so a
positive exactly at the threshold is both a true positive and a false negative.

    metric     a                                    b                                 value
    accuracy   accuracy_sum = sum w [(p>=t) == y]   weighted_num_samples = sum w      a / b
    precision  true_pos_sum = sum w (p>=t) y        false_pos_sum = sum w (p>=t)(1-y) a / (a + b)
    recall     true_pos_sum                         false_neg_sum = sum w (p<=t) y    a / (a + b)

each 0 where its denominator is 0. A metric is its `compute_*` functions (TorchRec's) and a
`Ratio` row (_ratios.py) whose sums take the threshold.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from shardrec_metrics.rec._ratios import Ratio, weight_sum
from shardrec_metrics.rec._sum_computation import (
    SumStatesComputation,
    SumStatesMetric,
    ratio_or_zero,
)
from shardrec_metrics.rec.metrics_namespace import MetricName

__all__ = [
    "AccuracyMetric",
    "AccuracyMetricComputation",
    "PrecisionMetric",
    "PrecisionMetricComputation",
    "RecallMetric",
    "RecallMetricComputation",
    "ThresholdedComputation",
    "compute_accuracy",
    "compute_accuracy_sum",
    "compute_false_neg_sum",
    "compute_false_pos_sum",
    "compute_precision",
    "compute_recall",
    "compute_true_pos_sum",
    "get_accuracy_states",
    "get_precision_states",
    "get_recall_states",
]


class ThresholdedComputation(SumStatesComputation):
    """A sum-states computation with a decision `threshold` in [0, 1] (default 0.5)."""

    _needs_weights = False

    def __init__(self, *args: Any, threshold: float = 0.5, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if isinstance(threshold, bool) or not 0.0 <= float(threshold) <= 1.0:
            raise ValueError(f"threshold must be a probability in [0, 1], got {threshold!r}")
        self._threshold = float(threshold)

    def _batch_sums_args(self) -> tuple[Any, ...]:
        return (self._threshold,)


def compute_accuracy(accuracy_sum: Tensor, weighted_num_samples: Tensor) -> Tensor:
    return ratio_or_zero(accuracy_sum, weighted_num_samples)


def compute_accuracy_sum(
    labels: Tensor, predictions: Tensor, weights: Tensor, threshold: float = 0.5
) -> Tensor:
    return (weights * ((predictions.double() >= threshold) == labels)).sum(dim=-1)


class AccuracyMetricComputation(ThresholdedComputation):
    _row = Ratio(
        MetricName.ACCURACY,
        compute_accuracy,
        ("accuracy_sum", compute_accuracy_sum),
        ("weighted_num_samples", weight_sum),
    )


class AccuracyMetric(SumStatesMetric):
    _computation_class = AccuracyMetricComputation


def compute_true_pos_sum(
    labels: Tensor, predictions: Tensor, weights: Tensor, threshold: float = 0.5
) -> Tensor:
    return (weights * ((predictions.double() >= threshold) * labels)).sum(dim=-1)


def compute_precision(num_true_positives: Tensor, num_false_positives: Tensor) -> Tensor:
    return ratio_or_zero(num_true_positives, num_true_positives + num_false_positives)


def compute_false_pos_sum(
    labels: Tensor, predictions: Tensor, weights: Tensor, threshold: float = 0.5
) -> Tensor:
    return (weights * ((predictions.double() >= threshold) * (1 - labels))).sum(dim=-1)


class PrecisionMetricComputation(ThresholdedComputation):
    _row = Ratio(
        MetricName.PRECISION,
        compute_precision,
        ("true_pos_sum", compute_true_pos_sum),
        ("false_pos_sum", compute_false_pos_sum),
    )


class PrecisionMetric(SumStatesMetric):
    _computation_class = PrecisionMetricComputation


def compute_recall(num_true_positives: Tensor, num_false_negitives: Tensor) -> Tensor:
    return ratio_or_zero(num_true_positives, num_true_positives + num_false_negitives)


def compute_false_neg_sum(
    labels: Tensor, predictions: Tensor, weights: Tensor, threshold: float = 0.5
) -> Tensor:
    return (weights * ((predictions.double() <= threshold) * labels)).sum(dim=-1)


class RecallMetricComputation(ThresholdedComputation):
    _row = Ratio(
        MetricName.RECALL,
        compute_recall,
        ("true_pos_sum", compute_true_pos_sum),
        ("false_neg_sum", compute_false_neg_sum),
    )


class RecallMetric(SumStatesMetric):
    _computation_class = RecallMetricComputation


# TorchRec's `get_*_states` functions: the rows' `states` (threshold after weights)
get_accuracy_states = AccuracyMetricComputation._row.states
get_precision_states = PrecisionMetricComputation._row.states
get_recall_states = RecallMetricComputation._row.states
