"""TorchRec's `sum_weights`: defined with the other single sums in _single_sums.py."""

from shardrec_metrics.rec._single_sums import (
    SumWeightsMetric,
    SumWeightsMetricComputation,
    compute_weighted_sum,
    get_weighted_sum_states,
)

__all__ = [
    "SumWeightsMetric",
    "SumWeightsMetricComputation",
    "compute_weighted_sum",
    "get_weighted_sum_states",
]
