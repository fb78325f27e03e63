"""TorchRec's `calibration`: defined with the other ratios of two sums in _ratios.py."""

from shardrec_metrics.rec._ratios import (
    CALIBRATION_DENOM,
    CALIBRATION_NUM,
    CalibrationMetric,
    CalibrationMetricComputation,
    compute_calibration,
    get_calibration_states,
)

__all__ = [
    "CALIBRATION_DENOM",
    "CALIBRATION_NUM",
    "CalibrationMetric",
    "CalibrationMetricComputation",
    "compute_calibration",
    "get_calibration_states",
]
