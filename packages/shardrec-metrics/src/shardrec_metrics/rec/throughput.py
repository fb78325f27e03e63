"""TorchRec's ThroughputMetric: trained examples over all ranks per second, after a warmup.

Every `update()` is one step of `batch_size * world_size` examples (or the current
`BatchSizeStage`'s batch size). The first `warmup_steps` steps only count examples; after
them, lifetime throughput = examples after warmup / seconds after warmup, window throughput =
examples of the steps within the last `window_seconds` / their seconds. No collective: the
count is batch size times world size. The clock is `time.monotonic` of this module.
"""

from __future__ import annotations

import collections
import copy
import math
import time

import torch
from torch import Tensor, nn

from shardrec_metrics.rec.metrics_config import BatchSizeStage
from shardrec_metrics.rec.metrics_namespace import (
    MetricName,
    MetricNamespace,
    MetricPrefix,
    compose_metric_key,
)

__all__ = ["MAX_WINDOW_TS", "ThroughputMetric"]

MAX_WINDOW_TS = 2 * 60 * 60  # seconds; a longer window would report stale rates


def _key(name: MetricName, prefix: MetricPrefix = MetricPrefix.DEFAULT) -> str:
    ns = MetricNamespace.THROUGHPUT
    return compose_metric_key(ns, str(ns), name, prefix)


