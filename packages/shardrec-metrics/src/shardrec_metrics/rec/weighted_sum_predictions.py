"""Weighted sum of predictions (NaN predictions count 0), lifetime and window."""

from __future__ import annotations

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import SingleSumComputation, weights_or_ones
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "WeightedSumPredictionsMetric",
    "WeightedSumPredictionsMetricComputation",
    "compute_weighted_predictions_sum",
    "get_weighted_sum_prediction_states",
]


def compute_weighted_predictions_sum(
    labels: Tensor, predictions: Tensor, weights: Tensor
) -> Tensor:
    return (weights * torch.nan_to_num(predictions, 0)).sum(dim=-1)


def get_weighted_sum_prediction_states(
    labels: Tensor, predictions: Tensor, weights: Tensor | None
) -> dict[str, Tensor]:
    w = weights_or_ones(weights, labels)
    return {"weighted_predictions_sum": compute_weighted_predictions_sum(labels, predictions, w)}


class WeightedSumPredictionsMetricComputation(SingleSumComputation):
    _state_names = ("weighted_predictions_sum",)
    _batch_sums = staticmethod(get_weighted_sum_prediction_states)
    _metric_name = MetricName.WEIGHTED_SUM_PREDICTIONS


class WeightedSumPredictionsMetric(RecMetric):
    _namespace = MetricNamespace.WEIGHTED_SUM_PREDICTIONS
    _computation_class = WeightedSumPredictionsMetricComputation
