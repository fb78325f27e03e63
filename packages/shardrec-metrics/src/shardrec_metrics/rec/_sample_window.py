"""The shared shape of ranking metrics (AUC, AUPRC): the last window of samples, gathered.

A ranking metric is not a sum over samples, so each rank keeps its last `window_size`
samples (to the sample: the oldest batch is cut, as TorchRec) as (n_tasks, N) float32
predictions, labels and weights; `compute` concatenates every rank's samples and ranks them.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor

from shardrec_metrics.rec.computation import BatchComputation, MetricComputationReport
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricPrefix

PREDICTIONS = "predictions"
LABELS = "labels"
WEIGHTS = "weights"
_SAMPLE_STATES = (PREDICTIONS, LABELS, WEIGHTS)

PerTask = Callable[[Tensor, Tensor, Tensor], Tensor]


class SampleWindowComputation(BatchComputation, abc.ABC):
    """Keeps the last `window_size` samples of this rank per task and reports
    `_metric_name`: `_of_samples(predictions, labels, weights)` of each task's samples."""

    _metric_name: ClassVar[MetricName]
    _of_samples: ClassVar[Callable[..., Tensor]]  # a PerTask function

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in _SAMPLE_STATES:
            self._add_state(
                name, [], add_window_state=False, dist_reduce_fx="cat", persistent=False
            )

    def _samples(self, name: str) -> Tensor:
        chunks: list[Tensor] = getattr(self, name)
        if not chunks:
            return torch.zeros((self._n_tasks, 0), dtype=torch.float32)
        if len(chunks) > 1:
            setattr(self, name, [torch.cat(chunks, dim=1)])  # concatenate once, keep the result
        kept: list[Tensor] = getattr(self, name)
        return kept[0]

    def _add_batch(
        self, predictions: Tensor, labels: Tensor, weights: Tensor, **kwargs: Any
    ) -> None:
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
        return [
            MetricComputationReport(
                name=self._metric_name,
                metric_prefix=MetricPrefix.WINDOW,
                value=self.per_task(self._value_of_samples),
            )
        ]