class ThroughputMetric(nn.Module):
    """Examples per second over all ranks: `throughput-throughput|lifetime_throughput`, ..."""

    _namespace = MetricNamespace.THROUGHPUT
    _metric_name = MetricName.THROUGHPUT

    def __init__(
        self,
        *,
        batch_size: int,
        world_size: int,
        window_seconds: int,
        warmup_steps: int = 100,
        batch_size_stages: list[BatchSizeStage] | None = None,
    ) -> None:
        super().__init__()
        if window_seconds < 1:
            raise ValueError(
                "window_seconds must be at least 1 to give window throughput the minimum time "
                f"window, got {window_seconds}"
            )
        if warmup_steps < 1:
            raise ValueError(
                "warmup_steps must be at least 1 to give throughput a reasonable begin time, "
                f"got {warmup_steps}"
            )
        self._batch_size = batch_size
        self._world_size = world_size
        self._window_seconds = min(window_seconds, MAX_WINDOW_TS)
        self._warmup_steps = warmup_steps
        self._batch_size_stages = copy.deepcopy(batch_size_stages)
        if self._batch_size_stages is not None:
            # the iteration count picks the stage; checkpointed as `num_batch` (hooks below)
            self._num_batch = 0
        # torch leaves both registration methods unannotated
        self._register_load_state_dict_pre_hook(self.load_state_dict_hook)  # type: ignore[no-untyped-call]
        self.register_state_dict_post_hook(self.state_dict_hook)  # type: ignore[no-untyped-call]
        self.total_examples: Tensor
        self.warmup_examples: Tensor
        self.time_lapse_after_warmup: Tensor
        self.attempt_examples: Tensor
        self.attempt_warmup_examples: Tensor
        self.attempt_time_lapse_after_warmup: Tensor
        self.register_buffer("total_examples", torch.tensor(0, dtype=torch.long))
        self.register_buffer("warmup_examples", torch.tensor(0, dtype=torch.long))
        self.register_buffer("time_lapse_after_warmup", torch.tensor(0, dtype=torch.double))
        self.register_buffer(
            "attempt_examples", torch.tensor(0, dtype=torch.long), persistent=False
        )
        self.register_buffer(
            "attempt_warmup_examples", torch.tensor(0, dtype=torch.long), persistent=False
        )
        self.register_buffer(
            "attempt_time_lapse_after_warmup", torch.tensor(0, dtype=torch.double), persistent=False
        )
        self._window_lapses: collections.deque[float] = collections.deque(maxlen=MAX_WINDOW_TS)
        self._window_time_lapse = 0.0
        self._previous_ts = 0.0
        self._steps = 0
        self._lifetime_throughput_key = _key(MetricName.THROUGHPUT, MetricPrefix.LIFETIME)
        self._window_throughput_key = _key(MetricName.THROUGHPUT, MetricPrefix.WINDOW)
        self._attempt_throughput_key = _key(MetricName.THROUGHPUT, MetricPrefix.ATTEMPT)
        self._total_examples_key = _key(MetricName.TOTAL_EXAMPLES)
        self._attempt_examples_key = _key(MetricName.ATTEMPT_EXAMPLES)
        self._batch_size_key = _key(MetricName.BATCH_SIZE)

    def set_num_batch(self, num_batch: int) -> None:
        if self._batch_size_stages is not None:
            self._num_batch = num_batch

    @staticmethod
    def state_dict_hook(
        module: nn.Module, state_dict: dict[str, Tensor], prefix: str, local_metadata: object
    ) -> None:
        """Adds `<prefix>num_batch` when the module follows batch size stages."""
        if getattr(module, "_batch_size_stages", None) is not None:
            state_dict[f"{prefix}num_batch"] = torch.tensor(module._num_batch, dtype=torch.long)

    def load_state_dict_hook(
        self, state_dict: dict[str, Tensor], prefix: str, *_unused: object
    ) -> None:
        """Restores the iteration count saved by `state_dict_hook` (ignored without stages)."""
        saved = state_dict.pop(f"{prefix}num_batch", None)
        if saved is not None and self._batch_size_stages is not None:
            self._num_batch = int(saved.item())

    def _get_batch_size(self) -> int:
        if not self._batch_size_stages:
            return self._batch_size
        for stage in self._batch_size_stages:
            if stage.max_iters is None or self._num_batch <= stage.max_iters:
                return stage.batch_size
        return self._batch_size_stages[-1].batch_size

    def _batch_examples(self) -> int:
        return self._get_batch_size() * self._world_size

    def update(self) -> None:
        """One trained step on every rank, ending now."""
        now = time.monotonic()
        self._steps += 1
        if self._batch_size_stages is not None:
            self._num_batch += 1
        examples = self._batch_examples()
        self.total_examples += examples
        self.attempt_examples += examples
        if self._steps <= self._warmup_steps:
            self.warmup_examples += examples
            self.attempt_warmup_examples += examples
            if self._steps == self._warmup_steps:
                self._previous_ts = now
            return
        lapse = now - self._previous_ts
        self.time_lapse_after_warmup += lapse
        self.attempt_time_lapse_after_warmup += lapse
        self._window_time_lapse += lapse
        self._window_lapses.append(lapse)
        while self._window_time_lapse > self._window_seconds:
            self._window_time_lapse -= self._window_lapses.popleft()
        self._previous_ts = now

    def compute(self) -> dict[str, Tensor]:
        """Example counts always; rates once past warmup with time elapsed."""
        out: dict[str, Tensor] = {
            self._total_examples_key: self.total_examples,
            self._attempt_examples_key: self.attempt_examples,
        }
        lapse = float(self.time_lapse_after_warmup)
        if self._steps > self._warmup_steps and not math.isclose(lapse, 0):
            lifetime = (self.total_examples - self.warmup_examples) / self.time_lapse_after_warmup
            attempt = (
                self.attempt_examples - self.attempt_warmup_examples
            ) / self.attempt_time_lapse_after_warmup
            window = 0.0
            if not math.isclose(self._window_time_lapse, 0):
                window = len(self._window_lapses) * self._batch_examples() / self._window_time_lapse
            if not math.isclose(float(lifetime), 0):
                out[self._lifetime_throughput_key] = lifetime.clone().detach()
                out[self._window_throughput_key] = torch.tensor(window, dtype=torch.double)
            if not math.isclose(float(attempt), 0):
                out[self._attempt_throughput_key] = attempt.clone().detach()
        if self._batch_size_stages is not None:
            out[self._batch_size_key] = torch.tensor(self._get_batch_size(), dtype=torch.int32)
        return out
