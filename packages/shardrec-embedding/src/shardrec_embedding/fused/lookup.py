"""The fused pooled lookup: forward is the batched lookup, backward updates rows in place.

Backward never builds a dense `(total_rows, D)` gradient. Where fbgemm-gpu-cpu imports and has
a kernel for the optimizer, its CPU TBE backward does the whole update in one call
(`fbgemm_backward`, faster where it applies); otherwise, for the `N` ids of a batch:

```
ids    (N,)  --sort-->  sorted ids, perm            (one sort, int32 keys)
                        segment starts (U,)          (unique_consecutive counts)
bag of each id, permuted  --embedding_bag(grad_out)--> (U, D) summed row gradients, per chunk
                                                        --> shardrec_optim.sparse_update
```

The segment sum *is* an `embedding_bag` over the output gradient (`grad_out` rows indexed by
the bag of each id, bags = segments of equal ids), which reuses ATen's fast pooled kernel.
Rows are processed in chunks of ~4 MiB of gradient so that the temporaries stay in cache and
are recycled by the allocator (a fresh 70 MB temporary costs ~20 ms of page faults on our CPU,
more than the update itself). docs/design/optim-fused-backward.md records the measurements.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from shardrec_embedding.batched_lookup import batched_embedding_bag
from shardrec_embedding.configs import PoolingType
from shardrec_embedding.fused.fbgemm_backward import (
    FBGEMM_OPTIMIZERS,
    fbgemm_applies,
    fbgemm_update,
)
from shardrec_embedding.fused.native_backward import (
    native_backward_unsupported,
    native_update,
)
from shardrec_embedding.triton import ops as triton_ops
from shardrec_optim import EmbOptimType, FusedOptimSpec, sparse_update

# Bytes of (rows, D) gradient handled per chunk in backward.
CHUNK_BYTES = 4 << 20

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


def bag_of_id(offsets: Tensor, num_ids: int) -> Tensor:
    """`(N,)` bag index of each id from `(num_bags + 1,)` offsets."""
    lengths = offsets[1:] - offsets[:-1]
    bags = torch.arange(lengths.numel(), device=offsets.device)
    return torch.repeat_interleave(bags, lengths, output_size=num_ids)


def _bags_and_scales(
    offsets: Tensor,
    num_ids: int,
    per_sample_weights: Tensor | None,
    pooling: PoolingType,
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, Tensor | None]:
    """`(N,)` bag of each id and `(N,)` factor on its gradient (per-sample weight, 1 / bag
    size for MEAN, or None)."""
    bag = bag_of_id(offsets, num_ids)
    if pooling is not PoolingType.MEAN:
        return bag, per_sample_weights
    lengths = offsets[1:] - offsets[:-1]
    inverse = 1.0 / lengths.clamp(min=1).to(dtype)
    return bag, torch.repeat_interleave(inverse, lengths, output_size=num_ids)


def per_sample_weight_grad(
    weight: Tensor, ids: Tensor, offsets: Tensor, grad_out: Tensor
) -> Tensor:
    """`(N,)` d loss / d weight_i = <row of id i, output gradient of its bag> (SUM pooling)."""
    bag = bag_of_id(offsets, ids.numel())
    out = torch.empty(ids.numel(), dtype=weight.dtype, device=weight.device)
    chunk = max(1, CHUNK_BYTES // (weight.shape[1] * weight.element_size()))
    for lo in range(0, ids.numel(), chunk):
        hi = lo + chunk
        rows = weight.index_select(0, ids[lo:hi])
        torch.linalg.vecdot(rows, grad_out.index_select(0, bag[lo:hi]), out=out[lo:hi])
    return out


Backend = Literal["auto", "torch", "fbgemm", "triton", "native"]
"""Which kernel runs the update: "auto" takes the Triton rowwise-Adagrad kernel on CUDA where
it applies (see `shardrec_embedding.triton`), the native CPU kernels where they apply (see
`native_backward`; for rowwise Adagrad only where fbgemm's CPU kernel does not, as that one is
as fast or faster), then fbgemm's CPU kernel where it applies (see `fbgemm_backward`), else
the torch-native one; the others force one (parity tests; "triton" also runs on CPU tensors
under `TRITON_INTERPRET=1`)."""

_BACKENDS = ("auto", "torch", "fbgemm", "triton", "native")
_ROWWISE_ADAGRAD = frozenset({EmbOptimType.ROWWISE_ADAGRAD, EmbOptimType.EXACT_ROWWISE_ADAGRAD})


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
    backend: see `Backend`; "fbgemm" raises ValueError where fbgemm cannot run this update.
    """
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
    if backend == "triton":
        reason = triton_ops.backward_unsupported(spec, weight)
        if reason is not None:
            raise ValueError(f"the triton backend cannot run this update: {reason}")
    native_reason = None
    if backend in ("native", "auto"):
        native_reason = native_backward_unsupported(spec, weight, grad_out, per_sample_weights)
        if backend == "native" and native_reason is not None:
            raise ValueError(f"the native backend cannot run this update: {native_reason}")
    if ids.numel() == 0:
        return
    if backend == "triton" or (backend == "auto" and triton_ops.backward_applies(spec, weight)):
        with torch.profiler.record_function("fused.triton_backward"):
            bag, scale = _bags_and_scales(offsets, ids.numel(), per_sample_weights, pooling)
            triton_ops.rowwise_adagrad_update(
                weight,
                state["momentum1"],
                ids,
                bag,
                None if scale is None else scale.to(weight.dtype),
                grad_out,
                learning_rate=learning_rate,
                eps=spec.eps,
            )
        return
    fbgemm_ok = backend in ("auto", "fbgemm") and fbgemm_applies(
        spec, weight, grad_out, per_sample_weights
    )
    # Rowwise Adagrad under "auto": fbgemm's kernel where it runs (ties with ours on one
    # thread, 25% faster on two: docs/bench/fused_training.md); ours replaces the torch path.
    use_native = backend == "native" or (
        backend == "auto"
        and native_reason is None
        and not (spec.optimizer in _ROWWISE_ADAGRAD and fbgemm_ok)
    )
    if use_native or fbgemm_ok:
        kernel, name = (
            (native_update, "fused.native_backward")
            if use_native
            else (fbgemm_update, "fused.fbgemm_backward")
        )
        with torch.profiler.record_function(name):
            kernel(
                weight,
                state,
                spec,
                ids,
                offsets,
                per_sample_weights,
                pooling,
                grad_out,
                learning_rate,
            )
        return
    if backend == "fbgemm":
        raise ValueError(
            f"the fbgemm backend cannot run {spec.optimizer.name} on a {weight.dtype} "
            f"{weight.device.type} weight (fbgemm supports "
            f"{sorted(o.name for o in FBGEMM_OPTIMIZERS)} on contiguous FP32 CPU weights, and "
            "needs fbgemm-gpu-cpu installed)"
        )
    torch_update(
        weight,
        state,
        spec,
        ids,
        offsets,
        per_sample_weights,
        pooling,
        grad_out,
        learning_rate,
        step,
    )


