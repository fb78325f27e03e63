"""The fused pooled lookup: forward is the batched lookup, backward updates rows in place.

Backward hands the ids, their bags and the pooled output gradient to
`shardrec_optim.pooled_update`, the one dispatch of the optimizer's update rule over the
backends in `KERNELS` (torch and fbgemm from shardrec_optim, native C and Triton from
`fused.kernels`). docs/optim.md tables which optimizer runs on which backend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from shardrec_embedding.batched_lookup import batched_embedding_bag
from shardrec_embedding.configs import PoolingType
from shardrec_embedding.fused.kernels import NATIVE_KERNEL, TRITON_KERNEL
from shardrec_optim import (
    FBGEMM_KERNEL,
    TORCH_KERNEL,
    Backend,
    FusedOptimSpec,
    PooledGrad,
    PooledKernel,
    bag_of_id,
    pooled,
    pooled_update,
)

__all__ = [
    "KERNELS",
    "Backend",
    "FusedLookupFunction",
    "UpdateContext",
    "fused_update",
    "per_sample_weight_grad",
]

KERNELS: dict[str, PooledKernel] = {
    "triton": TRITON_KERNEL,
    "native": NATIVE_KERNEL,
    "fbgemm": FBGEMM_KERNEL,
    "torch": TORCH_KERNEL,
}
"""Every backend's kernel of the fused update rules, by backend name (tests and benchmarks
take one out to reach the next)."""

UpdateContext = Callable[[], tuple[Tensor, Mapping[str, Tensor], FusedOptimSpec, float, int]]
"""Called once per backward: `(weight (R, D), state, spec, learning rate, step)`; it advances
the step counter, so the optimizer settings in force at backward time are used."""


class FusedLookupFunction(torch.autograd.Function):
    """Pooled lookup whose backward applies the optimizer to the touched rows.

    Inputs: `ids (N,)` group rows, `offsets (num_bags + 1,)`, `per_sample_weights (N,) | None`,
    the pooling, the update context, then the table weights (autograd inputs so that backward
    runs; they never receive a `.grad`).
    """

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        ids: Tensor,
        offsets: Tensor,
        per_sample_weights: Tensor | None,
        pooling: PoolingType,
        update: UpdateContext,
        *weights: Tensor,
    ) -> Tensor:
        out = batched_embedding_bag(
            weights, ids, offsets, pooling=pooling, per_sample_weights=per_sample_weights
        )
        ctx.save_for_backward(ids, offsets, per_sample_weights)  # type: ignore[arg-type]  # None is allowed at runtime
        ctx.pooling = pooling  # type: ignore[attr-defined]  # FunctionCtx allows attributes
        ctx.update = update  # type: ignore[attr-defined]  # FunctionCtx allows attributes
        return out

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad_out: Tensor
    ) -> tuple[Tensor | None, ...]:
        ids, offsets, psw = ctx.saved_tensors  # type: ignore[attr-defined]
        pooling: PoolingType = ctx.pooling  # type: ignore[attr-defined]
        update: UpdateContext = ctx.update  # type: ignore[attr-defined]
        num_weights = len(ctx.needs_input_grad) - 5  # type: ignore[attr-defined]
        weight, state, spec, lr, step = update()
        grad_out = grad_out.contiguous().to(weight.dtype)
        grad_psw = None
        if psw is not None and ctx.needs_input_grad[2]:  # type: ignore[attr-defined]
            # Uses the rows *before* this step's update.
            grad_psw = per_sample_weight_grad(weight, ids, offsets, grad_out).to(psw.dtype)
        with torch.no_grad():
            fused_update(weight, state, spec, ids, offsets, psw, pooling, grad_out, lr, step)
        return (None, None, grad_psw, None, None, *([None] * num_weights))


def per_sample_weight_grad(
    weight: Tensor, ids: Tensor, offsets: Tensor, grad_out: Tensor
) -> Tensor:
    """`(N,)` d loss / d weight_i = <row of id i, output gradient of its bag> (SUM pooling)."""
    bag = bag_of_id(offsets, ids.numel())
    out = torch.empty(ids.numel(), dtype=weight.dtype, device=weight.device)
    chunk = max(1, pooled.CHUNK_BYTES // (weight.shape[1] * weight.element_size()))
    for lo in range(0, ids.numel(), chunk):
        hi = lo + chunk
        rows = weight.index_select(0, ids[lo:hi])
        torch.linalg.vecdot(rows, grad_out.index_select(0, bag[lo:hi]), out=out[lo:hi])
    return out


def fused_update(
    weight: Tensor,
    state: Mapping[str, Tensor],
    spec: FusedOptimSpec,
    ids: Tensor,
    offsets: Tensor,
    per_sample_weights: Tensor | None,
    pooling: PoolingType,
    grad_out: Tensor,
    learning_rate: float,
    step: int,
    *,
    backend: Backend = "auto",
) -> None:
    """Apply one optimizer step to the rows `ids` touched, given the pooled output gradient.

    weight: `(R, D)` group weight (updated in place). ids: `(N,)` int64 rows.
    offsets: `(num_bags + 1,)`. per_sample_weights: `(N,)` or None. grad_out: `(num_bags, D)`.
    backend: see `shardrec_optim.Backend`; a forced backend that cannot run this update raises
    ValueError naming why.
    """
    mean = pooling is PoolingType.MEAN
    grad = PooledGrad(
        spec, weight, state, ids, offsets, per_sample_weights, mean, grad_out, learning_rate, step
    )
    pooled_update(grad, kernels=KERNELS, backend=backend)
