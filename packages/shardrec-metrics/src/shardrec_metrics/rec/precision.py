"""TorchRec's `precision`: defined with the other thresholded ratios in _thresholded.py."""

from shardrec_metrics.rec._thresholded import (
    PrecisionMetric,
    PrecisionMetricComputation,
    compute_false_pos_sum,
    compute_precision,
    compute_true_pos_sum,
    get_precision_states,
)

__all__ = [
    "PrecisionMetric",
    "PrecisionMetricComputation",
    "compute_false_pos_sum",
    "compute_precision",
    "compute_true_pos_sum",
    "get_precision_states",
]
