"""Python entry points of the Triton kernels, and when the lookups use them.

`kernels` (which imports `triton`) is imported on first use, so importing this module never
needs Triton. Both functions take CUDA tensors, or CPU tensors under `TRITON_INTERPRET=1`.

Dispatch (`forward_applies`, `backward_applies`): the lookups use these kernels on CUDA
weights when Triton imports. `PREFER_TRITON` records the measurement that justifies it; the
GPU benchmark (`benchmarks/gpu.py`) runs both paths side by side, and a card where the torch
path wins sets it to False (docs/gpu.md, "Triton").
"""

from __future__ import annotations

import torch
from torch import Tensor

from shardrec_embedding.triton._loader import interpreting, triton_available
from shardrec_optim import EmbOptimType, FusedOptimSpec, WeightDecayMode

__all__ = [
    "MAX_DIM",
    "PREFER_TRITON",
    "backward_applies",
    "backward_unsupported",
    "forward_applies",
    "pooled_embedding_bag",
    "rowwise_adagrad_update",
]

PREFER_TRITON = True
"""Use the Triton kernels on CUDA when they apply (pending the GPU session's measurement)."""

MAX_DIM = 2048
"""Widest row the fused backward keeps in registers (one program holds the whole row)."""

ROWWISE_ADAGRAD = frozenset({EmbOptimType.ROWWISE_ADAGRAD, EmbOptimType.EXACT_ROWWISE_ADAGRAD})


def _runs_on(t: Tensor) -> bool:
    return t.is_cuda or (interpreting() and t.device.type == "cpu")


def forward_applies(weight: Tensor) -> bool:
    """Whether the pooled lookup over `weight` (packed `(R, D)`) takes the Triton kernel."""
    return (
        PREFER_TRITON
        and weight.is_cuda
        and weight.dim() == 2
        and weight.stride(1) == 1
        and triton_available()
    )


def backward_unsupported(spec: FusedOptimSpec, weight: Tensor) -> str | None:
    """Why the fused Triton backward cannot run this update, or None when it can."""
    if spec.optimizer not in ROWWISE_ADAGRAD:
        return f"it implements rowwise Adagrad only, not {spec.optimizer.name}"
    if spec.weight_decay > 0 and spec.weight_decay_mode is not WeightDecayMode.NONE:
        return f"it has no weight decay (got {spec.weight_decay_mode.name} {spec.weight_decay})"
    if weight.dim() != 2 or not weight.is_contiguous() or weight.shape[1] > MAX_DIM:
        return f"it needs a contiguous (R, D <= {MAX_DIM}) weight, got {tuple(weight.shape)}"
    if not _runs_on(weight):
        return f"it runs on CUDA (or CPU under TRITON_INTERPRET=1), not {weight.device}"
    if not triton_available():
        return "triton does not import"
    return None


def backward_applies(spec: FusedOptimSpec, weight: Tensor) -> bool:
    """Whether `fused_update(backend="auto")` takes the Triton kernel for this update."""
    return PREFER_TRITON and weight.is_cuda and backward_unsupported(spec, weight) is None


def _block(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def pooled_embedding_bag(
    weight: Tensor,
    ids: Tensor,
    offsets: Tensor,
    *,
    mean: bool = False,
    per_sample_weights: Tensor | None = None,
) -> Tensor:
    """Pooled lookup, one kernel launch for all bags (no autograd; forward only).

    weight: `(R, D)` with unit column stride (fp32, fp16 or bf16). ids: `(N,)` int32/int64
    rows. offsets: `(num_bags + 1,)`. per_sample_weights: `(N,)` (SUM only).
    Returns `(num_bags, D)` in `weight.dtype`, accumulated in fp32; empty bags give zeros.
    """
    if per_sample_weights is not None and mean:
        raise ValueError("per_sample_weights need SUM pooling, got MEAN")
    from shardrec_embedding.triton import kernels

    num_bags = offsets.numel() - 1
    dim = weight.shape[1]
    out = torch.empty(max(num_bags, 0), dim, dtype=weight.dtype, device=weight.device)
    if num_bags <= 0 or dim == 0:
        return out.zero_()
    block_d = min(_block(dim), 128)
    average = max(1, ids.numel() // num_bags)
    block_n = min(64, max(16, _block(average)))
    psw = ids if per_sample_weights is None else per_sample_weights.contiguous()
    grid = (num_bags, (dim + block_d - 1) // block_d)
    kernels.pooled_forward_kernel[grid](
        weight,
        ids.contiguous(),
        offsets.contiguous(),
        psw,
        out,
        dim,
        weight.stride(0),
        out.stride(0),
        MEAN=mean,
        HAS_PSW=per_sample_weights is not None,
        BLOCK_N=block_n,
        BLOCK_D=block_d,
    )
    return out


def rowwise_adagrad_update(
    weight: Tensor,
    momentum: Tensor,
    ids: Tensor,
    bag: Tensor,
    scale: Tensor | None,
    grad_out: Tensor,
    *,
    learning_rate: float,
    eps: float,
) -> None:
    """Fused backward + rowwise Adagrad (no weight decay) for one batch, in place.

    weight: `(R, D)` contiguous. momentum: `(R,)` fp32. ids: `(N,)` rows looked up.
    bag: `(N,)` the bag of each id. scale: `(N,)` factor of each id's gradient (its
    per-sample weight, or 1 / bag size for MEAN) or None. grad_out: `(num_bags, D)`.
    For each unique row r: `g = sum of scale_i * grad_out[bag_i]` over its ids,
    `m[r] += mean(g^2)`, `w[r] -= lr / (sqrt(m[r]) + eps) * g`. No host sync.
    """
    from shardrec_embedding.triton import kernels

    n = ids.numel()
    if n == 0:
        return
    keys = ids.int() if weight.shape[0] <= torch.iinfo(torch.int32).max else ids
    sorted_ids, perm = torch.sort(keys)
    grad_out = grad_out.contiguous()
    kernels.rowwise_adagrad_backward_kernel[(n,)](
        sorted_ids,
        perm,
        bag.contiguous(),
        bag if scale is None else scale.contiguous(),
        grad_out,
        weight,
        momentum,
        n,
        weight.shape[1],
        weight.stride(0),
        grad_out.stride(0),
        float(learning_rate),
        float(eps),
        HAS_SCALE=scale is not None,
        BLOCK_D=_block(weight.shape[1]),
    )
