"""AUC over the window of samples (TorchRec reports no lifetime AUC: memory would grow forever).

The value is the exact weighted ROC AUC (`shardrec_metrics.auc`): the chance that a random
positive outranks a random negative, ties counting one half. 0.5 (no signal) when only one
class, or no sample, has weight. Fractional labels count as that share positive.

With `grouped_auc=True` each sample also carries a group key (the required input
`grouping_keys`, one per sample) kept over the same window, and `window_grouped_auc` is the
mean over the window's groups of each group's AUC (0.5 without samples), as TorchRec.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch
from torch import Tensor

from shardrec_metrics.auc import _auc_of_samples
from shardrec_metrics.rec._reductions import state_reduction
from shardrec_metrics.rec._sample_window import (
    GROUPING_KEYS,
    SampleWindowComputation,
    SampleWindowMetric,
    each_task,
    mean_over_groups,
)
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace

__all__ = [
    "GROUPING_KEYS",
    "AUCMetric",
    "AUCMetricComputation",
    "compute_auc",
    "compute_auc_per_group",
]


NO_SIGNAL = 0.5

# TorchRec's name for the reduction of its sample states (private there; its tests use it)
_state_reduction = state_reduction


def _auc(predictions: Tensor, labels: Tensor, weights: Tensor, apply_bin: bool = False) -> Tensor:
    if apply_bin:
        labels = (labels >= 0.039).to(labels.dtype)
    value = _auc_of_samples(torch.stack([predictions.float(), labels.float(), weights.float()]))
    # float32, as TorchRec (its AUC states and value are float32)
    return torch.tensor(NO_SIGNAL if math.isnan(value) else value, dtype=torch.float32)


def compute_auc(
    n_tasks: int,
    predictions: list[Tensor] | Tensor,
    labels: list[Tensor] | Tensor,
    weights: list[Tensor] | Tensor,
    apply_bin: bool = False,
) -> Tensor:
    """(n_tasks,) AUC of (n_tasks, N) samples (or lists of such blocks, concatenated)."""
    return each_task(partial(_auc, apply_bin=apply_bin), n_tasks, predictions, labels, weights)


def compute_auc_per_group(
    n_tasks: int,
    predictions: list[Tensor] | Tensor,
    labels: list[Tensor] | Tensor,
    weights: list[Tensor] | Tensor,
    grouping_keys: Tensor,
) -> Tensor:
    """(n_tasks,) mean over the groups of `grouping_keys` (N,) of each group's AUC; 0.5
    without samples."""
    p, y, w = (
        torch.cat(t, dim=-1) if isinstance(t, list) else t for t in (predictions, labels, weights)
    )
    p, y, w = (t.reshape(n_tasks, -1) for t in (p, y, w))
    return torch.stack(
        [mean_over_groups(_auc, p[t], y[t], w[t], grouping_keys, NO_SIGNAL) for t in range(n_tasks)]
    )


class AUCMetricComputation(SampleWindowComputation):
    """Window AUC per task; `apply_bin` makes labels >= 0.039 positive; `grouped_auc` adds
    the mean per-group AUC (module docstring)."""

    _metric_name = MetricName.AUC
    _grouped_report = MetricName.GROUPED_AUC

    def __init__(self, *args: Any, apply_bin: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._apply_bin = apply_bin

    def _value_of_samples(self, predictions: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
        return _auc(predictions, labels, weights, self._apply_bin)


class AUCMetric(SampleWindowMetric):
    _namespace = MetricNamespace.AUC
    _computation_class = AUCMetricComputation
