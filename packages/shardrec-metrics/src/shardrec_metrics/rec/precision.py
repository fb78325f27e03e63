"""Precision: weighted TP / (TP + FP) at `threshold` (0 when nothing is predicted positive)."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import ratio_or_zero
from shardrec_metrics.rec._thresholded import ThresholdedComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric

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
    w = torch.ones_like(predictions) if weights is None else weights
    return {
        "true_pos_sum": compute_true_pos_sum(labels, predictions, w, threshold),
        "false_pos_sum": compute_false_pos_sum(labels, predictions, w, threshold),
    }


class PrecisionMetricComputation(ThresholdedComputation):
    _state_names: ClassVar[tuple[str, ...]] = ("true_pos_sum", "false_pos_sum")

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        return get_precision_states(labels, predictions, weights, self._threshold)

    def _compute(self) -> list[MetricComputationReport]:
        return self._reports(
            MetricName.PRECISION,
            lambda get: compute_precision(get("true_pos_sum"), get("false_pos_sum")),
        )


class PrecisionMetric(RecMetric):
    _namespace = MetricNamespace.PRECISION
    _computation_class = PrecisionMetricComputation
