"""The shared shape of thresholded metrics (accuracy, precision, recall): p >= threshold is 1."""

from __future__ import annotations

from typing import Any

from shardrec_metrics.rec._sum_computation import SumStatesComputation


class ThresholdedComputation(SumStatesComputation):
    """A sum-states computation with a decision `threshold` in [0, 1] (default 0.5)."""

    _needs_weights = False

    def __init__(self, *args: Any, threshold: float = 0.5, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if isinstance(threshold, bool) or not 0.0 <= float(threshold) <= 1.0:
            raise ValueError(f"threshold must be a probability in [0, 1], got {threshold!r}")
        self._threshold = float(threshold)

    def _batch_sums_args(self) -> tuple[Any, ...]:
        return (self._threshold,)
