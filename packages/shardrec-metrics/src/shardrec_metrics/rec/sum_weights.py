"""Sum of weights, lifetime and window."""

from __future__ import annotations

from torch import Tensor

from shardrec_metrics.rec._sum_computation import SingleSumComputation, weights_or_ones
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
    w = weights_or_ones(weights, labels)
    return {"weighted_sum": compute_weighted_sum(labels, predictions, w)}


class SumWeightsMetricComputation(SingleSumComputation):
    _state_names = ("weighted_sum",)
    _batch_sums = staticmethod(get_weighted_sum_states)
    _metric_name = MetricName.SUM_WEIGHTS


class SumWeightsMetric(RecMetric):
    _namespace = MetricNamespace.SUM_WEIGHTS
    _computation_class = SumWeightsMetricComputation
