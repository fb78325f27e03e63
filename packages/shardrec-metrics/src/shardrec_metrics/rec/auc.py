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
from typing import Any

import torch
from torch import Tensor

from shardrec_metrics.auc import _auc_of_samples
from shardrec_metrics.rec._sample_window import PREDICTIONS, SampleWindowComputation
from shardrec_metrics.rec.computation import MetricComputationReport
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace, MetricPrefix
from shardrec_metrics.rec.rec_metric import RecMetric, RecMetricException

__all__ = [
    "GROUPING_KEYS",
    "AUCMetric",
    "AUCMetricComputation",
    "compute_auc",
    "compute_auc_per_group",
]

GROUPING_KEYS = "grouping_keys"

NO_SIGNAL = 0.5


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
    p, y, w = (
        torch.cat(t, dim=-1) if isinstance(t, list) else t for t in (predictions, labels, weights)
    )
    p, y, w = (t.reshape(n_tasks, -1) for t in (p, y, w))
    return torch.stack([_auc(p[i], y[i], w[i], apply_bin) for i in range(n_tasks)])


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
    keys = grouping_keys.reshape(-1)
    groups = torch.unique(keys)
    if groups.numel() == 0:
        return torch.full((n_tasks,), NO_SIGNAL, dtype=torch.float32)
    masks = [keys == g for g in groups]
    return torch.stack(
        [
            torch.stack([_auc(p[t][m], y[t][m], w[t][m]) for m in masks]).mean()
            for t in range(n_tasks)
        ]
    )


class AUCMetricComputation(SampleWindowComputation):
    """Window AUC per task; `apply_bin` makes labels >= 0.039 positive; `grouped_auc` adds
    the mean per-group AUC (module docstring)."""

    _metric_name = MetricName.AUC

    def __init__(
        self, *args: Any, grouped_auc: bool = False, apply_bin: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._apply_bin = apply_bin
        self._grouped_auc = grouped_auc
        if grouped_auc:  # one key per sample, per task row so it windows and gathers alike
            self._add_state(
                GROUPING_KEYS, [], add_window_state=False, dist_reduce_fx="cat", persistent=False
            )

    def _add_batch(
        self, predictions: Tensor, labels: Tensor, weights: Tensor, **kwargs: Any
    ) -> None:
        keys = None
        if self._grouped_auc:
            keys = (kwargs.get("required_inputs") or {}).get(GROUPING_KEYS)
            if keys is None:
                raise RecMetricException(
                    f"Input '{GROUPING_KEYS}' are required for AUCMetricComputation grouped "
                    f"update: pass required_inputs={{'{GROUPING_KEYS}': one key per sample}}"
                )
            n = labels.shape[-1]
            keys = keys.reshape(-1)
            if keys.numel() != n:
                raise ValueError(
                    f"{GROUPING_KEYS} has {keys.numel()} values for a batch of {n} samples; "
                    "pass one key per sample"
                )
        super()._add_batch(predictions, labels, weights, **kwargs)
        if keys is None:
            return
        chunks: list[Tensor] = getattr(self, GROUPING_KEYS)
        chunks.append(keys.detach().reshape(1, -1).expand(self._n_tasks, -1).clone())
        # keep as many keys as samples: the same cut as the sample window
        excess = sum(c.shape[-1] for c in chunks) - sum(
            c.shape[-1] for c in getattr(self, PREDICTIONS)
        )
        while excess > 0 and chunks[0].shape[-1] <= excess:
            excess -= chunks.pop(0).shape[-1]
        if excess > 0:
            chunks[0] = chunks[0][:, excess:]

    def _value_of_samples(self, predictions: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
        return _auc(predictions, labels, weights, self._apply_bin)

    def _compute(self) -> list[MetricComputationReport]:
        reports = super()._compute()
        if self._grouped_auc:
            keys = self._samples(GROUPING_KEYS)
            p, y, w = (self._samples(n) for n in ("predictions", "labels", "weights"))
            grouped = torch.stack(
                [
                    compute_auc_per_group(1, p[t : t + 1], y[t : t + 1], w[t : t + 1], keys[t])[0]
                    for t in range(self._n_tasks)
                ]
            )
            reports.append(
                MetricComputationReport(
                    name=MetricName.GROUPED_AUC, metric_prefix=MetricPrefix.WINDOW, value=grouped
                )
            )
        return reports


class AUCMetric(RecMetric):
    _namespace = MetricNamespace.AUC
    _computation_class = AUCMetricComputation

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("grouped_auc") and kwargs.get("fused_update_limit", 0) > 0:
            raise RecMetricException("Grouped AUC does not support fused update")
        super().__init__(*args, **kwargs)
        if kwargs.get("grouped_auc"):
            self._required_inputs.add(GROUPING_KEYS)
