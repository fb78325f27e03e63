"""Weighted number of samples whose label is NaN (missing), lifetime and window."""

from __future__ import annotations

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import SingleSumComputation, weights_or_ones
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
    w = weights_or_ones(weights, labels)
    return {"missing_label_sum": compute_missing_label_sum(labels, predictions, w)}


class NumMissingLabelsMetricComputation(SingleSumComputation):
    _state_names = ("missing_label_sum",)
    _batch_sums = staticmethod(get_num_missing_labels_states)
    _metric_name = MetricName.NUM_MISSING_LABELS


class NumMissingLabelsMetric(RecMetric):
    _namespace = MetricNamespace.NUM_MISSING_LABELS
    _computation_class = NumMissingLabelsMetricComputation
