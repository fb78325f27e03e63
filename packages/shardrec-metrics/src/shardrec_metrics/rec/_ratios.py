"""TorchRec's ratios of two weighted sums: ctr, calibration, mae and weighted_avg (TorchRec's
modules of those names re-export them from here; accuracy, precision and recall, ratios with
a threshold, are in _thresholded.py).

    metric        a (numerator state)           b (denominator state)            value
    ctr           ctr_num = sum w * y           ctr_denom = sum w                a / b, 0 if b == 0
    calibration   calibration_num = sum w * p   calibration_denom = sum w * y    a / b, 0 if b <= 0
    mae           error_sum = sum w * |y - p|   weighted_num_samples = sum w     a / b, 0 if b == 0
    weighted_avg  weighted_sum = sum w * p      weighted_num_samples = sum w     a / b

A metric is its `compute_*` formula (TorchRec's) and a `Ratio` row (`_row`, see
_sum_computation.py): the row gives its states, `get_*_states` and its one reported value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import (
    Formula,
    SumStatesComputation,
    SumStatesMetric,
    ratio_or_zero,
)
from shardrec_metrics.rec.metrics_namespace import MetricName

__all__ = [
    "CALIBRATION_DENOM",
    "CALIBRATION_NUM",
    "CTR_DENOM",
    "CTR_NUM",
    "CTRMetric",
    "CTRMetricComputation",
    "CalibrationMetric",
    "CalibrationMetricComputation",
    "MAEMetric",
    "MAEMetricComputation",
    "Ratio",
    "WeightedAvgMetric",
    "WeightedAvgMetricComputation",
    "compute_calibration",
    "compute_ctr",
    "compute_error_sum",
    "compute_mae",
    "get_calibration_states",
    "get_ctr_states",
    "get_mae_states",
    "get_mean",
    "weight_sum",
]

# (labels, predictions, weights, *options) -> (n_tasks,) sums of (n_tasks, B) inputs
BatchSum = Callable[..., Tensor]

CTR_NUM = "ctr_num"
CTR_DENOM = "ctr_denom"
CALIBRATION_NUM = "calibration_num"
CALIBRATION_DENOM = "calibration_denom"
WEIGHTED_NUM_SAMPLES = "weighted_num_samples"


@dataclass(frozen=True)
class Ratio:
    """A metric reported as `compute(a, b)` of two per-task batch sums, each a state name and
    its `BatchSum` function (called with the computation's options: the threshold, ...)."""

    name: MetricName
    compute: Callable[[Tensor, Tensor], Tensor]
    a: tuple[str, BatchSum]
    b: tuple[str, BatchSum]

    @property
    def formula(self) -> Formula:
        return Formula(self.name, self.compute, (self.a[0], self.b[0]))

    def states(
        self,
        labels: Tensor,
        predictions: Tensor,
        weights: Tensor | None = None,
        *options: Any,
        **keyword_options: Any,
    ) -> dict[str, Tensor]:
        """TorchRec's `get_*_states`: `{a: (n_tasks,), b: (n_tasks,)}`; no weights weigh 1.
        `options` (`threshold=...`) go to both sum functions."""
        # this runs every batch: no helper calls or comprehension beyond the two sums
        w = torch.ones_like(predictions) if weights is None else weights
        (a, sum_a), (b, sum_b) = self.a, self.b
        if keyword_options:
            return {
                a: sum_a(labels, predictions, w, *options, **keyword_options),
                b: sum_b(labels, predictions, w, *options, **keyword_options),
            }
        return {
            a: sum_a(labels, predictions, w, *options),
            b: sum_b(labels, predictions, w, *options),
        }


def weight_sum(
    labels: Tensor, predictions: Tensor, weights: Tensor, *options: Any, **keyword_options: Any
) -> Tensor:
    """sum w per task (TorchRec's `weighted_num_samples`, `ctr_denom`); options are ignored."""
    return weights.sum(dim=-1)


def _weighted_labels(labels: Tensor, predictions: Tensor, weights: Tensor) -> Tensor:
    return (labels * weights).sum(dim=-1)


def _weighted_predictions(labels: Tensor, predictions: Tensor, weights: Tensor) -> Tensor:
    return (predictions * weights).sum(dim=-1)


def compute_ctr(ctr_num: Tensor, ctr_denom: Tensor) -> Tensor:
    return ratio_or_zero(ctr_num, ctr_denom)


class CTRMetricComputation(SumStatesComputation):
    _row = Ratio(MetricName.CTR, compute_ctr, (CTR_NUM, _weighted_labels), (CTR_DENOM, weight_sum))


class CTRMetric(SumStatesMetric):
    _computation_class = CTRMetricComputation


def compute_calibration(calibration_num: Tensor, calibration_denom: Tensor) -> Tensor:
    """num / denom, 0 where denom <= 0."""
    zero = torch.zeros_like(calibration_num, dtype=torch.double)
    return torch.where(calibration_denom <= 0.0, zero, calibration_num / calibration_denom).double()


class CalibrationMetricComputation(SumStatesComputation):
    _row = Ratio(
        MetricName.CALIBRATION,
        compute_calibration,
        (CALIBRATION_NUM, _weighted_predictions),
        (CALIBRATION_DENOM, _weighted_labels),
    )


class CalibrationMetric(SumStatesMetric):
    _computation_class = CalibrationMetricComputation


def compute_mae(error_sum: Tensor, weighted_num_samples: Tensor) -> Tensor:
    return ratio_or_zero(error_sum, weighted_num_samples)


def compute_error_sum(labels: Tensor, predictions: Tensor, weights: Tensor) -> Tensor:
    return (weights * (labels - predictions.double()).abs()).sum(dim=-1)


class MAEMetricComputation(SumStatesComputation):
    _row = Ratio(
        MetricName.MAE,
        compute_mae,
        ("error_sum", compute_error_sum),
        (WEIGHTED_NUM_SAMPLES, weight_sum),
    )


class MAEMetric(SumStatesMetric):
    _computation_class = MAEMetricComputation


def get_mean(value_sum: Tensor, num_samples: Tensor) -> Tensor:
    return value_sum / num_samples


class WeightedAvgMetricComputation(SumStatesComputation):
    _row = Ratio(
        MetricName.WEIGHTED_AVG,
        get_mean,
        ("weighted_sum", _weighted_predictions),
        (WEIGHTED_NUM_SAMPLES, weight_sum),
    )


class WeightedAvgMetric(SumStatesMetric):
    _computation_class = WeightedAvgMetricComputation


# TorchRec's `get_*_states` functions: the rows' `states`
get_ctr_states = CTRMetricComputation._row.states
get_calibration_states = CalibrationMetricComputation._row.states
get_mae_states = MAEMetricComputation._row.states
