"""TorchRec's `num_positive_samples`: defined with the other single sums in _single_sums.py."""

from shardrec_metrics.rec._single_sums import (
    NumPositiveSamplesMetric,
    NumPositiveSamplesMetricComputation,
    compute_weighted_pos_sum,
    get_num_positive_sample_states,
)

__all__ = [
    "NumPositiveSamplesMetric",
    "NumPositiveSamplesMetricComputation",
    "compute_weighted_pos_sum",
    "get_num_positive_sample_states",
]
