"""Log loss: the weighted mean binary cross entropy, in nats (what BCE training losses print).

Predictions are clamped to [1e-12, 1 - 1e-12] as for NE. TorchRec's `include_logloss` reports
the same quantity in bits, that is ours / ln 2. No samples give NaN.
"""

from __future__ import annotations

from torch import Tensor

from shardrec_metrics._sums import SumMetric
from shardrec_metrics.ne import cross_entropy
from shardrec_metrics.rec_metric import NO_SAMPLES


class LogLoss(SumMetric):
    """Weighted mean binary cross entropy (natural log), lifetime and window."""

    name = "log_loss"
    _columns = 2  # weighted cross entropy (nats), weight

    def _per_sample(self, predictions: Tensor, labels: Tensor, weights: Tensor) -> list[Tensor]:
        return [cross_entropy(predictions, labels, weights), weights.double()]

    def _value(self, sums: list[float]) -> float:
        ce, weight = sums
        return ce / weight if weight > 0 else NO_SAMPLES
