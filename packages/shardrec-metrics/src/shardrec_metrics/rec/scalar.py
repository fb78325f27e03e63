"""Scalar: logs the value given as the label (TorchRec's ScalarMetric).

Each batch contributes its mean label. The lifetime value is the latest batch's mean label
(over ranks: the mean of every rank's latest batch mean); the window value is the mean of the
window's batch means (over ranks: of every rank's window batches). Both are ratios of sums
(`labels` / `window_count`, the count of batches behind `labels`), so exact across ranks.
Predictions and weights are ignored; an empty batch adds nothing.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation, ratio_or_zero
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import RecMetric

__all__ = ["ScalarMetric", "ScalarMetricComputation", "compute_scalar", "get_scalar_states"]


def compute_scalar(labels: Tensor, window_count: Tensor) -> Tensor:
    """The mean of the summed batch means `labels` over `window_count` batches (0 for none)."""
    return ratio_or_zero(labels, window_count)


def get_scalar_states(labels: Tensor, predictions: Tensor, weights: Tensor) -> dict[str, Tensor]:
    """One batch's mean label per task and its batch count (1 per task)."""
    return {
        "labels": labels.double().mean(dim=-1),
        "window_count": torch.ones(labels.shape[0], dtype=torch.double, device=labels.device),
    }


class ScalarMetricComputation(SumStatesComputation):
    _needs_weights = False
    _state_names = ("labels", "window_count")
    _checkpointed = False  # as TorchRec's: a checkpoint holds no scalar state
    _batch_sums = staticmethod(get_scalar_states)
    _formulas = (Formula(MetricName.SCALAR, compute_scalar, _state_names),)

    def _add_batch(
        self, predictions: Tensor, labels: Tensor, weights: Tensor, **kwargs: Any
    ) -> None:
        if labels.shape[-1] > 0:
            batch = self._batch_states(labels, predictions, weights)
            self._add_states(batch, labels.shape[-1], latest=True)


class ScalarMetric(RecMetric):
    _namespace = MetricNamespace.SCALAR
    _computation_class = ScalarMetricComputation
