"""Unweighted NE: NE (ne.py) with every sample's weight taken as 1, whatever weights are given."""

from __future__ import annotations

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.ne import (
    NE_OPTIONS,
    NE_STATES,
    NEMetricComputation,
    compute_cross_entropy,
    compute_ne,
    get_ne_states,
)
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
    return get_ne_states(labels, predictions, torch.ones_like(labels, dtype=torch.double), eta)


class UnweightedNEMetricComputation(NEMetricComputation):
    """NE of unit weights; no log loss (TorchRec's unweighted NE reports NE only)."""

    _needs_weights = False
    _batch_sums = staticmethod(get_unweighted_ne_states)
    _formulas = (Formula(MetricName.UNWEIGHTED_NE, compute_ne, NE_STATES, NE_OPTIONS),)

    def _compute(self) -> list[MetricComputationReport]:
        return self._reports(*self._formulas)


class UnweightedNEMetric(RecMetric):
    _namespace = MetricNamespace.UNWEIGHTED_NE
    _computation_class = UnweightedNEMetricComputation
