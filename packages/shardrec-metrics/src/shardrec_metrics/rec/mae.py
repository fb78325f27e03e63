"""MAE: weighted mean absolute error (0 over no weight)."""

from __future__ import annotations

from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation, ratio_or_zero
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

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
    _state_names = ("error_sum", "weighted_num_samples")
    _batch_sums = staticmethod(get_mae_states)
    _formulas = (Formula(MetricName.MAE, compute_mae, _state_names),)


class MAEMetric(RecMetric):
    _namespace = MetricNamespace.MAE
    _computation_class = MAEMetricComputation
