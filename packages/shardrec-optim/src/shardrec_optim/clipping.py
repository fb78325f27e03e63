"""Gradient clipping before the wrapped optimizer's step (TorchRec's GradientClippingOptimizer).

Clips the `.grad` of the wrapped optimizer's parameters: NORM rescales all of them together so
that their joint `norm_type`-norm is at most `max_gradient` (`torch.nn.utils.clip_grad_norm_`);
VALUE clamps each element to `[-max_gradient, max_gradient]`. Fused embedding tables have no
`.grad` (their update happens inside backward), so they are not clipped here.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable

import torch

from shardrec_optim.keyed import KeyedOptimizer, OptimizerWrapper


class GradientClipping(enum.StrEnum):
    NORM = "norm"
    VALUE = "value"
    NONE = "none"


class GradientClippingOptimizer(OptimizerWrapper):
    """Clips gradients by norm or by value, then steps the wrapped optimizer.

    Args:
        optimizer: the KeyedOptimizer to wrap.
        clipping: NORM, VALUE or NONE (also the plain strings).
        max_gradient: the norm bound (NORM) or the element bound (VALUE); > 0.
        norm_type: p of the p-norm for NORM (`float("inf")` or "inf" allowed).
    """

    def __init__(
        self,
        optimizer: KeyedOptimizer,
        clipping: GradientClipping | str = GradientClipping.NONE,
        max_gradient: float = 0.1,
        norm_type: float | str = 2.0,
    ) -> None:
        super().__init__(optimizer)
        self._clipping = GradientClipping(clipping)
        if not (max_gradient > 0 and math.isfinite(max_gradient)):
            raise ValueError(f"max_gradient must be a finite number > 0, got {max_gradient!r}")
        p = float(norm_type)
        if not p > 0:
            raise ValueError(f"norm_type must be > 0 or 'inf', got {norm_type!r}")
        self._max_gradient = float(max_gradient)
        self._norm_type = p
        self._last_total_grad_norm: torch.Tensor | None = None

    @property
    def last_total_grad_norm(self) -> torch.Tensor | None:
        """The total gradient norm before clipping at the last NORM step (None before)."""
        return self._last_total_grad_norm

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]  # torch overloads on closure; one signature here
        params = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
        if params and self._clipping is GradientClipping.NORM:
            self._last_total_grad_norm = torch.nn.utils.clip_grad_norm_(
                params, max_norm=self._max_gradient, norm_type=self._norm_type
            )
        elif params and self._clipping is GradientClipping.VALUE:
            torch.nn.utils.clip_grad_value_(params, clip_value=self._max_gradient)
        return super().step(closure)
