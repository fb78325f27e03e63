"""Recalibration of predictions made on negatively downsampled data (TorchRec's
`ne_with_recalibration` and `calibration_with_recalibration`).

A model trained with a fraction `c` of its negatives kept predicts odds 1/c too high; the
recalibrated prediction has its odds scaled by `c`:

    p' = p / (p + (1 - p) / c)

A recalibrated metric is its plain metric's computation (states, sums and formulas) fed p'.
"""

from __future__ import annotations

import math
from typing import Any

from torch import Tensor

from shardrec_metrics.rec._sum_computation import SumStatesComputation

__all__ = ["RecalibratedComputation", "recalibrate"]


def recalibrate(predictions: Tensor, coefficient: float) -> Tensor:
    """p / (p + (1 - p) / coefficient), in float64."""
    p = predictions.double()
    return p / (p + (1.0 - p) / coefficient)


class RecalibratedComputation(SumStatesComputation):
    """Put before a sum-states computation in the bases: its batches are recalibrated first.
    Takes `recalibration_coefficient` (TorchRec's default 1.0 leaves predictions unchanged)."""

    def __init__(self, *args: Any, recalibration_coefficient: float = 1.0, **kwargs: Any) -> None:
        coefficient = float(recalibration_coefficient)
        if not (math.isfinite(coefficient) and coefficient > 0.0):
            raise ValueError(
                f"recalibration_coefficient must be a finite number > 0, got "
                f"{recalibration_coefficient!r}; pass the fraction of negatives kept in "
                "training (e.g. 0.1 when 1 in 10 was kept), or 1.0 for no recalibration"
            )
        self._recalibration_coefficient = coefficient
        super().__init__(*args, **kwargs)

    def _add_batch(
        self, predictions: Tensor, labels: Tensor, weights: Tensor, **kwargs: Any
    ) -> None:
        recalibrated = recalibrate(predictions, self._recalibration_coefficient)
        super()._add_batch(recalibrated, labels, weights, **kwargs)
