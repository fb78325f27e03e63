"""Segmented NE: NE (ne.py) per segment of the samples, segments given by a grouping key.

Every update takes a required input (named by `grouping_keys`, default "grouping_keys")
holding an int64 segment index in [0, num_groups) per sample (floats are cast with
`cast_keys_to_int=True`). The four NE sums are kept per (task, segment), with a window; each
segment reports `segmented_ne-<task>|lifetime_segmented_ne_<segment>` and `window_...` (and
`..._logloss_<segment>` with `include_logloss=True`). A segment without weight reports NaN.
Sums, so exact across ranks.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from shardrec_metrics._validate import check_int_at_least
from shardrec_metrics.ne import ETA
from shardrec_metrics.rec._sum_computation import StateGetter, SumStatesComputation
from shardrec_metrics.rec.computation import RecMetricException, required_input
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


class SegmentedNEMetricComputation(SumStatesComputation):
    """NE per segment; takes `num_groups` (>= 1), `include_logloss`, `grouping_keys` (the
    required input's name) and `cast_keys_to_int`."""

    eta = ETA
    _state_names = NE_STATES
    _batch_sums = staticmethod(get_segemented_ne_states)
    _formulas = ()  # per segment: `_compute`

    def __init__(
        self,
        *args: Any,
        include_logloss: bool = False,
        num_groups: int = 1,
        grouping_keys: str = GROUPING_KEYS,
        cast_keys_to_int: bool = False,
        **kwargs: Any,
    ) -> None:
        check_int_at_least("num_groups", num_groups, 1, "the number of segments the keys index")
        if not isinstance(grouping_keys, str):
            raise ValueError(
                f"grouping_keys must be one input name, got {grouping_keys!r}; shardrec keeps "
                "one grouping key per SegmentedNEMetric (make one metric per key)"
            )
        self._include_logloss = include_logloss
        self._num_groups = num_groups
        self._grouping_keys = grouping_keys
        self._cast_keys_to_int = cast_keys_to_int
        super().__init__(*args, **kwargs)

    def _state_shape(self) -> tuple[int, ...]:
        return (self._n_tasks, self._num_groups)

    def _add_batch(
        self, predictions: Tensor, labels: Tensor, weights: Tensor, **kwargs: Any
    ) -> None:
        keys = required_input(kwargs, self._grouping_keys, "SegmentedNEMetricComputation")
        if keys.dtype != torch.int64 and self._cast_keys_to_int and keys.is_floating_point():
            keys = keys.to(torch.int64)
        if keys.dtype != torch.int64:
            raise RecMetricException(
                f"grouping key {self._grouping_keys!r} must be int64 (or floating point with "
                f"cast_keys_to_int=True), got {keys.dtype}"
            )
        states = self._batch_sums(labels, predictions, weights, keys, self.eta, self._num_groups)
        self._add_states(states, labels.shape[-1])

    def _segment_values(self, get: StateGetter) -> dict[MetricName, Tensor]:
        """(n_tasks, num_groups) NE (and log loss) of the lifetime or window states."""
        ce, total, pos, neg = (get(s) for s in NE_STATES)
        ne = compute_ne(ce, total, pos, neg, self._num_groups, self.eta)
        values = {MetricName.SEGMENTED_NE: ne}
        if self._include_logloss:
            values[MetricName.LOG_LOSS] = compute_logloss(ce, pos, neg, self.eta)
        return values

    def _compute(self) -> list[MetricComputationReport]:
        scopes = (
            (MetricPrefix.LIFETIME, self._segment_values(self._lifetime)),
            (MetricPrefix.WINDOW, self._segment_values(self.get_window_state)),
        )
        return [  # TorchRec's order: per metric, per segment, lifetime then window
            MetricComputationReport(name, prefix, values[name][:, g], description=f"_{g}")
            for name in scopes[0][1]
            for g in range(self._num_groups)
            for prefix, values in scopes
        ]


class SegmentedNEMetric(RecMetric):
    """TorchRec's SegmentedNEMetric (module docstring); the grouping key is a required input."""

    _namespace = MetricNamespace.SEGMENTED_NE
    _computation_class = SegmentedNEMetricComputation

    def __init__(self, *args: Any, grouping_keys: str = GROUPING_KEYS, **kwargs: Any) -> None:
        self._grouping_keys = grouping_keys
        super().__init__(*args, grouping_keys=grouping_keys, **kwargs)

    def _get_task_required_inputs(self, task_config: RecTaskInfo | list[RecTaskInfo]) -> set[str]:
        return {self._grouping_keys}
