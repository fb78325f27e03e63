"""Weighted number of samples whose label is NaN (missing), lifetime and window."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import SingleSumComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "NumMissingLabelsMetric",
    "NumMissingLabelsMetricComputation",
    "compute_missing_label_sum",
    "get_num_missing_labels_states",
]


def compute_missing_label_sum(labels: Tensor, predictions: Tensor, weights: Tensor) -> Tensor:
    return (torch.where(torch.isnan(labels), weights, torch.zeros_like(weights))).sum(dim=-1)


def get_num_missing_labels_states(
    labels: Tensor, predictions: Tensor, weights: Tensor | None
) -> dict[str, Tensor]:
    w = torch.ones_like(labels) if weights is None else weights
    return {"missing_label_sum": compute_missing_label_sum(labels, predictions, w)}


class NumMissingLabelsMetricComputation(SingleSumComputation):
    _state_names: ClassVar[tuple[str, ...]] = ("missing_label_sum",)
    _metric_name = MetricName.NUM_MISSING_LABELS

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        return get_num_missing_labels_states(labels, predictions, weights)


class NumMissingLabelsMetric(RecMetric):
    _namespace = MetricNamespace.NUM_MISSING_LABELS
    _computation_class = NumMissingLabelsMetricComputation
