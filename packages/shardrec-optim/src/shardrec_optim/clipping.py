"""Gradient clipping before the wrapped optimizer's step (TorchRec's GradientClippingOptimizer).

Clips the `.grad` of the wrapped optimizer's parameters: NORM rescales all of them together so
that their joint `norm_type`-norm is at most `max_gradient`; VALUE clamps each element to
`[-max_gradient, max_gradient]`. Fused embedding tables have no `.grad` (their update happens
inside backward), so they are not clipped here.

The total p-norm over replicated gradients `r_i` and sharded gradients `s_j` (each rank holding
some shards of a parameter whose process groups are given in `param_to_pgs`) is

    total = (sum_i |r_i|_p^p + allreduce_sum(sum_j |s_j|_p^p)) ** (1 / p)
    total = max(max_i |r_i|_inf, allreduce_max(max_j |s_j|_inf))          (p = inf)

and NORM scales every gradient by `min(1, max_gradient / (total + 1e-6))`. Empty gradients
(`numel() == 0`, for example an empty shard) are left out. Parameters on `meta` skip clipping
(a model not yet materialized has nothing to clip).
"""

from __future__ import annotations

import enum
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from shardrec_optim.keyed import KeyedOptimizer, OptimizerWrapper

__all__ = ["GradientClipping", "GradientClippingOptimizer"]

ProcessGroups = tuple[Any, ...]
"""The process groups a sharded parameter's norm is summed over (torch ProcessGroup objects)."""


class GradientClipping(enum.StrEnum):
    NORM = "norm"
    VALUE = "value"
    NONE = "none"


class GradientClippingOptimizer(OptimizerWrapper):
    """Clips gradients by norm or by value, then steps the wrapped optimizer.

    Args:
        optimizer: the KeyedOptimizer to wrap.
        clipping: NORM, VALUE or NONE (also the plain strings).
        max_gradient: the norm bound (NORM) or the element bound (VALUE); finite, >= 0 (0
            zeroes every gradient).
        norm_type: p of the p-norm (`float("inf")` or "inf" allowed), > 0.
        enable_global_grad_clip: take the norm of sharded parameters over their process groups
            (`param_to_pgs`), so every rank scales by the same global norm.
        param_to_pgs: parameter -> the process groups holding its other shards.
        track_grad_norm: also compute the total norm for VALUE and NONE clipping.

    `last_total_grad_norm` is the total norm before clipping at the last step (None before
    the first step, after a step without gradients, or on `meta`).
    """

    def __init__(
        self,
        optimizer: KeyedOptimizer,
        clipping: GradientClipping | str = GradientClipping.NONE,
        max_gradient: float = 0.1,
        norm_type: float | str = 2.0,
        enable_global_grad_clip: bool = False,
        param_to_pgs: Mapping[torch.Tensor, Sequence[Any]] | None = None,
        track_grad_norm: bool = False,
    ) -> None:
        super().__init__(optimizer)
        self._clipping = GradientClipping(clipping)
        if not (max_gradient >= 0 and math.isfinite(max_gradient)):
            raise ValueError(f"max_gradient must be a finite number >= 0, got {max_gradient!r}")
        p = float(norm_type)
        if not p > 0:
            raise ValueError(f"norm_type must be > 0 or 'inf', got {norm_type!r}")
        self._max_gradient = float(max_gradient)
        self._norm_type = p
        self._track_grad_norm = track_grad_norm
        self._last_total_grad_norm: torch.Tensor | None = None
        self._replicate_params: list[torch.Tensor] = []
        self._sharded_params: dict[ProcessGroups, list[torch.Tensor]] = defaultdict(list)
        pgs_of = param_to_pgs if enable_global_grad_clip and param_to_pgs else {}
        for group in self.param_groups:
            for param in group["params"]:
                pgs = pgs_of.get(param)
                if pgs:
                    self._sharded_params[tuple(pgs)].append(param)
                else:
                    self._replicate_params.append(param)

    @property
    def last_total_grad_norm(self) -> torch.Tensor | None:
        """The total gradient norm before clipping at the last step (None before)."""
        return self._last_total_grad_norm

    def _all_params(self) -> list[torch.Tensor]:
        return [*self._replicate_params, *(p for ps in self._sharded_params.values() for p in ps)]

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]  # torch overloads on closure; one signature here
        if any(p.device.type == "meta" for p in self._all_params()):
            self._last_total_grad_norm = None
            return super().step(closure)
        if self._clipping is GradientClipping.NORM:
            if self._sharded_params:
                self._last_total_grad_norm = self.clip_grad_norm_()
            else:
                params = [p for p in self._replicate_params if _has_grad(p)]
                self._last_total_grad_norm = self._clip_local(params) if params else None
        else:
            if self._track_grad_norm:
                self._last_total_grad_norm, _ = self.compute_total_grad_norm()
            if self._clipping is GradientClipping.VALUE:
                # Elementwise: a shard clamps exactly as the whole parameter would.
                torch.nn.utils.clip_grad_value_(self._all_params(), clip_value=self._max_gradient)
        return super().step(closure)

    def _clip_local(self, params: list[torch.Tensor]) -> torch.Tensor:
        if self._norm_type == math.inf:
            # torch's clip_grad_norm_ refuses an inf-norm over an empty tensor.
            params = [p for p in params if p.grad is not None and p.grad.numel() > 0]
        total: torch.Tensor = torch.nn.utils.clip_grad_norm_(
            params, max_norm=self._max_gradient, norm_type=self._norm_type
        )
        return total

    def compute_total_grad_norm(self) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The total norm over every gradient (sharded ones reduced over their process
        groups; see the module docstring) and the list of those gradients, without clipping."""
        sharded = {pgs: _get_grads(ps) for pgs, ps in self._sharded_params.items()}
        replicate = _get_grads(self._replicate_params)
        grads = [g for gs in sharded.values() for g in gs] + replicate
        total = _compute_total_norm(replicate, sharded, self._norm_type, self._max_gradient)
        return total, grads

    def clip_grad_norm_(self) -> torch.Tensor:
        """Scale every gradient by `min(1, max_gradient / (total + 1e-6))`; returns the total
        norm before clipping."""
        total, grads = self.compute_total_grad_norm()
        if grads:
            coef = torch.clamp(self._max_gradient / (total + 1e-6), max=1.0)
            torch._foreach_mul_(grads, coef.to(grads[0].device))
        return total


def _has_grad(p: torch.Tensor) -> bool:
    return p.grad is not None and p.grad.numel() > 0


def _get_grads(params: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The non-empty gradients of `params` (None and `numel() == 0` left out)."""
    return [p.grad for p in params if p.grad is not None and p.grad.numel() > 0]


