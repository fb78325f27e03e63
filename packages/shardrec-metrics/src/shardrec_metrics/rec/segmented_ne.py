"""Segmented NE: NE (ne.py) per segment of the samples, segments given by grouping keys.

Every update takes, per grouping key, a required input of that name holding an int64 segment
index in [0, num_groups) per sample (floats are cast with `cast_keys_to_int=True`).
`grouping_keys` is one name (default "grouping_keys"), or a list of names, dicts
(`name`, `num_groups`, `cast_keys_to_int`) or GroupingKeyConfig. The four NE sums are kept per
(task, segment) for each key, with a window; each segment reports
`segmented_ne-<task>|lifetime_segmented_ne_<segment>` and `window_...` (and
`..._logloss_<segment>` with `include_logloss=True`); with several keys, or one not named
"grouping_keys" given in a list, the description ends in `@<key>` (TorchRec's keys). A segment
without weight reports NaN. Sums, so exact across ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from shardrec_metrics._validate import check_int_at_least
from shardrec_metrics.ne import ETA
from shardrec_metrics.rec.computation import BatchComputation, RecMetricException, required_input
from shardrec_metrics.rec.metrics_config import RecComputeMode, RecTaskInfo
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace, MetricPrefix
from shardrec_metrics.rec.ne import NE_STATES, compute_cross_entropy, compute_logloss, label_sums
from shardrec_metrics.rec.ne import compute_ne as _compute_ne
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric

__all__ = [
    "GroupingKeyConfig",
    "SegmentedNEMetric",
    "SegmentedNEMetricComputation",
    "compute_cross_entropy",
    "compute_logloss",
    "compute_ne",
    "get_segemented_ne_states",
]

GROUPING_KEYS = "grouping_keys"


@dataclass(frozen=True)
class GroupingKeyConfig:
    """One grouping key: its required input's name, its segment count, whether float keys
    are cast to int64."""

    name: str
    num_groups: int = 1
    cast_keys_to_int: bool = False

    def __post_init__(self) -> None:
        check_int_at_least("num_groups", self.num_groups, 1, "the number of segments it indexes")


GroupingKeys = str | list[str] | list[dict[str, Any]] | list[GroupingKeyConfig]


def _grouping_key_configs(
    grouping_keys: GroupingKeys, num_groups: int, cast_keys_to_int: bool
) -> list[GroupingKeyConfig]:
    """TorchRec's forms of `grouping_keys` as configs (names and dicts take the defaults)."""
    if isinstance(grouping_keys, str):
        return [GroupingKeyConfig(grouping_keys, num_groups, cast_keys_to_int)]
    configs = []
    for item in grouping_keys:
        if isinstance(item, str):
            item = GroupingKeyConfig(item, num_groups, cast_keys_to_int)
        elif isinstance(item, dict):
            defaults = {"num_groups": num_groups, "cast_keys_to_int": cast_keys_to_int}
            item = GroupingKeyConfig(**{**defaults, **item})
        configs.append(item)
    if not configs or len({c.name for c in configs}) != len(configs):
        raise ValueError(
            f"grouping_keys must name one or more distinct inputs, got {grouping_keys!r}"
        )
    return configs


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
    """NE per segment of each grouping key; takes `num_groups`, `include_logloss`,
    `grouping_keys` and `cast_keys_to_int` (module docstring)."""

    eta = ETA

    def __init__(
        self,
        *args: Any,
        include_logloss: bool = False,
        num_groups: int = 1,
        grouping_keys: GroupingKeys = GROUPING_KEYS,
        cast_keys_to_int: bool = False,
        **kwargs: Any,
    ) -> None:
        check_int_at_least("num_groups", num_groups, 1, "the number of segments the keys index")
        super().__init__(*args, **kwargs)
        self._include_logloss = include_logloss
        self._configs = _grouping_key_configs(grouping_keys, num_groups, cast_keys_to_int)
        single = isinstance(grouping_keys, str) or [c.name for c in self._configs] == [
            GROUPING_KEYS
        ]
        # TorchRec's names: a single default key has no state prefix and no key suffix
        self._prefix = {c.name: "" if single else f"{c.name}_" for c in self._configs}
        self._suffix = {c.name: "" if single else f"@{c.name}" for c in self._configs}
        for config in self._configs:
            for state in NE_STATES:
                zeros = torch.zeros((self._n_tasks, config.num_groups), dtype=torch.double)
                self._add_state(self._prefix[config.name] + state, zeros, persistent=True)

    def _add_batch(
        self, predictions: Tensor, labels: Tensor, weights: Tensor, **kwargs: Any
    ) -> None:
        for config in self._configs:
            keys = required_input(kwargs, config.name, "SegmentedNEMetricComputation")
            if keys.dtype != torch.int64 and config.cast_keys_to_int and keys.is_floating_point():
                keys = keys.to(torch.int64)
            if keys.dtype != torch.int64:
                raise RecMetricException(
                    f"grouping key {config.name!r} must be int64 (or floating point with "
                    f"cast_keys_to_int=True), got {keys.dtype}"
                )
            states = get_segemented_ne_states(
                labels, predictions, weights, keys, self.eta, config.num_groups
            )
            prefix = self._prefix[config.name]
            self._add_states({prefix + n: v for n, v in states.items()}, labels.shape[-1])

    def _state(self, name: str) -> Tensor:
        state = getattr(self, name)
        assert isinstance(state, Tensor)
        return state

    def _segment_values(self, prefix: str, window: bool) -> dict[MetricName, Tensor]:
        """(n_tasks, num_groups) NE (and log loss) of one key's lifetime or window states."""
        get = self.get_window_state if window else self._state
        ce, total, pos, neg = (get(prefix + s) for s in NE_STATES)
        values = {MetricName.SEGMENTED_NE: compute_ne(ce, total, pos, neg, 0, self.eta)}
        if self._include_logloss:
            values[MetricName.LOG_LOSS] = compute_logloss(ce, pos, neg, self.eta)
        return values

    def _compute(self) -> list[MetricComputationReport]:
        reports = []
        for config in self._configs:
            prefix, suffix = self._prefix[config.name], self._suffix[config.name]
            scopes = (
                (MetricPrefix.LIFETIME, self._segment_values(prefix, window=False)),
                (MetricPrefix.WINDOW, self._segment_values(prefix, window=True)),
            )
            # as TorchRec: a computation of one task (unfused mode) reports 0-d values
            one = self._compute_mode == RecComputeMode.UNFUSED_TASKS_COMPUTATION
            reports += [  # TorchRec's order: per metric, per segment, lifetime then window
                MetricComputationReport(
                    name, scope, values[name][0, g] if one else values[name][:, g], f"_{g}{suffix}"
                )
                for name in scopes[0][1]
                for g in range(config.num_groups)
                for scope, values in scopes
            ]
        return reports


class SegmentedNEMetric(RecMetric):
    """TorchRec's SegmentedNEMetric (module docstring); the grouping keys are required inputs."""

    _namespace = MetricNamespace.SEGMENTED_NE
    _computation_class = SegmentedNEMetricComputation

    def __init__(
        self, *args: Any, grouping_keys: GroupingKeys = GROUPING_KEYS, **kwargs: Any
    ) -> None:
        self._key_names = {c.name for c in _grouping_key_configs(grouping_keys, 1, False)}
        super().__init__(*args, grouping_keys=grouping_keys, **kwargs)

    def _get_task_required_inputs(self, task_config: RecTaskInfo | list[RecTaskInfo]) -> set[str]:
        return set(self._key_names)
