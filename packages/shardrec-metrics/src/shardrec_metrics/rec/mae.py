"""MAE: weighted mean absolute error (0 over no weight)."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from shardrec_metrics.rec._sum_computation import SumStatesComputation, ratio_or_zero
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric

__all__ = [
    "MAEMetric",
    "MAEMetricComputation",
    "compute_error_sum",
    "compute_mae",
    "get_mae_states",
]


def compute_mae(error_sum: Tensor, weighted_num_samples: Tensor) -> Tensor:
    return ratio_or_zero(error_sum, weighted_num_samples)


def compute_error_sum(labels: Tensor, predictions: Tensor, weights: Tensor) -> Tensor:
    return (weights * (labels - predictions.double()).abs()).sum(dim=-1)


def get_mae_states(labels: Tensor, predictions: Tensor, weights: Tensor) -> dict[str, Tensor]:
    return {
        "error_sum": compute_error_sum(labels, predictions, weights),
        "weighted_num_samples": weights.sum(dim=-1),
    }


class MAEMetricComputation(SumStatesComputation):
    _state_names: ClassVar[tuple[str, ...]] = ("error_sum", "weighted_num_samples")

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        return get_mae_states(labels, predictions, weights)

    def _compute(self) -> list[MetricComputationReport]:
        return self._reports(
            MetricName.MAE, lambda get: compute_mae(get("error_sum"), get("weighted_num_samples"))
        )


class MAEMetric(RecMetric):
    _namespace = MetricNamespace.MAE
    _computation_class = MAEMetricComputation
