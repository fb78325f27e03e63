"""NE (normalized entropy) and log loss, TorchRec's formulas in bits.

    NE = sum_i w_i CE(y_i, p_i) / CE_norm,   CE_norm = -(P log2 r + N log2 (1 - r)),  r = P / W

with predictions and r clamped to [eta, 1 - eta] (eta = 1e-12) and W clamped below by eta;
P, N, W: positive, negative and total weight. Log loss = sum w CE / (P + N) in bits.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from shardrec_metrics.ne import ETA
from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "NEMetric",
    "NEMetricComputation",
    "compute_cross_entropy",
    "compute_logloss",
    "compute_ne",
    "get_ne_states",
]


def compute_cross_entropy(
    labels: Tensor, predictions: Tensor, weights: Tensor, eta: float
) -> Tensor:
    """Per-sample weighted cross entropy in bits, float64, predictions clamped to [eta, 1-eta]."""
    p = predictions.double().clamp(min=eta, max=1 - eta)
    return -weights * labels * torch.log2(p) - weights * (1.0 - labels) * torch.log2(1.0 - p)


def _cross_entropy_norm(
    mean_label: Tensor, pos_labels: Tensor, neg_labels: Tensor, eta: float
) -> Tensor:
    rate = mean_label.double().clamp(min=eta, max=1 - eta)
    return -pos_labels * torch.log2(rate) - neg_labels * torch.log2(1.0 - rate)


def compute_ne(
    ce_sum: Tensor,
    weighted_num_samples: Tensor,
    pos_labels: Tensor,
    neg_labels: Tensor,
    eta: float,
    allow_missing_label_with_zero_weight: bool = False,
) -> Tensor:
    """NE from sums (module docstring); with `allow_missing_label_with_zero_weight`, tasks of
    total weight 0 report eta instead of NaN."""
    mean_label = pos_labels / weighted_num_samples.double().clamp(min=eta)
    ne = ce_sum / _cross_entropy_norm(mean_label, pos_labels, neg_labels, eta)
    if allow_missing_label_with_zero_weight and not bool(weighted_num_samples.all()):
        return torch.where(weighted_num_samples > 0, ne, torch.full_like(ne, eta))
    return ne


def compute_logloss(ce_sum: Tensor, pos_labels: Tensor, neg_labels: Tensor, eta: float) -> Tensor:
    """Mean cross entropy in bits: ce_sum / max(P + N, eta)."""
    return ce_sum / (pos_labels + neg_labels).clamp(min=eta)


def label_sums(labels: Tensor, weights: Tensor) -> dict[str, Tensor]:
    """The NE family's per-task weight sums: total, positive and negative."""
    return {
        "weighted_num_samples": weights.sum(dim=-1),
        "pos_labels": (weights * labels).sum(dim=-1),
        "neg_labels": (weights * (1.0 - labels)).sum(dim=-1),
    }


def get_ne_states(
    labels: Tensor, predictions: Tensor, weights: Tensor, eta: float
) -> dict[str, Tensor]:
    """Per-task sums of one batch (inputs (n_tasks, B))."""
    ce = compute_cross_entropy(labels, predictions, weights, eta)
    return {"cross_entropy_sum": ce.sum(dim=-1), **label_sums(labels, weights)}


NE_STATES = ("cross_entropy_sum", "weighted_num_samples", "pos_labels", "neg_labels")
NE_OPTIONS = ("eta", "allow_missing_label_with_zero_weight")
_LOG_LOSS = Formula(
    MetricName.LOG_LOSS,
    compute_logloss,
    ("cross_entropy_sum", "pos_labels", "neg_labels"),
    ("eta",),
)


class EntropyComputation(SumStatesComputation):
    """A sum-states metric of the NE family: its sums and formulas take TorchRec's clamp `eta`
    (and `allow_missing_label_with_zero_weight`, a RecMetricComputation argument)."""

    eta = ETA

    def _batch_sums_args(self) -> tuple[Any, ...]:
        return (self.eta,)

    def _formula_options(self) -> dict[str, Any]:
        return {
            "eta": self.eta,
            "allow_missing_label_with_zero_weight": self._allow_missing_label_with_zero_weight,
        }


class NEMetricComputation(EntropyComputation):
    """NE, and log loss with `include_logloss=True`."""

    _state_names = NE_STATES
    _batch_sums = staticmethod(get_ne_states)
    _formulas = (Formula(MetricName.NE, compute_ne, NE_STATES, NE_OPTIONS),)
    _optional_formulas = (("include_logloss", _LOG_LOSS),)


class NEMetric(RecMetric):
    _namespace = MetricNamespace.NE
    _computation_class = NEMetricComputation
