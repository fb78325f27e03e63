"""TorchRec's single weighted sums: num_missing_labels, num_positive_samples, sum_weights and
weighted_sum_predictions (TorchRec's modules of those names re-export them from here).

Each reports one per-task sum of `weights * value`, lifetime and window, under its own name:

    num_missing_labels        value 1 where the label is NaN, else 0
    num_positive_samples      the label (NaN counts 0)
    sum_weights               1
    weighted_sum_predictions  the prediction (NaN counts 0)

A metric is its `compute_*` function (TorchRec's, on (n_tasks, B) inputs) and a `SingleSum`
row (`_row`, see _sum_computation.py) naming its state, that function and its metric name:
the row gives the states, `get_*_states` and the one reported value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import (
    Formula,
    SumStatesComputation,
    SumStatesMetric,
    weights_or_ones,
)
from shardrec_metrics.rec.metrics_namespace import MetricName

__all__ = [
    "NumMissingLabelsMetric",
    "NumMissingLabelsMetricComputation",
    "NumPositiveSamplesMetric",
    "NumPositiveSamplesMetricComputation",
    "SingleSum",
    "SingleSumComputation",
    "SumWeightsMetric",
    "SumWeightsMetricComputation",
    "WeightedSumPredictionsMetric",
    "WeightedSumPredictionsMetricComputation",
    "compute_missing_label_sum",
    "compute_weighted_pos_sum",
    "compute_weighted_predictions_sum",
    "compute_weighted_sum",
    "get_num_missing_labels_states",
    "get_num_positive_sample_states",
    "get_weighted_sum_prediction_states",
    "get_weighted_sum_states",
]


@dataclass(frozen=True)
class SingleSum:
    """One metric of this family: its state's name, its `compute_*` function of (labels,
    predictions, weights), each (n_tasks, B), giving the (n_tasks,) batch sums, and its name."""

    state: str
    batch_sum: Callable[[Tensor, Tensor, Tensor], Tensor]
    name: MetricName

    @property
    def formula(self) -> Formula:
        """The state reported as is."""
        return Formula(self.name, _total, (self.state,))

    def states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor | None = None
    ) -> dict[str, Tensor]:
        """TorchRec's `get_*_states`: `{state: (n_tasks,) sums}`; no weights weigh 1 each."""
        return {self.state: self.batch_sum(labels, predictions, weights_or_ones(weights, labels))}


def _total(total: Tensor) -> Tensor:
    return total


class SingleSumComputation(SumStatesComputation):
    """A computation of one `SingleSum` row (`_row`); weights default to ones."""

    _needs_weights = False


def compute_missing_label_sum(labels: Tensor, predictions: Tensor, weights: Tensor) -> Tensor:
    return (torch.where(torch.isnan(labels), weights, torch.zeros_like(weights))).sum(dim=-1)


class NumMissingLabelsMetricComputation(SingleSumComputation):
    _row = SingleSum("missing_label_sum", compute_missing_label_sum, MetricName.NUM_MISSING_LABELS)


class NumMissingLabelsMetric(SumStatesMetric):
    _computation_class = NumMissingLabelsMetricComputation


def compute_weighted_pos_sum(labels: Tensor, predictions: Tensor, weights: Tensor) -> Tensor:
    return (weights * torch.nan_to_num(labels, 0)).sum(dim=-1)


class NumPositiveSamplesMetricComputation(SingleSumComputation):
    _row = SingleSum("weighted_pos_sum", compute_weighted_pos_sum, MetricName.NUM_POSITIVE_SAMPLES)


class NumPositiveSamplesMetric(SumStatesMetric):
    _computation_class = NumPositiveSamplesMetricComputation


def compute_weighted_sum(labels: Tensor, predictions: Tensor, weights: Tensor) -> Tensor:
    return (weights).sum(dim=-1)


class SumWeightsMetricComputation(SingleSumComputation):
    _row = SingleSum("weighted_sum", compute_weighted_sum, MetricName.SUM_WEIGHTS)


class SumWeightsMetric(SumStatesMetric):
    _computation_class = SumWeightsMetricComputation


def compute_weighted_predictions_sum(
    labels: Tensor, predictions: Tensor, weights: Tensor
) -> Tensor:
    return (weights * torch.nan_to_num(predictions, 0)).sum(dim=-1)


class WeightedSumPredictionsMetricComputation(SingleSumComputation):
    _row = SingleSum(
        "weighted_predictions_sum",
        compute_weighted_predictions_sum,
        MetricName.WEIGHTED_SUM_PREDICTIONS,
    )


class WeightedSumPredictionsMetric(SumStatesMetric):
    _computation_class = WeightedSumPredictionsMetricComputation


# TorchRec's `get_*_states` functions: the rows' `states`
get_num_missing_labels_states = NumMissingLabelsMetricComputation._row.states
get_num_positive_sample_states = NumPositiveSamplesMetricComputation._row.states
get_weighted_sum_states = SumWeightsMetricComputation._row.states
get_weighted_sum_prediction_states = WeightedSumPredictionsMetricComputation._row.states
