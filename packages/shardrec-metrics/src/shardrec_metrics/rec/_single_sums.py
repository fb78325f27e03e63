"""TorchRec's single weighted sums: num_missing_labels, num_positive_samples, sum_weights and
weighted_sum_predictions (TorchRec's modules of those names re-export them from here).

Each reports one per-task sum of `weights * value`, lifetime and window, under its own name:

    num_missing_labels        value 1 where the label is NaN, else 0
    num_positive_samples      the label (NaN counts 0)
    sum_weights               1
    weighted_sum_predictions  the prediction (NaN counts 0)

A metric is its `compute_*` function (TorchRec's, on (n_tasks, B) inputs) and a `SingleSum`
row naming its state, that function and its metric name; `SingleSumComputation` reads the row
(states, `get_*_states`, the one reported value) and `SingleSumMetric` takes its namespace
from it (the metric's name).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation, weights_or_ones
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "NumMissingLabelsMetric",
    "NumMissingLabelsMetricComputation",
    "NumPositiveSamplesMetric",
    "NumPositiveSamplesMetricComputation",
    "SingleSum",
    "SingleSumComputation",
    "SingleSumMetric",
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

    def states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor | None = None
    ) -> dict[str, Tensor]:
        """TorchRec's `get_*_states`: `{state: (n_tasks,) sums}`; no weights weigh 1 each."""
        return {self.state: self.batch_sum(labels, predictions, weights_or_ones(weights, labels))}


def _total(total: Tensor) -> Tensor:
    return total


class SingleSumComputation(SumStatesComputation):
    """A computation of one `SingleSum` row (`_sum`), reported as is."""

    _needs_weights = False
    _sum: ClassVar[SingleSum]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._state_names = (cls._sum.state,)
        cls._batch_sums = cls._sum.states
        cls._formulas = (Formula(cls._sum.name, _total, cls._state_names),)


class SingleSumMetric(RecMetric):
    """The RecMetric of a `SingleSumComputation`: its namespace is its metric's name."""

    _computation_class: ClassVar[type[SingleSumComputation]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._namespace = MetricNamespace(cls._computation_class._sum.name.value)


def compute_missing_label_sum(labels: Tensor, predictions: Tensor, weights: Tensor) -> Tensor:
    return (torch.where(torch.isnan(labels), weights, torch.zeros_like(weights))).sum(dim=-1)


class NumMissingLabelsMetricComputation(SingleSumComputation):
    _sum = SingleSum("missing_label_sum", compute_missing_label_sum, MetricName.NUM_MISSING_LABELS)


class NumMissingLabelsMetric(SingleSumMetric):
    _computation_class = NumMissingLabelsMetricComputation


def compute_weighted_pos_sum(labels: Tensor, predictions: Tensor, weights: Tensor) -> Tensor:
    return (weights * torch.nan_to_num(labels, 0)).sum(dim=-1)


class NumPositiveSamplesMetricComputation(SingleSumComputation):
    _sum = SingleSum("weighted_pos_sum", compute_weighted_pos_sum, MetricName.NUM_POSITIVE_SAMPLES)


class NumPositiveSamplesMetric(SingleSumMetric):
    _computation_class = NumPositiveSamplesMetricComputation


def compute_weighted_sum(labels: Tensor, predictions: Tensor, weights: Tensor) -> Tensor:
    return (weights).sum(dim=-1)


class SumWeightsMetricComputation(SingleSumComputation):
    _sum = SingleSum("weighted_sum", compute_weighted_sum, MetricName.SUM_WEIGHTS)


class SumWeightsMetric(SingleSumMetric):
    _computation_class = SumWeightsMetricComputation


def compute_weighted_predictions_sum(
    labels: Tensor, predictions: Tensor, weights: Tensor
) -> Tensor:
    return (weights * torch.nan_to_num(predictions, 0)).sum(dim=-1)


class WeightedSumPredictionsMetricComputation(SingleSumComputation):
    _sum = SingleSum(
        "weighted_predictions_sum",
        compute_weighted_predictions_sum,
        MetricName.WEIGHTED_SUM_PREDICTIONS,
    )


class WeightedSumPredictionsMetric(SingleSumMetric):
    _computation_class = WeightedSumPredictionsMetricComputation


# TorchRec's `get_*_states` functions: the rows' `states`
get_num_missing_labels_states = NumMissingLabelsMetricComputation._sum.states
get_num_positive_sample_states = NumPositiveSamplesMetricComputation._sum.states
get_weighted_sum_states = SumWeightsMetricComputation._sum.states
get_weighted_sum_prediction_states = WeightedSumPredictionsMetricComputation._sum.states
