"""The shared shape of ranking metrics (AUC, AUPRC): the last window of samples, gathered.

A ranking metric is not a sum over samples, so each rank keeps its last `window_size`
samples (to the sample: the oldest batch is cut, as TorchRec) as (n_tasks, N) float32
predictions, labels and weights; `compute` concatenates every rank's samples and ranks them.

A grouped computation (TorchRec's `grouped_auc`, `grouped_rauc`) also keeps one group key per
sample (the required input `grouping_keys`) over the same window, and reports the mean over
the window's groups of each group's value.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor

from shardrec_metrics.rec.computation import (
    BatchComputation,
    MetricComputationReport,
    RecMetricException,
)
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricPrefix
from shardrec_metrics.rec.rec_metric import RecMetric

PREDICTIONS = "predictions"
LABELS = "labels"
WEIGHTS = "weights"
GROUPING_KEYS = "grouping_keys"
_SAMPLE_STATES = (PREDICTIONS, LABELS, WEIGHTS)

PerTask = Callable[[Tensor, Tensor, Tensor], Tensor]


def each_task(
    fn: PerTask,
    n_tasks: int,
    predictions: list[Tensor] | Tensor,
    labels: list[Tensor] | Tensor,
    weights: list[Tensor] | Tensor,
) -> Tensor:
    """(n_tasks,) `fn` of each task's row of (n_tasks, N) samples (or of lists of such blocks,
    concatenated): the public `compute_auc`/`compute_rauc`/`compute_auprc` functions."""
    p, y, w = (
        torch.cat(t, dim=-1) if isinstance(t, list) else t for t in (predictions, labels, weights)
    )
    p, y, w = (t.reshape(n_tasks, -1) for t in (p, y, w))
    return torch.stack([fn(p[i], y[i], w[i]) for i in range(n_tasks)])


def mean_over_groups(
    fn: PerTask, predictions: Tensor, labels: Tensor, weights: Tensor, keys: Tensor, empty: float
) -> Tensor:
    """Mean over the groups of `keys` (one per sample) of `fn` of each group's samples;
    `empty` without samples."""
    keys = keys.reshape(-1)
    groups = torch.unique(keys)
    if groups.numel() == 0:
        return torch.tensor(empty, dtype=torch.float32)
    values = [fn(predictions[m], labels[m], weights[m]) for m in (keys == g for g in groups)]
    return torch.stack([v.reshape(()) for v in values]).mean()


class SampleWindowComputation(BatchComputation, abc.ABC):
    """Keeps the last `window_size` samples of this rank per task and reports
    `_metric_name`: `_of_samples(predictions, labels, weights)` of each task's samples."""

    _metric_name: ClassVar[MetricName]
    _of_samples: ClassVar[Callable[..., Tensor]]  # a PerTask function

    # The grouped report a metric can add; its value is also the constructor's keyword that
    # turns it on (TorchRec's `grouped_auc`, `grouped_rauc`, `grouped_auprc`).
    _grouped_report: ClassVar[MetricName | None] = None
    _grouped: MetricName | None = None  # the grouped report's name, when grouped
    _no_signal: float = 0.5  # a grouped value without samples

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        report = self._grouped_report
        grouped = report is not None and bool(kwargs.pop(report.value, False))
        super().__init__(*args, **kwargs)
        for name in _SAMPLE_STATES:
            self._add_state(
                name, [], add_window_state=False, dist_reduce_fx="cat", persistent=False
            )
        if grouped and report is not None:
            self._group_by_keys(report)

    def _group_by_keys(self, report: MetricName) -> None:
        """Also keep `grouping_keys` and report `report`, the mean value over the groups."""
        self._grouped = report
        # one key per sample, in each task's row, so that it windows and gathers as samples do
        self._add_state(
            GROUPING_KEYS, [], add_window_state=False, dist_reduce_fx="cat", persistent=False
        )

    def _samples(self, name: str) -> Tensor:
        chunks: list[Tensor] = getattr(self, name)
        if not chunks:
            return torch.zeros((self._n_tasks, 0), dtype=torch.float32)
        if len(chunks) > 1:
            setattr(self, name, [torch.cat(chunks, dim=1)])  # concatenate once, keep the result
        kept: list[Tensor] = getattr(self, name)
        return kept[0]

    # The window is a Python list of per-batch tensors whose length and sizes change every
    # step: traced by torch.compile, each step would guard on them and recompile. Kept out of
    # the compiled graph (the update of a compiled `RecMetric.update` runs this eagerly).
    @torch.compiler.disable  # type: ignore[untyped-decorator,unused-ignore]
    def _add_batch(
        self, predictions: Tensor, labels: Tensor, weights: Tensor, **kwargs: Any
    ) -> None:
        keys = self._batch_keys(labels.shape[-1], kwargs) if self._grouped else None
        self._add_samples(predictions, labels, weights)
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

    def _batch_keys(self, n: int, kwargs: dict[str, Any]) -> Tensor:
        keys: Tensor | None = (kwargs.get("required_inputs") or {}).get(GROUPING_KEYS)
        if keys is None:
            raise RecMetricException(
                f"Input '{GROUPING_KEYS}' are required for {type(self).__name__} grouped "
                f"update: pass required_inputs={{'{GROUPING_KEYS}': one key per sample}}"
            )
        keys = keys.reshape(-1)
        if keys.numel() != n:
            raise ValueError(
                f"{GROUPING_KEYS} has {keys.numel()} values for a batch of {n} samples; "
                "pass one key per sample"
            )
        return keys

    def _add_samples(self, predictions: Tensor, labels: Tensor, weights: Tensor) -> None:
        new = {PREDICTIONS: predictions.float(), LABELS: labels.float(), WEIGHTS: weights.float()}
        for name, value in new.items():
            chunks: list[Tensor] = getattr(self, name)
            chunks.append(value.detach())
        chunks = getattr(self, PREDICTIONS)
        excess = sum(c.shape[-1] for c in chunks) - self._window_size
        # drop whole old batches, then cut the oldest kept one: no copy of the window
        while excess > 0 and chunks[0].shape[-1] <= excess:
            excess -= chunks[0].shape[-1]
            for name in _SAMPLE_STATES:
                getattr(self, name).pop(0)
        if excess > 0:
            for name in _SAMPLE_STATES:
                kept: list[Tensor] = getattr(self, name)
                kept[0] = kept[0][:, excess:]

    def per_task(self, fn: PerTask) -> Tensor:
        """(n_tasks,) values of `fn(predictions, labels, weights)` over each task's samples."""
        p, y, w = (self._samples(n) for n in _SAMPLE_STATES)
        return torch.stack([fn(p[t], y[t], w[t]).reshape(()) for t in range(self._n_tasks)])

    def _value_of_samples(self, predictions: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
        return self._of_samples(predictions, labels, weights)

    def _compute(self) -> list[MetricComputationReport]:
        reports = [
            MetricComputationReport(
                name=self._metric_name,
                metric_prefix=MetricPrefix.WINDOW,
                value=self.per_task(self._value_of_samples),
            )
        ]
        if self._grouped is not None:
            keys = self._samples(GROUPING_KEYS)
            p, y, w = (self._samples(n) for n in _SAMPLE_STATES)
            value = torch.stack(
                [
                    mean_over_groups(
                        self._value_of_samples, p[t], y[t], w[t], keys[t], self._no_signal
                    ).to(torch.float32)
                    for t in range(self._n_tasks)
                ]
            )
            reports.append(MetricComputationReport(self._grouped, MetricPrefix.WINDOW, value))
        return reports


class SampleWindowMetric(RecMetric):
    """A RecMetric of a SampleWindowComputation whose grouped report's keyword (TorchRec's
    `grouped_auc`, `grouped_rauc`) turns grouping on: `grouping_keys` becomes a required input,
    and a fused update (which would merge batches and their keys) is refused, as TorchRec."""

    _computation_class: ClassVar[type[SampleWindowComputation]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        report = self._computation_class._grouped_report
        flag = "" if report is None else report.value
        grouped = bool(flag) and bool(kwargs.get(flag))
        if grouped and kwargs.get("fused_update_limit", 0) > 0:
            raise RecMetricException(
                f"{flag}=True does not support fused update: pass fused_update_limit=0"
            )
        super().__init__(*args, **kwargs)
        if grouped:
            self._required_inputs.add(GROUPING_KEYS)
