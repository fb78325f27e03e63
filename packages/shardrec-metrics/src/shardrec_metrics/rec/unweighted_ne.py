"""Unweighted NE: NE (ne.py) with every sample's weight taken as 1, whatever weights are given."""

from __future__ import annotations

import torch
from torch import Tensor

from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.ne import NEMetricComputation, compute_cross_entropy, compute_ne
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric

__all__ = [
    "UnweightedNEMetric",
    "UnweightedNEMetricComputation",
    "compute_cross_entropy",
    "compute_ne",
    "get_unweighted_ne_states",
]


def get_unweighted_ne_states(
    labels: Tensor, predictions: Tensor, weights: Tensor, eta: float
) -> dict[str, Tensor]:
    """NE's per-task sums with unit weights (`weights` is ignored)."""
    ones = torch.ones_like(labels, dtype=torch.double)
    return {
        "cross_entropy_sum": compute_cross_entropy(labels, predictions, ones, eta).sum(dim=-1),
        "weighted_num_samples": ones.sum(dim=-1),
        "pos_labels": (ones * labels).sum(dim=-1),
        "neg_labels": (ones * (1.0 - labels)).sum(dim=-1),
    }


class UnweightedNEMetricComputation(NEMetricComputation):
    _needs_weights = False

    def _batch_states(
        self, labels: Tensor, predictions: Tensor, weights: Tensor
    ) -> dict[str, Tensor]:
        return get_unweighted_ne_states(labels, predictions, weights, self.eta)

    def _compute(self) -> list[MetricComputationReport]:
        return self._reports(MetricName.UNWEIGHTED_NE, self._ne)


class UnweightedNEMetric(RecMetric):
    _namespace = MetricNamespace.UNWEIGHTED_NE
    _computation_class = UnweightedNEMetricComputation
