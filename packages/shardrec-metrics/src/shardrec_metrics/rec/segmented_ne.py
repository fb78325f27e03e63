"""Segmented NE: NE (ne.py) per segment of the samples, segments given by `grouping_keys`.

Every update takes the required input `grouping_keys`, an int64 segment index in
[0, num_groups) per sample. The four NE sums are kept per (task, segment); each segment reports
its lifetime NE as `segmented_ne-<task>|lifetime_segmented_ne_<segment>` (and log loss as
`..._logloss_<segment>` with `include_logloss=True`). No window (as TorchRec). A segment
without samples reports NaN. Sums, so exact across ranks.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from shardrec_metrics._validate import check_int_at_least
from shardrec_metrics.ne import ETA
from shardrec_metrics.rec.computation import (
    BatchComputation,
    RecMetricException,
    required_input,
)
from shardrec_metrics.rec.metrics_config import RecTaskInfo
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace, MetricPrefix
from shardrec_metrics.rec.ne import NE_STATES, compute_cross_entropy, compute_logloss, label_sums
from shardrec_metrics.rec.ne import compute_ne as _compute_ne
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric

__all__ = [
    "SegmentedNEMetric",
    "SegmentedNEMetricComputation",
    "compute_cross_entropy",
    "compute_logloss",
    "compute_ne",
    "get_segemented_ne_states",
]

GROUPING_KEYS = "grouping_keys"


def compute_ne(
    ce_sum: Tensor,
    weighted_num_samples: Tensor,
    pos_labels: Tensor,
    neg_labels: Tensor,
    num_groups: int,
    eta: float,
) -> Tensor:
    """NE of every segment: inputs (..., num_groups), NaN for a segment without weight."""
    del num_groups  # TorchRec's signature; the shape says it
    ne = _compute_ne(ce_sum, weighted_num_samples, pos_labels, neg_labels, eta)
    return torch.where(weighted_num_samples > 0, ne, torch.full_like(ne, torch.nan))


def get_segemented_ne_states(
    labels: Tensor,
    predictions: Tensor,
    weights: Tensor,
    grouping_keys: Tensor,
    eta: float,
    num_groups: int,
) -> dict[str, Tensor]:
    """(n_tasks, num_groups) NE sums of (n_tasks, B) inputs and (B,) or (n_tasks, B) keys
    (TorchRec's name, spelling included)."""
    keys = grouping_keys.reshape(1, -1) if grouping_keys.dim() <= 1 else grouping_keys
    if (
        keys.dim() != 2
        or keys.shape[-1] != labels.shape[-1]
        or keys.shape[0] not in (1, len(labels))
    ):
        raise ValueError(
            f"grouping_keys of shape {tuple(grouping_keys.shape)} do not match the batch "
            f"{tuple(labels.shape)}; pass one segment index per sample"
        )
    if keys.numel() and (int(keys.min()) < 0 or int(keys.max()) >= num_groups):
        raise ValueError(
            f"grouping_keys hold {int(keys.min())}..{int(keys.max())}, outside [0, {num_groups}); "
            "pass segment indices below num_groups (or raise num_groups)"
        )
    keys = keys.expand_as(labels)
    per_sample = {
        "cross_entropy_sum": compute_cross_entropy(labels, predictions, weights, eta),
        **label_sums(labels[..., None], weights[..., None]),  # per sample: sums over one
    }
    out = {}
    for name, value in per_sample.items():
        sums = torch.zeros((labels.shape[0], num_groups), dtype=torch.double)
        out[name] = sums.scatter_add_(1, keys, value.reshape(labels.shape).double())
    return out


class SegmentedNEMetricComputation(BatchComputation):
    """NE per segment; takes `num_groups` (>= 1) and `include_logloss`."""

    eta = ETA

    def __init__(
        self, *args: Any, include_logloss: bool = False, num_groups: int = 1, **kwargs: Any
    ) -> None:
        check_int_at_least(
            "num_groups", num_groups, 1, "the number of segments grouping_keys index"
        )
        super().__init__(*args, **kwargs)
        self._include_logloss = include_logloss
        self._num_groups = num_groups
        for name in NE_STATES:
            zeros = torch.zeros((self._n_tasks, num_groups), dtype=torch.double)
            self._add_state(name, zeros, add_window_state=False, persistent=True)

    def _add_batch(
        self, predictions: Tensor, labels: Tensor, weights: Tensor, **kwargs: Any
    ) -> None:
        keys = required_input(kwargs, GROUPING_KEYS, "SegmentedNEMetricComputation")
        if keys.dtype != torch.int64:
            raise RecMetricException(f"grouping_keys must be int64, got {keys.dtype}")
        states = get_segemented_ne_states(
            labels, predictions, weights, keys, self.eta, self._num_groups
        )
        self._add_states(states, labels.shape[-1], window=False)

    def _compute(self) -> list[MetricComputationReport]:
        ce, total, pos, neg = (getattr(self, n) for n in NE_STATES)
        values = {
            MetricName.SEGMENTED_NE: compute_ne(ce, total, pos, neg, self._num_groups, self.eta)
        }
        if self._include_logloss:
            values[MetricName.LOG_LOSS] = compute_logloss(ce, pos, neg, self.eta)
        return [
            MetricComputationReport(
                name=name, metric_prefix=MetricPrefix.LIFETIME, value=v[:, g], description=f"_{g}"
            )
            for name, v in values.items()
            for g in range(self._num_groups)
        ]


class SegmentedNEMetric(RecMetric):
    """TorchRec's SegmentedNEMetric (module docstring); `grouping_keys` is a required input."""

    _namespace = MetricNamespace.SEGMENTED_NE
    _computation_class = SegmentedNEMetricComputation

    def _get_task_required_inputs(self, task_config: RecTaskInfo | list[RecTaskInfo]) -> set[str]:
        return {GROUPING_KEYS}
