"""MSE and RMSE (and R squared with `include_r_squared=True`), weighted; 0 over no weight."""

from __future__ import annotations

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation, ratio_or_zero
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "ERROR_SUM",
    "WEIGHTED_NUM_SAMPES",
    "MSEMetric",
    "MSEMetricComputation",
    "compute_error_sum",
    "compute_mse",
    "compute_r_squared",
    "compute_rmse",
    "get_mse_states",
]

ERROR_SUM = "error_sum"
WEIGHTED_NUM_SAMPES = "weighted_num_samples"  # TorchRec's spelling


def compute_mse(error_sum: Tensor, weighted_num_samples: Tensor) -> Tensor:
    return ratio_or_zero(error_sum, weighted_num_samples)


def compute_rmse(error_sum: Tensor, weighted_num_samples: Tensor) -> Tensor:
    return torch.sqrt(ratio_or_zero(error_sum, weighted_num_samples))


def compute_r_squared(
    error_sum: Tensor, weighted_num_samples: Tensor, label_sum: Tensor, label_squared_sum: Tensor
) -> Tensor:
    """1 - SSE / total sum of squares around the weighted label mean (1 when that is 0)."""
    total = label_squared_sum.double() - label_sum.double() ** 2 / weighted_num_samples.double()
    one = torch.ones_like(total)
    return torch.where(total == 0.0, one, 1.0 - error_sum / total).double()


def compute_error_sum(labels: Tensor, predictions: Tensor, weights: Tensor) -> Tensor:
    return (weights * (labels - predictions.double()) ** 2).sum(dim=-1)


def get_mse_states(labels: Tensor, predictions: Tensor, weights: Tensor) -> dict[str, Tensor]:
    return {
        ERROR_SUM: compute_error_sum(labels, predictions, weights),
        WEIGHTED_NUM_SAMPES: weights.sum(dim=-1),
        "label_sum": (weights * labels).sum(dim=-1),
        "label_squared_sum": (weights * labels**2).sum(dim=-1),
    }


class MSEMetricComputation(SumStatesComputation):
    _state_names = (ERROR_SUM, WEIGHTED_NUM_SAMPES, "label_sum", "label_squared_sum")
    _batch_sums = staticmethod(get_mse_states)
    _formulas = (
        Formula(MetricName.MSE, compute_mse, (ERROR_SUM, WEIGHTED_NUM_SAMPES)),
        Formula(MetricName.RMSE, compute_rmse, (ERROR_SUM, WEIGHTED_NUM_SAMPES)),
    )
    _optional_formulas = (
        ("include_r_squared", Formula(MetricName.R_SQUARED, compute_r_squared, _state_names)),
    )


class MSEMetric(RecMetric):
    _namespace = MetricNamespace.MSE
    _computation_class = MSEMetricComputation
