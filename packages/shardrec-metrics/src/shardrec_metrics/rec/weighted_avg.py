"""Weighted average of the predictions (NaN over no weight, as TorchRec's plain division)."""

from __future__ import annotations

from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = ["WeightedAvgMetric", "WeightedAvgMetricComputation", "get_mean"]


def get_mean(value_sum: Tensor, num_samples: Tensor) -> Tensor:
    return value_sum / num_samples


def _weighted_avg_states(labels: Tensor, predictions: Tensor, weights: Tensor) -> dict[str, Tensor]:
    return {
        "weighted_sum": (predictions * weights).sum(dim=-1),
        "weighted_num_samples": weights.sum(dim=-1),
    }


class WeightedAvgMetricComputation(SumStatesComputation):
    _state_names = ("weighted_sum", "weighted_num_samples")
    _batch_sums = staticmethod(_weighted_avg_states)
    _formulas = (Formula(MetricName.WEIGHTED_AVG, get_mean, _state_names),)


class WeightedAvgMetric(RecMetric):
    _namespace = MetricNamespace.WEIGHTED_AVG
    _computation_class = WeightedAvgMetricComputation
