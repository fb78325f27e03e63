"""Calibration over serving data: calibration.py plus `total_examples` (nonzero-weight count)."""

from __future__ import annotations

from shardrec_metrics.rec._sum_computation import NUM_EXAMPLES, ServingComputation
from shardrec_metrics.rec.calibration import CalibrationMetricComputation
from shardrec_metrics.rec.metrics_namespace import MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = ["NUM_EXAMPLES", "ServingCalibrationMetric", "ServingCalibrationMetricComputation"]


class ServingCalibrationMetricComputation(ServingComputation, CalibrationMetricComputation):
    """Calibration's states and value (inherited from CalibrationMetricComputation), plus the
    serving count of nonzero-weight examples."""


class ServingCalibrationMetric(RecMetric):
    _namespace = MetricNamespace.SERVING_CALIBRATION
    _computation_class = ServingCalibrationMetricComputation
