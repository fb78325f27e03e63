"""AUC over the window of samples (TorchRec reports no lifetime AUC: memory would grow forever).

The value is the exact weighted ROC AUC (`shardrec_metrics.auc`): the chance that a random
positive outranks a random negative, ties counting one half. 0.5 (no signal) when only one
class, or no sample, has weight. Fractional labels count as that share positive.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from shardrec_metrics.auc import _auc_of_samples
from shardrec_metrics.rec._sample_window import SampleWindowComputation
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric, RecMetricException

__all__ = ["AUCMetric", "AUCMetricComputation", "compute_auc"]

NO_SIGNAL = 0.5


def _auc(predictions: Tensor, labels: Tensor, weights: Tensor, apply_bin: bool = False) -> Tensor:
    if apply_bin:
        labels = (labels >= 0.039).to(labels.dtype)
    value = _auc_of_samples(torch.stack([predictions.float(), labels.float(), weights.float()]))
    return torch.tensor(NO_SIGNAL if math.isnan(value) else value, dtype=torch.double)


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


class AUCMetricComputation(SampleWindowComputation):
    """Window AUC per task; `apply_bin` makes labels >= 0.039 positive."""

    _metric_name = MetricName.AUC

    def __init__(
        self, *args: Any, grouped_auc: bool = False, apply_bin: bool = False, **kwargs: Any
    ) -> None:
        if grouped_auc:
            raise RecMetricException("grouped_auc is not supported by shardrec's AUCMetric")
        super().__init__(*args, **kwargs)
        self._apply_bin = apply_bin

    def _value_of_samples(self, predictions: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
        return _auc(predictions, labels, weights, self._apply_bin)


class AUCMetric(RecMetric):
    _namespace = MetricNamespace.AUC
    _computation_class = AUCMetricComputation