def torch_update(
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
) -> None:
    """The torch-native `fused_update` (any optimizer, device and dtype); same arguments."""
    n = ids.numel()
    if n == 0:
        return
    # record_function marks the phases for benchmarks/fused_training.py --profile (~1 us each).
    with torch.profiler.record_function("fused.sort_unique"):
        bag, scale = _bags_and_scales(offsets, n, per_sample_weights, pooling, weight.dtype)
        # int32 keys sort ~1.8x faster than int64 (1.6 vs 2.9 ms for 330k ids); rows fit.
        keys = ids.int() if weight.shape[0] <= torch.iinfo(torch.int32).max else ids
        sorted_ids, perm = torch.sort(keys)
        # Segments of equal ids: one pass (0.6 ms) against ne + nonzero + gather (1.2 ms).
        rows, counts = torch.unique_consecutive(sorted_ids, return_counts=True)
        rows = rows.long()
        starts = counts.cumsum(0).sub_(counts)
        src_bag = bag.index_select(0, perm)
        src_scale = None if scale is None else scale.to(weight.dtype).index_select(0, perm)
        num_unique = rows.numel()
        if weight.device.type == "cpu":
            chunk = max(1, CHUNK_BYTES // (weight.shape[1] * weight.element_size()))
            # Only the chunk boundaries go to the host (a `.tolist()` of all starts costs ~10 ms
            # at 300k rows).
            bounds = torch.cat([starts[::chunk], starts.new_tensor([n])]).tolist()
        else:
            # Chunks keep CPU temporaries in cache; a GPU takes the whole batch at once, and
            # reading the bounds would be a host sync.
            chunk, bounds = max(1, num_unique), [0, n]
    for k, c0 in enumerate(range(0, num_unique, chunk)):
        c1 = min(num_unique, c0 + chunk)
        lo, hi = bounds[k], bounds[k + 1]
        with torch.profiler.record_function("fused.segment_sum"):
            grads = F.embedding_bag(
                src_bag[lo:hi],
                grad_out,
                starts[c0:c1] - lo,
                mode="sum",
                per_sample_weights=None if src_scale is None else src_scale[lo:hi],
            )
        with torch.profiler.record_function("fused.optimizer_update"):
            sparse_update(
                spec, weight, state, rows[c0:c1], grads, step=step, learning_rate=learning_rate
            )
