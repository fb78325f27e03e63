"""Weighted number of positive samples (NaN labels count 0), lifetime and window."""

from __future__ import annotations

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import SingleSumComputation, weights_or_ones
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "NumPositiveSamplesMetric",
    "NumPositiveSamplesMetricComputation",
    "compute_weighted_pos_sum",
    "get_num_positive_sample_states",
]


def compute_weighted_pos_sum(labels: Tensor, predictions: Tensor, weights: Tensor) -> Tensor:
    return (weights * torch.nan_to_num(labels, 0)).sum(dim=-1)


def get_num_positive_sample_states(
    labels: Tensor, predictions: Tensor, weights: Tensor | None
) -> dict[str, Tensor]:
    w = weights_or_ones(weights, labels)
    return {"weighted_pos_sum": compute_weighted_pos_sum(labels, predictions, w)}


class NumPositiveSamplesMetricComputation(SingleSumComputation):
    _state_names = ("weighted_pos_sum",)
    _batch_sums = staticmethod(get_num_positive_sample_states)
    _metric_name = MetricName.NUM_POSITIVE_SAMPLES


class NumPositiveSamplesMetric(RecMetric):
    _namespace = MetricNamespace.NUM_POSITIVE_SAMPLES
    _computation_class = NumPositiveSamplesMetricComputation
