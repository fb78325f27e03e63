"""Weighted average of the predictions (NaN over no weight, as TorchRec's plain division)."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from shardrec_metrics.rec._sum_computation import SumStatesComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric

__all__ = ["WeightedAvgMetric", "WeightedAvgMetricComputation", "get_mean"]


def get_mean(value_sum: Tensor, num_samples: Tensor) -> Tensor:
    return value_sum / num_samples


class WeightedAvgMetricComputation(SumStatesComputation):
    _state_names: ClassVar[tuple[str, ...]] = ("weighted_sum", "weighted_num_samples")

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        return {
            "weighted_sum": (predictions * weights).sum(dim=-1),
            "weighted_num_samples": weights.sum(dim=-1),
        }

    def _compute(self) -> list[MetricComputationReport]:
        return self._reports(
            MetricName.WEIGHTED_AVG,
            lambda get: get_mean(get("weighted_sum"), get("weighted_num_samples")),
        )


class WeightedAvgMetric(RecMetric):
    _namespace = MetricNamespace.WEIGHTED_AVG
    _computation_class = WeightedAvgMetricComputation
