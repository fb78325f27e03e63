"""NE over serving data: NE (ne.py) plus `total_examples`, the count of nonzero-weight samples."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from shardrec_metrics.ne import ETA
from shardrec_metrics.rec._sum_computation import NUM_EXAMPLES, ServingComputation, StateGetter
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.ne import compute_ne, get_ne_states
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric

__all__ = ["NUM_EXAMPLES", "ServingNEMetric", "ServingNEMetricComputation"]


class ServingNEMetricComputation(ServingComputation):
    _state_names: ClassVar[tuple[str, ...]] = (
        "cross_entropy_sum",
        "weighted_num_samples",
        "pos_labels",
        "neg_labels",
    )
    eta = ETA

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        return get_ne_states(labels, predictions, weights, self.eta)

    def _ne(self, get: StateGetter) -> Tensor:
        return compute_ne(
            get("cross_entropy_sum"),
            get("weighted_num_samples"),
            get("pos_labels"),
            get("neg_labels"),
            self.eta,
        )

    def _compute(self) -> list[MetricComputationReport]:
        return [*self._reports(MetricName.NE, self._ne), self._total_examples()]


class ServingNEMetric(RecMetric):
    _namespace = MetricNamespace.SERVING_NE
    _computation_class = ServingNEMetricComputation
