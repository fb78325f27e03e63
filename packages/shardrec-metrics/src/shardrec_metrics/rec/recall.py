"""TorchRec's `recall`: defined with the other thresholded ratios in _thresholded.py."""

from shardrec_metrics.rec._thresholded import (
    RecallMetric,
    RecallMetricComputation,
    compute_false_neg_sum,
    compute_recall,
    compute_true_pos_sum,
    get_recall_states,
)

__all__ = [
    "RecallMetric",
    "RecallMetricComputation",
    "compute_false_neg_sum",
    "compute_recall",
    "compute_true_pos_sum",
    "get_recall_states",
]
