"""Label average and prediction average: weighted means (0 over no weight)."""

from __future__ import annotations

from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation, ratio_or_zero
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

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
    _state_names = (LABEL_SUM, PREDICTION_SUM, WEIGHTED_NUM_SAMPLES)
    _batch_sums = staticmethod(get_average_states)
    _formulas = (
        Formula(MetricName.LABEL_AVERAGE, compute_average, (LABEL_SUM, WEIGHTED_NUM_SAMPLES)),
        Formula(
            MetricName.PREDICTION_AVERAGE, compute_average, (PREDICTION_SUM, WEIGHTED_NUM_SAMPLES)
        ),
    )


class AverageMetric(RecMetric):
    _namespace = MetricNamespace.AVERAGE
    _computation_class = AverageMetricComputation
