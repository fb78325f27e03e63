"""XAUC: the weighted share of a batch's sample pairs ordered alike by prediction and label.

Over the pairs i < j of each batch, with weight w_i w_j, a pair agrees when the prediction and
the label order the two the same way, or both tie:

    xauc = sum of agreeing pairs' weights / sum of all pairs' weights   (0 without pairs)

Pairs are formed within a batch only (TorchRec's definition), so the sums are exact across
ranks. Cost: O(B^2) per task and batch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation, ratio_or_zero
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "XAUCMetric",
    "XAUCMetricComputation",
    "compute_error_sum",
    "compute_weighted_num_pairs",
    "compute_xauc",
    "get_xauc_states",
]


def _pair_weights(weights: Tensor) -> Tensor:
    """(B, B) w_i w_j for i < j, 0 elsewhere."""
    w = weights.double()
    return torch.triu(w[:, None] * w[None, :], diagonal=1)


def compute_error_sum(labels: Tensor, predictions: Tensor, weights: Tensor) -> Tensor:
    """(n_tasks,) weight of the agreeing pairs of (n_tasks, B) inputs."""
    sums = []
    for p, y, w in zip(predictions.double(), labels.double(), weights, strict=True):
        p_order = torch.sign(p[:, None] - p[None, :])
        y_order = torch.sign(y[:, None] - y[None, :])
        sums.append((_pair_weights(w) * (p_order == y_order)).sum())
    return torch.stack(sums) if sums else torch.zeros(0, dtype=torch.double)


def compute_weighted_num_pairs(weights: Tensor) -> Tensor:
    """(n_tasks,) weight of all pairs i < j."""
    pairs = [_pair_weights(w).sum() for w in weights]
    return torch.stack(pairs) if pairs else torch.zeros(0, dtype=torch.double)


def compute_xauc(error_sum: Tensor, weighted_num_pairs: Tensor) -> Tensor:
    return ratio_or_zero(error_sum, weighted_num_pairs)


# the state names: weight of the agreeing pairs, of all pairs
ERROR_SUM = "error_sum"
WEIGHTED_NUM_PAIRS = "weighted_num_pairs"


def get_xauc_states(labels: Tensor, predictions: Tensor, weights: Tensor) -> dict[str, Tensor]:
    return {
        ERROR_SUM: compute_error_sum(labels, predictions, weights),
        WEIGHTED_NUM_PAIRS: compute_weighted_num_pairs(weights),
    }


class XAUCMetricComputation(SumStatesComputation):
    """XAUC per task (module docstring): two pair-weight sums and their ratio."""

    _formulas = (Formula(MetricName.XAUC, compute_xauc, (ERROR_SUM, WEIGHTED_NUM_PAIRS)),)
    _state_names = _formulas[0].states
    _batch_sums = staticmethod(get_xauc_states)


class XAUCMetric(RecMetric):
    """TorchRec's XAUCMetric: `xauc-<task>|lifetime_xauc`, `...|window_xauc`."""

    _namespace = MetricNamespace.XAUC
    _computation_class = XAUCMetricComputation
