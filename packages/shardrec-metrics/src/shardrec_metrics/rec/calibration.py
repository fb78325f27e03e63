"""Calibration: weighted sum of predictions over weighted sum of labels (0 when no positives)."""

from __future__ import annotations

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "CALIBRATION_DENOM",
    "CALIBRATION_NUM",
    "CalibrationMetric",
    "CalibrationMetricComputation",
    "compute_calibration",
    "get_calibration_states",
]

CALIBRATION_NUM = "calibration_num"
CALIBRATION_DENOM = "calibration_denom"


def compute_calibration(calibration_num: Tensor, calibration_denom: Tensor) -> Tensor:
    """num / denom, 0 where denom <= 0."""
    zero = torch.zeros_like(calibration_num, dtype=torch.double)
    return torch.where(calibration_denom <= 0.0, zero, calibration_num / calibration_denom).double()


def get_calibration_states(
    labels: Tensor, predictions: Tensor, weights: Tensor
) -> dict[str, Tensor]:
    return {
        CALIBRATION_NUM: (predictions * weights).sum(dim=-1),
        CALIBRATION_DENOM: (labels * weights).sum(dim=-1),
    }


class CalibrationMetricComputation(SumStatesComputation):
    _state_names = (CALIBRATION_NUM, CALIBRATION_DENOM)
    _batch_sums = staticmethod(get_calibration_states)
    _formulas = (Formula(MetricName.CALIBRATION, compute_calibration, _state_names),)


class CalibrationMetric(RecMetric):
    _namespace = MetricNamespace.CALIBRATION
    _computation_class = CalibrationMetricComputation
