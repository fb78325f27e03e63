"""Calibration over serving data: calibration.py plus `total_examples` (nonzero-weight count)."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from shardrec_metrics.rec._sum_computation import NUM_EXAMPLES, ServingComputation
from shardrec_metrics.rec.calibration import (
    CALIBRATION_DENOM,
    CALIBRATION_NUM,
    compute_calibration,
    get_calibration_states,
)
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric

__all__ = ["NUM_EXAMPLES", "ServingCalibrationMetric", "ServingCalibrationMetricComputation"]


class ServingCalibrationMetricComputation(ServingComputation):
    _state_names: ClassVar[tuple[str, ...]] = (CALIBRATION_NUM, CALIBRATION_DENOM)

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        return get_calibration_states(labels, predictions, weights)

    def _compute(self) -> list[MetricComputationReport]:
        reports = self._reports(
            MetricName.CALIBRATION,
            lambda get: compute_calibration(get(CALIBRATION_NUM), get(CALIBRATION_DENOM)),
        )
        return [*reports, self._total_examples()]


class ServingCalibrationMetric(RecMetric):
    _namespace = MetricNamespace.SERVING_CALIBRATION
    _computation_class = ServingCalibrationMetricComputation
