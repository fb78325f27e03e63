"""Weighted number of positive samples (NaN labels count 0), lifetime and window."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import SingleSumComputation
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
    w = torch.ones_like(labels) if weights is None else weights
    return {"weighted_pos_sum": compute_weighted_pos_sum(labels, predictions, w)}


class NumPositiveSamplesMetricComputation(SingleSumComputation):
    _state_names: ClassVar[tuple[str, ...]] = ("weighted_pos_sum",)
    _metric_name = MetricName.NUM_POSITIVE_SAMPLES

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        return get_num_positive_sample_states(labels, predictions, weights)


class NumPositiveSamplesMetric(RecMetric):
    _namespace = MetricNamespace.NUM_POSITIVE_SAMPLES
    _computation_class = NumPositiveSamplesMetricComputation
