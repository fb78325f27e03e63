"""TorchRec's `accuracy`: defined with the other thresholded ratios in _thresholded.py."""

from shardrec_metrics.rec._thresholded import (
    AccuracyMetric,
    AccuracyMetricComputation,
    compute_accuracy,
    compute_accuracy_sum,
    get_accuracy_states,
)

__all__ = [
    "AccuracyMetric",
    "AccuracyMetricComputation",
    "compute_accuracy",
    "compute_accuracy_sum",
    "get_accuracy_states",
]
