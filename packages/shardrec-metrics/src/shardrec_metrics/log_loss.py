"""Log loss: the weighted mean binary cross entropy, in nats (what BCE training losses print).

Predictions are clamped to [1e-12, 1 - 1e-12] as for NE. TorchRec's `include_logloss` reports
the same quantity in bits, that is ours / ln 2. No samples give NaN.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from shardrec_metrics._sums import SumState
from shardrec_metrics.ne import cross_entropy
from shardrec_metrics.rec_metric import NO_SAMPLES, RecMetric


class LogLoss(RecMetric):
    """Weighted mean binary cross entropy (natural log), lifetime and window."""

    name = "log_loss"

    def __init__(
        self, *, window_size: int = 100_000, process_group: dist.ProcessGroup | None = None
    ) -> None:
        super().__init__(window_size=window_size, process_group=process_group)
        # columns: weighted cross entropy (nats), weight
        self._sums = SumState(2, window_size)

    def reset(self) -> None:
        self._sums.clear()

    def _update(self, predictions: Tensor, labels: Tensor, weights: Tensor) -> None:
        ce = cross_entropy(predictions, labels, weights)
        self._sums.add(torch.stack([ce, weights.double()]))

    def _compute(self, group: dist.ProcessGroup | None) -> tuple[float, float]:
        lifetime, window = self._sums.totals(group)
        return _mean(lifetime), _mean(window)


def _mean(sums: Tensor) -> float:
    ce, weight = (float(v) for v in sums.tolist())
    return ce / weight if weight > 0 else NO_SAMPLES
