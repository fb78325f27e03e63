"""Sum of weights, lifetime and window."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import SingleSumComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "SumWeightsMetric",
    "SumWeightsMetricComputation",
    "compute_weighted_sum",
    "get_weighted_sum_states",
]


def compute_weighted_sum(labels: Tensor, predictions: Tensor, weights: Tensor) -> Tensor:
    return (weights).sum(dim=-1)


def get_weighted_sum_states(
    labels: Tensor, predictions: Tensor, weights: Tensor | None
) -> dict[str, Tensor]:
    w = torch.ones_like(labels) if weights is None else weights
    return {"weighted_sum": compute_weighted_sum(labels, predictions, w)}


class SumWeightsMetricComputation(SingleSumComputation):
    _state_names: ClassVar[tuple[str, ...]] = ("weighted_sum",)
    _metric_name = MetricName.SUM_WEIGHTS

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        return get_weighted_sum_states(labels, predictions, weights)


class SumWeightsMetric(RecMetric):
    _namespace = MetricNamespace.SUM_WEIGHTS
    _computation_class = SumWeightsMetricComputation
