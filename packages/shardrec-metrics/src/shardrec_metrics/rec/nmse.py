"""Normalized MSE / RMSE: the model's error over that of always predicting 1 (0 when that is 0)."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import StateGetter, SumStatesComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.mse import (
    ERROR_SUM,
    WEIGHTED_NUM_SAMPES,
    compute_error_sum,
    compute_mse,
    compute_rmse,
    get_mse_states,
)
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric

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


class NMSEMetricComputation(SumStatesComputation):
    _state_names: ClassVar[tuple[str, ...]] = (
        ERROR_SUM,
        WEIGHTED_NUM_SAMPES,
        "label_sum",
        "label_squared_sum",
        CONST_PRED_ERROR_SUM,
    )

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        return get_norm_mse_states(labels, predictions, weights)

    @staticmethod
    def _nmse(get: StateGetter) -> Tensor:
        n = get(WEIGHTED_NUM_SAMPES)
        return compute_norm(
            compute_mse(get(ERROR_SUM), n), compute_mse(get(CONST_PRED_ERROR_SUM), n)
        )

    @staticmethod
    def _nrmse(get: StateGetter) -> Tensor:
        n = get(WEIGHTED_NUM_SAMPES)
        return compute_norm(
            compute_rmse(get(ERROR_SUM), n), compute_rmse(get(CONST_PRED_ERROR_SUM), n)
        )

    def _compute(self) -> list[MetricComputationReport]:
        nmse = self._reports(MetricName.NMSE, self._nmse)
        nrmse = self._reports(MetricName.NRMSE, self._nrmse)
        return [nmse[0], nrmse[0], nmse[1], nrmse[1]]


class NMSEMetric(RecMetric):
    _namespace = MetricNamespace.NMSE
    _computation_class = NMSEMetricComputation
