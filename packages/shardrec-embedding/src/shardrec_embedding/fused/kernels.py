"""This package's backends of the fused update rules: native C (CPU) and Triton (CUDA).

`shardrec_optim.pooled_update` dispatches; `shardrec_optim.rules` says which rule runs where.
Both kernels live here because they are built by this package's loaders, next to the lookup
kernels they share code with (docs/design/fused-kernel-home.md).

On the native CPU kernels (`shardrec_embedding._native`):

- EXACT_SGD / SGD: the dense backward's scatter with `-lr`, `w[id] -= lr * scale *
  grad_out[bag]` for every id, no sort. SGD is linear in the gradient, so adding duplicate
  ids' contributions one by one equals one update with their coalesced sum (within float
  rounding): exact.

The Adagrad rules run the one-pass kernel (`sr_fused_update`): one call buckets the batch's
ids by row (a counting sort, no comparisons), sums each repeated row's gradient and updates
every touched row and its state once, in row order:

- EXACT_ROWWISE_ADAGRAD / ROWWISE_ADAGRAD (no weight decay): per distinct row
  `m += mean(g^2)`, `w -= lr / (sqrt(m) + eps) * g`, the formula of `shardrec_optim`'s
  rowwise kernel.
- EXACT_ADAGRAD: per distinct row `m += g * g`, `w -= lr * g / (sqrt(m) + eps)` elementwise.

docs/design/native-kernels.md records the measurements behind preferring it on CPU.
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor

from shardrec_embedding._native import (
    MAX_IDS,
    AdagradWorkspace,
    native_adagrad,
    native_available,
    native_rowwise_adagrad,
    native_sgd,
)
from shardrec_embedding.triton import ops as triton_ops
from shardrec_optim import (
    EmbOptimType,
    FusedOptimSpec,
    PooledGrad,
    PooledKernel,
    WeightDecayMode,
    bags_and_scales,
    optimizers_on,
)

__all__ = [
    "NATIVE_KERNEL",
    "NATIVE_OPTIMIZERS",
    "TRITON_KERNEL",
    "native_backward_unsupported",
    "native_update",
    "native_workspace",
]

_SGD = frozenset({EmbOptimType.SGD, EmbOptimType.EXACT_SGD})
_ADAGRAD = frozenset({EmbOptimType.EXACT_ADAGRAD})
_ROWWISE = frozenset({EmbOptimType.EXACT_ROWWISE_ADAGRAD, EmbOptimType.ROWWISE_ADAGRAD})
NATIVE_OPTIMIZERS = optimizers_on("native")
"""Optimizers the native fused backward implements."""

# One scratch per weight storage (by the storage's id and the weight's address; dropped with
# the storage). Not a WeakKeyDictionary: tensors compare elementwise, so they cannot be its keys.
_WORKSPACES: dict[tuple[int, int], AdagradWorkspace] = {}


def native_backward_unsupported(
    spec: FusedOptimSpec, weight: Tensor, grad_out: Tensor, per_sample_weights: Tensor | None
) -> str | None:
    """Why the native fused backward cannot run this update, or None when it can."""
    if spec.optimizer not in NATIVE_OPTIMIZERS:
        return (
            f"it implements {sorted(o.name for o in NATIVE_OPTIMIZERS)}, not {spec.optimizer.name}"
        )
    if (
        spec.optimizer in _ROWWISE
        and spec.weight_decay > 0
        and spec.weight_decay_mode is not WeightDecayMode.NONE
    ):
        return f"it has no weight decay (got {spec.weight_decay_mode.name} {spec.weight_decay})"
    if weight.device.type != "cpu" or weight.dtype is not torch.float32:
        return f"it needs a float32 CPU weight, got {weight.dtype} on {weight.device}"
    if weight.dim() != 2 or not weight.is_contiguous():
        return f"it needs a contiguous (R, D) weight, got shape {tuple(weight.shape)}"
    if grad_out.dtype is not torch.float32:
        return f"it needs a float32 output gradient, got {grad_out.dtype}"
    if per_sample_weights is not None and per_sample_weights.device.type != "cpu":
        return "it needs CPU per-sample weights"
    if not native_available():
        return "the native kernels are unavailable (see NativeUnavailableWarning)"
    return None


def native_workspace(weight: Tensor) -> AdagradWorkspace:
    """The one-pass kernel's scratch of `weight` (kept between steps, dropped with its
    storage). Keyed by the storage and the first element's address, not by the tensor: a
    fused group's `packed_weight()` is a fresh view each call (until session 11 each step got
    a new workspace, and a forward's presort could not be found by its backward)."""
    storage = weight.untyped_storage()  # one Python object per storage while it lives
    key = (id(storage), weight.data_ptr())
    workspace = _WORKSPACES.get(key)
    if workspace is None:
        workspace = _WORKSPACES[key] = AdagradWorkspace()
        weakref.finalize(storage, _WORKSPACES.pop, key, None)
    return workspace


def native_update(grad: PooledGrad) -> None:
    """The fused update on the native kernels (call only when `native_backward_unsupported`
    returns None); the weight and state are updated in place."""
    if grad.spec.optimizer in _SGD:
        native_sgd(grad)
        return
    workspace = native_workspace(grad.weight)
    if grad.spec.optimizer in _ADAGRAD:
        native_adagrad(grad, workspace)
    else:
        native_rowwise_adagrad(grad, workspace)


def triton_update(grad: PooledGrad) -> None:
    """The fused rowwise-Adagrad update on the Triton kernel (no host sync)."""
    bag, scale = bags_and_scales(grad, torch.float32)
    weight = grad.weight
    triton_ops.rowwise_adagrad_update(
        weight,
        grad.state["momentum1"],
        grad.ids,
        bag,
        None if scale is None else scale.to(weight.dtype),
        grad.grad_out,
        learning_rate=grad.learning_rate,
        eps=grad.spec.eps,
    )


def _native_unsupported(grad: PooledGrad) -> str | None:
    bags = grad.offsets.numel() - 1
    if max(grad.ids.numel(), bags) > MAX_IDS:
        return (
            f"it takes at most {MAX_IDS} ids and bags a batch, got {grad.ids.numel()} ids "
            f"in {bags} bags"
        )
    if bags * grad.grad_out.shape[-1] > MAX_IDS:
        return (
            f"it takes at most {MAX_IDS} output gradient elements a batch, got {bags} bags "
            f"of width {grad.grad_out.shape[-1]}"
        )
    return native_backward_unsupported(
        grad.spec, grad.weight, grad.grad_out, grad.per_sample_weights
    )


NATIVE_KERNEL = PooledKernel(
    unsupported=_native_unsupported,
    update=native_update,
)
"""The native C kernels as a backend of `shardrec_optim.pooled_update`."""

TRITON_KERNEL = PooledKernel(
    unsupported=lambda g: triton_ops.backward_unsupported(g.spec, g.weight),
    preferred=lambda g: triton_ops.backward_applies(g.spec, g.weight),
    update=triton_update,
)
"""The Triton kernel as a backend of `shardrec_optim.pooled_update` (auto: CUDA only)."""
