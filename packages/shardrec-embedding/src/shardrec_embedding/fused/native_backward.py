"""The fused backward on the native CPU kernels (`shardrec_embedding._native`).

One pass over the batch's ids updates the touched rows in place, without sorting:

- EXACT_SGD / SGD: `w[id] -= lr * scale * grad_out[bag]` for every id. SGD is linear in the
  gradient, so adding duplicate ids' contributions one by one equals one update with their
  coalesced sum (within float rounding): exact.
- EXACT_ROWWISE_ADAGRAD / ROWWISE_ADAGRAD (no weight decay): each thread owns the rows with
  `row % threads == thread`, sums the gradients of its distinct rows (duplicates coalesced),
  then applies `m += mean(g^2)`, `w -= lr / (sqrt(m) + eps) * g` once per row, the formula of
  `shardrec_optim`'s rowwise kernel.

docs/design/native-kernels.md records the measurements behind preferring it on CPU.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping

import torch
from torch import Tensor

from shardrec_embedding._native import (
    AdagradWorkspace,
    native_available,
    native_rowwise_adagrad,
    native_sgd,
)
from shardrec_embedding.configs import PoolingType
from shardrec_optim import EmbOptimType, FusedOptimSpec, WeightDecayMode

__all__ = ["NATIVE_OPTIMIZERS", "native_backward_unsupported", "native_update"]

_SGD = frozenset({EmbOptimType.SGD, EmbOptimType.EXACT_SGD})
_ROWWISE = frozenset({EmbOptimType.EXACT_ROWWISE_ADAGRAD, EmbOptimType.ROWWISE_ADAGRAD})
NATIVE_OPTIMIZERS = _SGD | _ROWWISE
"""Optimizers the native fused backward implements."""

# One scratch per optimizer state tensor (by id; dropped with the tensor). Not a
# WeakKeyDictionary: tensors compare elementwise, so they cannot be its keys.
_WORKSPACES: dict[int, AdagradWorkspace] = {}


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


def native_update(
    weight: Tensor,
    state: Mapping[str, Tensor],
    spec: FusedOptimSpec,
    ids: Tensor,
    offsets: Tensor,
    per_sample_weights: Tensor | None,
    pooling: PoolingType,
    grad_out: Tensor,
    learning_rate: float,
) -> None:
    """`fused_update` on the native kernels (call only when `native_backward_unsupported`
    returns None). weight: `(R, D)`; ids: `(N,)` rows; offsets: `(num_bags + 1,)`;
    grad_out: `(num_bags, D)`."""
    mean = pooling is PoolingType.MEAN
    if spec.optimizer in _SGD:
        native_sgd(weight, ids, offsets, per_sample_weights, mean, grad_out, learning_rate)
        return
    momentum = state["momentum1"]
    workspace = _WORKSPACES.get(id(momentum))
    if workspace is None:
        workspace = _WORKSPACES[id(momentum)] = AdagradWorkspace()
        weakref.finalize(momentum, _WORKSPACES.pop, id(momentum), None)
    native_rowwise_adagrad(
        weight,
        momentum,
        ids,
        offsets,
        per_sample_weights,
        mean,
        grad_out,
        learning_rate=learning_rate,
        eps=spec.eps,
        workspace=workspace,
    )
