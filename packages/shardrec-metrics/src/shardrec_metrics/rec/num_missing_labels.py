"""TorchRec's `num_missing_labels`: defined with the other single sums in _single_sums.py."""

from shardrec_metrics.rec._single_sums import (
    NumMissingLabelsMetric,
    NumMissingLabelsMetricComputation,
    compute_missing_label_sum,
    get_num_missing_labels_states,
)

__all__ = [
    "NumMissingLabelsMetric",
    "NumMissingLabelsMetricComputation",
    "compute_missing_label_sum",
    "get_num_missing_labels_states",
]
