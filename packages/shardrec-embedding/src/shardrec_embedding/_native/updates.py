"""Fused optimizer updates on the native kernels: SGD and exact rowwise Adagrad.

Both take one `shardrec_optim.PooledGrad` (a packed group's rows `ids`, table-local id + the
table's row offset, and the pooled output gradient) and update the touched rows in place
(docs/design/native-kernels.md).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from shardrec_embedding._native.ops import _I64, _PTR, _check_layout, _lib, _psw_ptr, native_scatter

if TYPE_CHECKING:
    from shardrec_optim import PooledGrad

__all__ = ["AdagradWorkspace", "native_rowwise_adagrad", "native_sgd"]


def native_sgd(grad: PooledGrad) -> None:
    """`weight[ids] -= lr * (summed scaled output gradient)`, in place (exact SGD: duplicate
    ids add their gradients, which for SGD equals updating with the coalesced sum).

    weight: `(R, D)` contiguous fp32. ids: `(N,)` rows. offsets: `(num_bags + 1,)`.
    grad_out: `(num_bags, D)` fp32.
    """
    psw = grad.per_sample_weights
    native_scatter(
        [grad.weight],
        grad.ids,
        grad.offsets.to(torch.int64).contiguous(),
        None if psw is None else psw.float().contiguous(),
        grad.grad_out.contiguous(),
        [0],
        [0],
        [int(grad.mean)],
        alpha=-grad.learning_rate,
    )


class AdagradWorkspace:
    """Scratch of the native rowwise-Adagrad update, kept between steps (resident pages).

    slot: `(R,)` int32, all -1 between calls. scratch: `(capacity, D)` fp32 gradient sums of
    the rows a batch repeats (only those: rows seen once are updated directly); owned:
    `(capacity,)` int64 their row ids. Grown (x1.5) when a batch repeats more rows.
    """

    def __init__(self) -> None:
        self._slot: Tensor | None = None
        self._scratch: Tensor | None = None
        self._owned: Tensor | None = None

    def slot(self, rows: int) -> Tensor:
        slot = self._slot
        if slot is None or slot.numel() != rows:
            slot = self._slot = torch.full((rows,), -1, dtype=torch.int32)
        return slot

    def scratch(self, repeated: int, dim: int) -> tuple[Tensor, Tensor]:
        scratch, owned = self._scratch, self._owned
        if scratch is None or owned is None or scratch.shape[1] != dim or len(owned) < repeated:
            capacity = max(1, repeated + repeated // 2)
            scratch = self._scratch = torch.empty(capacity, dim, dtype=torch.float32)
            owned = self._owned = torch.empty(capacity, dtype=torch.int64)
        return scratch, owned


def native_rowwise_adagrad(grad: PooledGrad, workspace: AdagradWorkspace) -> None:
    """Exact rowwise Adagrad (no weight decay) over the rows `grad.ids` touched, in place.

    weight: `(R, D)` contiguous fp32. state `momentum1`: `(R,)` fp32. ids: `(N,)` int64 rows.
    offsets: `(num_bags + 1,)`. per_sample_weights: `(N,)` or None. grad_out: `(num_bags, D)`
    fp32. For each distinct row: `g = sum of scaled gradients`, `m += mean(g^2)`,
    `w -= lr / (sqrt(m) + eps) * g` (the formula of shardrec_optim's rowwise kernel).
    """
    offsets = grad.offsets
    num_bags = offsets.numel() - 1
    if num_bags <= 0 or grad.ids.numel() == 0:
        return
    ids = grad.ids.to(torch.int64).contiguous()
    offsets = offsets.to(torch.int64).contiguous()
    _check_layout(ids, offsets, [0], num_bags)
    grad_out = grad.grad_out.contiguous()
    psw = grad.per_sample_weights
    psw = None if psw is None else psw.float().contiguous()
    weight, momentum = grad.weight, grad.state["momentum1"]
    rows, dim = weight.shape
    lib = _lib()
    slot = workspace.slot(rows)
    parts = max(1, torch.get_num_threads())
    counts = torch.zeros(parts, dtype=torch.int64)
    lib.sr_adagrad_mark.restype = ctypes.c_int64
    repeated = lib.sr_adagrad_mark(
        _I64(rows),
        _PTR(ids.data_ptr()),
        _PTR(offsets.data_ptr()),
        _I64(num_bags),
        _PTR(slot.data_ptr()),
        _PTR(counts.data_ptr()),
        _I64(parts),
    )
    scratch, owned = workspace.scratch(int(repeated), dim)
    lib.sr_adagrad_apply(
        _PTR(weight.data_ptr()),
        _PTR(momentum.data_ptr()),
        _I64(rows),
        _I64(dim),
        _PTR(ids.data_ptr()),
        _PTR(offsets.data_ptr()),
        _I64(num_bags),
        _PTR(_psw_ptr(psw)),
        _I64(int(grad.mean)),
        _PTR(grad_out.data_ptr()),
        _I64(grad_out.stride(0)),
        ctypes.c_float(grad.learning_rate),
        ctypes.c_float(grad.spec.eps),
        _PTR(slot.data_ptr()),
        _PTR(scratch.data_ptr()),
        _PTR(owned.data_ptr()),
        _PTR(counts.data_ptr()),
        _I64(parts),
    )
