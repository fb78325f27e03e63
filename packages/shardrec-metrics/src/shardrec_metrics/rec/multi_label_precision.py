"""Multi-label precision: per label, weighted TP / (TP + FP) of integer-encoded label sets.

Predictions and labels are integers whose bits, least significant first, say which of the
`num_labels` labels are on (5 = 0b101: labels 0 and 2). Per task and label, TP sums the
weight of samples predicting the label that have it, FP of those predicting it without it;
precision is 0 without predictions. Reported per label, lifetime and window, with the label's
name appended as description (TorchRec's keys):
`multi_label_precision-<task>|lifetime_multi_label_precision<name>`. Sums, so exact across
ranks.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from shardrec_metrics._validate import check_int_at_least
from shardrec_metrics.rec._sum_computation import Formula, SumStatesComputation, ratio_or_zero
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric

__all__ = [
    "MultiLabelPrecisionMetric",
    "MultiLabelPrecisionMetricComputation",
    "compute_multi_label_precision",
    "decode_integer_to_labels",
    "get_multi_label_precision_states",
]


def compute_multi_label_precision(
    num_true_positives: Tensor, num_false_positives: Tensor
) -> Tensor:
    return ratio_or_zero(num_true_positives, num_true_positives + num_false_positives)


def decode_integer_to_labels(tensor: Tensor, num_labels: int) -> Tensor:
    """(..., num_labels) 0/1 bits of integer-valued `tensor`, least significant first."""
    if bool((tensor < 0).any()) or bool((tensor != torch.round(tensor)).any()):
        raise ValueError(
            f"multi-label predictions and labels must be integers >= 0 (bit sets), got "
            f"{tensor.flatten()[:8].tolist()}...; encode label i as bit i"
        )
    bits = 2 ** torch.arange(num_labels, device=tensor.device)
    return (tensor.long()[..., None] // bits) % 2


def get_multi_label_precision_states(
    labels: Tensor, predictions: Tensor, weights: Tensor, num_labels: int
) -> dict[str, Tensor]:
    """(n_tasks, num_labels) weighted TP and FP sums of (n_tasks, B) integer-encoded inputs."""
    predicted = decode_integer_to_labels(predictions, num_labels).double()
    actual = decode_integer_to_labels(labels, num_labels).double()
    w = weights.double()[..., None]
    return {
        "true_pos_sum": (w * predicted * actual).sum(dim=-2),
        "false_pos_sum": (w * predicted * (1.0 - actual)).sum(dim=-2),
    }


class MultiLabelPrecisionMetricComputation(SumStatesComputation):
    """Per-label precision; takes `num_labels` (>= 1) and `label_names` (default
    `label_0`, `label_1`, ...)."""

    _needs_weights = False
    _state_names = ("true_pos_sum", "false_pos_sum")
    _batch_sums = staticmethod(get_multi_label_precision_states)
    _formulas = (
        Formula(MetricName.MULTI_LABEL_PRECISION, compute_multi_label_precision, _state_names),
    )

    def __init__(
        self,
        *args: Any,
        num_labels: int = 1,
        label_names: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        check_int_at_least("num_labels", num_labels, 1, "the number of bits each input encodes")
        names = [f"label_{i}" for i in range(num_labels)] if label_names is None else label_names
        if len(names) != num_labels:
            raise ValueError(
                f"label_names has {len(names)} names for num_labels={num_labels}; pass one "
                "name per label (or none)"
            )
        self._num_labels = num_labels
        self._label_names = list(names)
        super().__init__(*args, **kwargs)

    def _state_shape(self) -> tuple[int, ...]:
        return (self._n_tasks, self._num_labels)

    def _batch_sums_args(self) -> tuple[Any, ...]:
        return (self._num_labels,)

    # Checkpoints: TorchRec's keys, one (n_tasks,) column per label and state
    # (`true_pos_sum_<label name>`, `false_pos_sum_<label name>`), so a checkpoint of either
    # library loads into the other (one task per computation, the default mode: TorchRec's
    # (1,) states exactly).

    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for state in self._state_names:
            whole = destination.pop(prefix + state, None)
            if whole is None:
                continue
            for i, name in enumerate(self._label_names):
                column = whole[:, i]
                destination[f"{prefix}{state}_{name}"] = column if keep_vars else column.clone()

    def _load_from_state_dict(
        self,
        state_dict: Any,
        prefix: str,
        local_metadata: Any,
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        for state in self._state_names:
            keys = [f"{prefix}{state}_{name}" for name in self._label_names]
            if all(k in state_dict for k in keys):
                columns = [state_dict.pop(k).reshape(self._n_tasks) for k in keys]
                state_dict[prefix + state] = torch.stack(columns, dim=1)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def _compute(self) -> list[MetricComputationReport]:
        # each label's lifetime then window value, under its name (TorchRec's order)
        per_scope = [(r.metric_prefix, r.value) for r in super()._compute()]
        return [
            MetricComputationReport(
                name=MetricName.MULTI_LABEL_PRECISION,
                metric_prefix=prefix,
                value=value[..., i],
                description=name,
            )
            for i, name in enumerate(self._label_names)
            for prefix, value in per_scope
        ]


class MultiLabelPrecisionMetric(RecMetric):
    """TorchRec's MultiLabelPrecisionMetric (module docstring)."""

    _namespace = MetricNamespace.MULTI_LABEL_PRECISION
    _computation_class = MultiLabelPrecisionMetricComputation
