"""`MetricCollection`: several metrics fed the same batches, validated once."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from shardrec_metrics._validate import validated_inputs
from shardrec_metrics.rec_metric import RecMetric


class MetricCollection:
    """Updates, computes and resets `metrics` together.

    `compute` runs each metric's collectives in list order, so every rank must build the
    collection with the metrics in the same order.
    """

    def __init__(self, metrics: Sequence[RecMetric]) -> None:
        seen: dict[str, RecMetric] = {}
        for m in metrics:
            if not isinstance(m, RecMetric):
                raise TypeError(
                    f"MetricCollection holds RecMetric instances (AUC, NE, LogLoss, Accuracy), "
                    f"got {type(m).__name__}"
                )
            if m.name in seen:
                raise ValueError(
                    f"two metrics named {m.name!r} would write the same keys; keep one"
                )
            seen[m.name] = m
        self.metrics: tuple[RecMetric, ...] = tuple(metrics)

    def update(self, *, predictions: Tensor, labels: Tensor, weights: Tensor | None = None) -> None:
        """Validate the batch once and add it to every metric (shapes as `RecMetric.update`)."""
        inputs = validated_inputs(predictions, labels, weights)
        for m in self.metrics:
            m._update(*inputs)

    def compute(self) -> dict[str, float]:
        """Every metric's `compute` merged into one dict."""
        out: dict[str, float] = {}
        for m in self.metrics:
            out.update(m.compute())
        return out

    def reset(self) -> None:
        for m in self.metrics:
            m.reset()
