"""Normalized MSE / RMSE: the model's error over that of always predicting 1 (0 when that is 0)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.mse import (
    ERROR_SUM,
    WEIGHTED_NUM_SAMPES,
    MSEMetricComputation,
    compute_error_sum,
    compute_mse,
    compute_rmse,
    get_mse_states,
)
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "CONST_PRED_ERROR_SUM",
    "NMSEMetric",
    "NMSEMetricComputation",
    "compute_norm",
    "get_norm_mse_states",
]

CONST_PRED_ERROR_SUM = "const_pred_error_sum"


def compute_norm(model_error_sum: Tensor, baseline_error_sum: Tensor) -> Tensor:
    zero = torch.zeros_like(model_error_sum, dtype=torch.double)
    return torch.where(baseline_error_sum == 0, zero, model_error_sum / baseline_error_sum).double()


def get_norm_mse_states(labels: Tensor, predictions: Tensor, weights: Tensor) -> dict[str, Tensor]:
    """MSE's sums plus the squared error of the constant prediction 1."""
    baseline = compute_error_sum(labels, torch.ones_like(labels), weights)
    return {**get_mse_states(labels, predictions, weights), CONST_PRED_ERROR_SUM: baseline}


def _normalized(error: Callable[[Tensor, Tensor], Tensor]) -> Callable[..., Tensor]:
    """`error` (MSE or RMSE) of the model over that of the constant prediction 1."""

    def normalized(error_sum: Tensor, const_error_sum: Tensor, num_samples: Tensor) -> Tensor:
        return compute_norm(error(error_sum, num_samples), error(const_error_sum, num_samples))

    return normalized


_NORM_STATES = (ERROR_SUM, CONST_PRED_ERROR_SUM, WEIGHTED_NUM_SAMPES)


class NMSEMetricComputation(SumStatesComputation):
    _state_names = (*MSEMetricComputation._state_names, CONST_PRED_ERROR_SUM)
    _batch_sums = staticmethod(get_norm_mse_states)
    _formulas = (
        Formula(MetricName.NMSE, _normalized(compute_mse), _NORM_STATES),
        Formula(MetricName.NRMSE, _normalized(compute_rmse), _NORM_STATES),
    )


class NMSEMetric(RecMetric):
    _namespace = MetricNamespace.NMSE
    _computation_class = NMSEMetricComputation
