"""TorchRec's `weighted_sum_predictions`: defined with the other single sums in _single_sums.py."""

from shardrec_metrics.rec._single_sums import (
    WeightedSumPredictionsMetric,
    WeightedSumPredictionsMetricComputation,
    compute_weighted_predictions_sum,
    get_weighted_sum_prediction_states,
)

__all__ = [
    "WeightedSumPredictionsMetric",
    "WeightedSumPredictionsMetricComputation",
    "compute_weighted_predictions_sum",
    "get_weighted_sum_prediction_states",
]
