"""Hindsight target PR: the lowest of 1000 thresholds whose precision reaches a target.

Weighted true positive, false positive and false negative sums are kept per task at each of
the thresholds t_i = linspace(0, 1, 1000) (TorchRec's: TP and FP count p >= t_i, FN counts
p <= t_i). Reported, lifetime and window:

- `hindsight_target_pr`: the first index i whose precision TP / (TP + FP) >= `target_precision`
  (999 when none; the threshold is t_i = i / 999),
- `hindsight_target_precision`, `hindsight_target_recall` at that index (0 over no weight).

TorchRec 1.8 keeps these sums for one task only and reports the index as an uninitialized
tensor of that size; here each task has its own sums and the index is a float64 value. Sums,
so exact across ranks.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation, ratio_or_zero
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = [
    "THRESHOLD_GRANULARITY",
    "HindsightTargetPRMetric",
    "HindsightTargetPRMetricComputation",
    "compute_precision",
    "compute_recall",
    "compute_threshold_idx",
    "get_pr_states",
]

THRESHOLD_GRANULARITY = 1000
PR_STATES = ("true_pos_sum", "false_pos_sum", "false_neg_sum")


def compute_precision(num_true_positives: Tensor, num_false_positives: Tensor) -> Tensor:
    return ratio_or_zero(num_true_positives, num_true_positives + num_false_positives)


def compute_recall(num_true_positives: Tensor, num_false_negitives: Tensor) -> Tensor:
    return ratio_or_zero(num_true_positives, num_true_positives + num_false_negitives)


def compute_threshold_idx(
    num_true_positives: Tensor, num_false_positives: Tensor, target_precision: float
) -> Tensor:
    """(...,) first threshold index whose precision reaches the target, else the last; of
    (..., THRESHOLD_GRANULARITY) sums."""
    reached = compute_precision(num_true_positives, num_false_positives) >= target_precision
    first = torch.argmax(reached.to(torch.int8), dim=-1)
    return torch.where(reached.any(dim=-1), first, THRESHOLD_GRANULARITY - 1)


def get_pr_states(labels: Tensor, predictions: Tensor, weights: Tensor | None) -> dict[str, Tensor]:
    """(n_tasks, THRESHOLD_GRANULARITY) weighted TP, FP and FN sums of (n_tasks, B) inputs:
    one sort per task, then each threshold's sums are cumulative sums read at its position."""
    w = torch.ones_like(predictions) if weights is None else weights
    thresholds = torch.linspace(0, 1, steps=THRESHOLD_GRANULARITY).double()
    p, order = torch.sort(predictions.double(), dim=-1)
    pos = (w * labels).double().gather(-1, order)
    neg = w.double().gather(-1, order) - pos
    t = thresholds.expand(p.shape[0], -1).contiguous()
    below = torch.searchsorted(p, t, side="left")  # samples with p < t
    at_most = torch.searchsorted(p, t, side="right")  # samples with p <= t

    def first(values: Tensor, counts: Tensor) -> Tensor:  # sums of the first `counts` values
        zero = torch.zeros_like(values[..., :1])
        return torch.cat([zero, torch.cumsum(values, dim=-1)], dim=-1).gather(-1, counts)

    from_top = p.shape[-1] - below  # samples with p >= t, summed from the largest p down
    return {
        "true_pos_sum": first(pos.flip(-1), from_top),
        "false_pos_sum": first(neg.flip(-1), from_top),
        "false_neg_sum": first(pos, at_most),
    }


def _at_target(values: Tensor, tp: Tensor, fp: Tensor, target_precision: float) -> Tensor:
    idx = compute_threshold_idx(tp, fp, target_precision)
    return values.gather(-1, idx[..., None]).squeeze(-1)


def _target_index(tp: Tensor, fp: Tensor, target_precision: float) -> Tensor:
    return compute_threshold_idx(tp, fp, target_precision).double()


def _target_precision(tp: Tensor, fp: Tensor, target_precision: float) -> Tensor:
    return _at_target(compute_precision(tp, fp), tp, fp, target_precision)


def _target_recall(tp: Tensor, fp: Tensor, fn: Tensor, target_precision: float) -> Tensor:
    return _at_target(compute_recall(tp, fn), tp, fp, target_precision)


_OPTION = ("target_precision",)


class HindsightTargetPRMetricComputation(SumStatesComputation):
    """TP/FP/FN sums at 1000 thresholds per task; takes `target_precision` (default 0.5)."""

    _needs_weights = False
    _state_names = PR_STATES
    _batch_sums = staticmethod(get_pr_states)
    _formulas = (
        Formula(MetricName.HINDSIGHT_TARGET_PR, _target_index, PR_STATES[:2], _OPTION),
        Formula(MetricName.HINDSIGHT_TARGET_PRECISION, _target_precision, PR_STATES[:2], _OPTION),
        Formula(MetricName.HINDSIGHT_TARGET_RECALL, _target_recall, PR_STATES, _OPTION),
    )

    def __init__(self, *args: Any, target_precision: float = 0.5, **kwargs: Any) -> None:
        if not 0.0 <= float(target_precision) <= 1.0:
            raise ValueError(
                f"target_precision must be in [0, 1], got {target_precision!r}; pass the "
                "precision the threshold must reach"
            )
        self._target_precision = float(target_precision)
        super().__init__(*args, **kwargs)

    def _state_shape(self) -> tuple[int, ...]:
        return (self._n_tasks, THRESHOLD_GRANULARITY)

    def _formula_options(self) -> dict[str, Any]:
        return {"target_precision": self._target_precision}


class HindsightTargetPRMetric(RecMetric):
    """TorchRec's HindsightTargetPRMetric (module docstring)."""

    _namespace = MetricNamespace.HINDSIGHT_TARGET_PR
    _computation_class = HindsightTargetPRMetricComputation
