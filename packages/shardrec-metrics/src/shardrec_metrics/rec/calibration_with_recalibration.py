"""Calibration of recalibrated predictions: calibration's states and formula (calibration.py)
over p / (p + (1 - p) / c), c = `recalibration_coefficient` (_recalibration.py). Keys:
`recalibrated_calibration-<task>|lifetime_calibration`, `...|window_calibration`."""

from __future__ import annotations

from shardrec_metrics.rec._recalibration import RecalibratedComputation
from shardrec_metrics.rec.calibration import (
    CALIBRATION_DENOM,
    CALIBRATION_NUM,
    CalibrationMetricComputation,
    get_calibration_states,
)
from shardrec_metrics.rec.metrics_namespace import MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "CALIBRATION_DENOM",
    "CALIBRATION_NUM",
    "RecalibratedCalibrationMetric",
    "RecalibratedCalibrationMetricComputation",
    "get_calibration_states",
]


class RecalibratedCalibrationMetricComputation(
    RecalibratedComputation, CalibrationMetricComputation
):
    """CalibrationMetricComputation fed recalibrated predictions."""


class RecalibratedCalibrationMetric(RecMetric):
    _namespace = MetricNamespace.RECALIBRATED_CALIBRATION
    _computation_class = RecalibratedCalibrationMetricComputation
