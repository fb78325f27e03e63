"""Accuracy: weighted share of samples whose (prediction >= threshold) equals the label.

0 over no weight.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import ratio_or_zero
from shardrec_metrics.rec._thresholded import ThresholdedComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric

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
    w = torch.ones_like(predictions) if weights is None else weights
    return {
        "accuracy_sum": compute_accuracy_sum(labels, predictions, w, threshold),
        "weighted_num_samples": w.sum(dim=-1),
    }


class AccuracyMetricComputation(ThresholdedComputation):
    _state_names: ClassVar[tuple[str, ...]] = ("accuracy_sum", "weighted_num_samples")

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        return get_accuracy_states(labels, predictions, weights, self._threshold)

    def _compute(self) -> list[MetricComputationReport]:
        return self._reports(
            MetricName.ACCURACY,
            lambda get: compute_accuracy(get("accuracy_sum"), get("weighted_num_samples")),
        )


class AccuracyMetric(RecMetric):
    _namespace = MetricNamespace.ACCURACY
    _computation_class = AccuracyMetricComputation
