"""TorchRec's `weighted_avg`: defined with the other ratios of two sums in _ratios.py."""

from shardrec_metrics.rec._ratios import (
    WeightedAvgMetric,
    WeightedAvgMetricComputation,
    get_mean,
)

__all__ = [
    "WeightedAvgMetric",
    "WeightedAvgMetricComputation",
    "get_mean",
]
