"""Label average and prediction average: weighted means (0 over no weight)."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from shardrec_metrics.rec._sum_computation import SumStatesComputation, ratio_or_zero
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric

__all__ = [
    "LABEL_SUM",
    "PREDICTION_SUM",
    "WEIGHTED_NUM_SAMPLES",
    "AverageMetric",
    "AverageMetricComputation",
    "compute_average",
    "get_average_states",
]

LABEL_SUM = "label_sum"
PREDICTION_SUM = "prediction_sum"
WEIGHTED_NUM_SAMPLES = "weighted_num_samples"


def compute_average(weighted_sum: Tensor, weighted_num_samples: Tensor) -> Tensor:
    return ratio_or_zero(weighted_sum, weighted_num_samples)


def get_average_states(labels: Tensor, predictions: Tensor, weights: Tensor) -> dict[str, Tensor]:
    return {
        LABEL_SUM: (labels * weights).sum(dim=-1),
        PREDICTION_SUM: (predictions * weights).sum(dim=-1),
        WEIGHTED_NUM_SAMPLES: weights.sum(dim=-1),
    }


class AverageMetricComputation(SumStatesComputation):
    _state_names: ClassVar[tuple[str, ...]] = (LABEL_SUM, PREDICTION_SUM, WEIGHTED_NUM_SAMPLES)

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        return get_average_states(labels, predictions, weights)

    def _compute(self) -> list[MetricComputationReport]:
        label = self._reports(
            MetricName.LABEL_AVERAGE,
            lambda get: compute_average(get(LABEL_SUM), get(WEIGHTED_NUM_SAMPLES)),
        )
        prediction = self._reports(
            MetricName.PREDICTION_AVERAGE,
            lambda get: compute_average(get(PREDICTION_SUM), get(WEIGHTED_NUM_SAMPLES)),
        )
        return [label[0], prediction[0], label[1], prediction[1]]


class AverageMetric(RecMetric):
    _namespace = MetricNamespace.AVERAGE
    _computation_class = AverageMetricComputation
