"""TorchRec's `mae`: defined with the other ratios of two sums in _ratios.py."""

from shardrec_metrics.rec._ratios import (
    MAEMetric,
    MAEMetricComputation,
    compute_error_sum,
    compute_mae,
    get_mae_states,
)

__all__ = [
    "MAEMetric",
    "MAEMetricComputation",
    "compute_error_sum",
    "compute_mae",
    "get_mae_states",
]