def _all_reduce(value: torch.Tensor, *, use_max: bool, group: Any) -> None:
    """Sum (or max) a 0-d norm over `group`, in place.

    The one collective of this layer-0 package (it may not import shardrec-collectives): a
    scalar over process groups the caller handed in, needed only for global clipping of
    sharded parameters.
    """
    import torch.distributed as dist

    op = dist.ReduceOp.MAX if use_max else dist.ReduceOp.SUM
    dist.all_reduce(value, op=op, group=group)


def _batch_cal_norm(
    grad_list: Sequence[torch.Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    process_groups: ProcessGroups | None = None,
) -> torch.Tensor:
    """`sum_i |g_i|_p^p` (p finite) or `max_i |g_i|_inf` over `grad_list`, reduced over
    `process_groups` when given. An inf-norm over no non-empty gradient is `-inf` (the identity
    of max). `max_norm` is accepted for TorchRec's signature; the norm does not depend on it."""
    del max_norm
    inf = norm_type == math.inf
    grads = [g for g in grad_list if g.numel() > 0] if inf else list(grad_list)
    if not grads:
        return torch.tensor(-math.inf if inf else 0.0)
    norms = torch.stack(torch._foreach_norm(grads, norm_type))
    total: torch.Tensor = torch.linalg.vector_norm(norms, norm_type)
    if not inf:
        total = total.pow(norm_type)
    for pg in process_groups or ():
        _all_reduce(total, use_max=inf, group=pg)
    return total


def _compute_total_norm(
    replicate_grads: Sequence[torch.Tensor],
    sharded_grads: Mapping[ProcessGroups, Sequence[torch.Tensor]],
    norm_type: float = 2.0,
    max_grad_norm: float = 1.0,
) -> torch.Tensor:
    """The total `norm_type`-norm of replicated and sharded gradients (module docstring)."""
    inf = norm_type == math.inf
    combine = torch.maximum if inf else torch.add
    total = torch.tensor(-math.inf if inf else 0.0)
    for pgs, grads in sharded_grads.items():
        part = _batch_cal_norm(grads, max_grad_norm, norm_type, pgs)
        total = combine(total.to(part.device), part)
    if replicate_grads:
        part = _batch_cal_norm(replicate_grads, max_grad_norm, norm_type)
        total = combine(total.to(part.device), part)
    out: torch.Tensor = total if inf else total.pow(1.0 / norm_type)
    return out
