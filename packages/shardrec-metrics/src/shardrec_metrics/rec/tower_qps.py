"""Tower QPS: examples per second over all ranks, for towers without a fixed batch size.

    tower_qps = sum over ranks of examples after warmup / max over ranks of seconds after warmup

Each task counts its own examples (its labels' length per batch). The first `warmup_steps`
updates only count examples (`warmup_examples`); the clock (`time.monotonic` of this module)
starts at the last of them (at construction when `warmup_steps` is 0), and every later update
adds the seconds since the previous one. The window holds the most recent batches of at most
the window size in examples, with their seconds. `total_examples` counts every example.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch
from torch import Tensor

from shardrec_metrics._validate import check_int_at_least
from shardrec_metrics.rec._sum_computation import ratio_or_zero
from shardrec_metrics.rec.computation import BatchComputation, RecMetricException
from shardrec_metrics.rec.metrics_config import BatchSizeStage
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace, MetricPrefix
from shardrec_metrics.rec.rec_metric import MetricComputationReport, RecMetric, RecModelOutput

__all__ = [
    "NUM_EXAMPLES",
    "TIME_LAPSE",
    "WARMUP_EXAMPLES",
    "WARMUP_STEPS",
    "TowerQPSMetric",
    "TowerQPSMetricComputation",
]

WARMUP_STEPS = 100
NUM_EXAMPLES = "num_examples"
WARMUP_EXAMPLES = "warmup_examples"
TIME_LAPSE = "time_lapse"


def _compute_tower_qps(num_examples: Tensor, time_lapse: Tensor) -> Tensor:
    """Examples per second, 0 where no time has passed."""
    return ratio_or_zero(num_examples.double(), time_lapse)


class TowerQPSMetricComputation(BatchComputation):
    _needs_weights = False

    def __init__(self, *args: Any, warmup_steps: int = WARMUP_STEPS, **kwargs: Any) -> None:
        meaning = "the number of first updates to leave out of the rate (TorchRec's default: 100)"
        check_int_at_least("warmup_steps", warmup_steps, 0, meaning)
        super().__init__(*args, **kwargs)
        self._warmup_steps = warmup_steps
        long = torch.zeros(self._n_tasks, dtype=torch.long)
        self._add_state(NUM_EXAMPLES, long, add_window_state=True, persistent=True)
        self._add_state(WARMUP_EXAMPLES, long, add_window_state=False, persistent=True)
        seconds = torch.zeros(self._n_tasks, dtype=torch.double)  # summed, max over ranks
        self._add_state(TIME_LAPSE, seconds, True, dist_reduce_fx="max", persistent=True)
        self._steps = 0
        self._previous_ts = time.monotonic()

    def _add_batch(
        self, predictions: Tensor, labels: Tensor, weights: Tensor, **kwargs: Any
    ) -> None:
        self._steps += 1
        n = labels.shape[-1]
        examples = torch.full((self._n_tasks,), n, dtype=torch.long)
        self._add_states({NUM_EXAMPLES: examples}, n, window=False)
        ts = time.monotonic()
        if self._steps <= self._warmup_steps:
            self._add_states({WARMUP_EXAMPLES: examples}, n, window=False)
        else:
            lapse = torch.full((self._n_tasks,), ts - self._previous_ts, dtype=torch.double)
            self._aggregate_window_state(NUM_EXAMPLES, examples, n)
            self._add_states({TIME_LAPSE: lapse}, n)
        if self._steps >= self._warmup_steps:
            self._previous_ts = ts

    def _state(self, name: str) -> Tensor:
        state = getattr(self, name)
        assert isinstance(state, Tensor)
        return state

    def _compute(self) -> list[MetricComputationReport]:
        after_warmup = self._state(NUM_EXAMPLES) - self._state(WARMUP_EXAMPLES)
        return [
            MetricComputationReport(
                name=MetricName.TOWER_QPS,
                metric_prefix=MetricPrefix.LIFETIME,
                value=_compute_tower_qps(after_warmup, self._state(TIME_LAPSE)),
            ),
            MetricComputationReport(
                name=MetricName.TOWER_QPS,
                metric_prefix=MetricPrefix.WINDOW,
                value=_compute_tower_qps(
                    self.get_window_state(NUM_EXAMPLES), self.get_window_state(TIME_LAPSE)
                ),
            ),
            MetricComputationReport(
                name=MetricName.TOTAL_EXAMPLES,
                metric_prefix=MetricPrefix.DEFAULT,
                value=self._state(NUM_EXAMPLES).detach(),
            ),
        ]


class TowerQPSMetric(RecMetric):
    """Tower QPS per task (module docstring). `update` reads only labels (predictions are
    ignored; a task missing from `labels` is skipped for that batch); a fused update
    (`fused_update_limit` > 0) would merge steps and is refused."""

    _namespace = MetricNamespace.TOWER_QPS
    _computation_class = TowerQPSMetricComputation

    def __init__(
        self, *args: Any, batch_size_stages: list[BatchSizeStage] | None = None, **kwargs: Any
    ) -> None:
        if kwargs.get("fused_update_limit", 0) > 0:
            raise RecMetricException("Fused update is not supported for tower QPS")
        super().__init__(*args, **kwargs)
        # kept as TorchRec keeps them; the examples counted are each batch's own size, so a
        # stage's batch size needs no lookup here
        self._batch_size_stages = copy.deepcopy(batch_size_stages)

    def update(
        self,
        *,
        predictions: RecModelOutput | None,
        labels: RecModelOutput,
        weights: RecModelOutput | None,
        **kwargs: Any,
    ) -> None:
        # as TorchRec: only labels count; a task without labels in this batch is skipped, and
        # one without weights counts as a valid update
        if isinstance(labels, dict) and isinstance(weights, dict):
            weights = {
                name: weights[name] if name in weights else torch.ones_like(lab, dtype=torch.double)
                for name, lab in labels.items()
            }
        super().update(predictions=labels, labels=labels, weights=weights, **kwargs)
