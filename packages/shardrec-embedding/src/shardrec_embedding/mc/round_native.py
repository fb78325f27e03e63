"""Native passes of an MCH eviction round (`_native/mc_round.c`), each with a torch path.

Each function returns exactly what its torch path returns (the tests compare both on random
streams): the window's distinct ids with counts and max metadata (`torch.unique` +
`scatter_reduce(amax)`), the stable descending order of counts (`torch.argsort`), and stable
sorts of a subset by int64 or float32 keys. The native path runs for contiguous CPU tensors
when the kernels are built (`SHARDREC_NATIVE=0` turns them off).
"""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from shardrec_embedding._native.loader import native_library_of

__all__ = ["argsort_subset", "coalesce_window", "order_by_count"]


def _lib() -> ctypes.CDLL | None:
    lib = native_library_of("mc_round.c")
    if lib is not None and not getattr(lib, "_sr_typed", False):
        for name in ("sr_mc_coalesce", "sr_mc_order_by_count"):
            getattr(lib, name).restype = ctypes.c_int
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        lib.sr_mc_coalesce.argtypes = [ptr, ptr, i64, ptr, ptr, ptr, ptr]
        lib.sr_mc_order_by_count.argtypes = [ptr, i64, i64, ptr]
        for name in ("sr_mc_argsort_i64", "sr_mc_argsort_f32"):
            fn = getattr(lib, name)
            fn.restype = ctypes.c_int
            fn.argtypes = [ptr, ptr, i64, ctypes.c_int, ptr]
        lib._sr_typed = True
    return lib


def _native_ok(*tensors: Tensor) -> ctypes.CDLL | None:
    if not all(t.device.type == "cpu" and t.dim() == 1 for t in tensors):
        return None
    return _lib()


def coalesce_window(window: Tensor, meta: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
    """`(torch.unique(window, return_counts=True)` ids and counts, the max of `meta` over each
    id's entries or None)` for int64 `window` and `meta` of the same length."""
    lib = _native_ok(window) if meta is None else _native_ok(window, meta)
    if lib is not None and window.dtype is torch.int64:
        window = window.contiguous()
        n = window.numel()
        uniq = torch.empty(n, dtype=torch.int64)
        counts = torch.empty(n, dtype=torch.int64)
        meta_max = None
        if meta is not None:
            meta = meta.to(torch.int64).contiguous()
            meta_max = torch.empty(n, dtype=torch.int64)
        n_uniq = torch.zeros(1, dtype=torch.int64)
        rc = lib.sr_mc_coalesce(
            window.data_ptr(),
            meta.data_ptr() if meta is not None else None,
            n,
            uniq.data_ptr(),
            counts.data_ptr(),
            meta_max.data_ptr() if meta_max is not None else None,
            n_uniq.data_ptr(),
        )
        if rc == 0:
            u = int(n_uniq)
            return uniq[:u], counts[:u], meta_max[:u] if meta_max is not None else None
    uniq, inverse, counts = torch.unique(window, return_inverse=True, return_counts=True)
    if meta is None:
        return uniq, counts, None
    per_id = torch.zeros_like(counts).scatter_reduce_(
        0, inverse, meta.to(torch.int64), reduce="amax", include_self=False
    )
    return uniq, counts, per_id


def order_by_count(counts: Tensor) -> Tensor:
    """`torch.argsort(counts, descending=True, stable=True)` for int64 window counts
    (0 <= count, bounded by the window's size)."""
    lib = _native_ok(counts)
    n = counts.numel()
    if lib is not None and counts.dtype is torch.int64 and n > 0:
        counts = counts.contiguous()
        low, high = int(counts.min()), int(counts.max())
        if low >= 0 and high <= 4 * n + (1 << 16):
            order = torch.empty(n, dtype=torch.int64)
            if lib.sr_mc_order_by_count(counts.data_ptr(), n, high, order.data_ptr()) == 0:
                return order
    return torch.argsort(counts, descending=True, stable=True)


def argsort_subset(values: Tensor, idx: Tensor, descending: bool) -> Tensor:
    """`idx[torch.argsort(values[idx], descending=descending, stable=True)]` for int64 or
    float32 `values` without NaN, int64 `idx` (in range)."""
    lib = _native_ok(values, idx)
    fn = None
    if lib is not None and idx.dtype is torch.int64:
        if values.dtype is torch.int64:
            fn = lib.sr_mc_argsort_i64
        elif values.dtype is torch.float32:
            fn = lib.sr_mc_argsort_f32
    if fn is not None and idx.numel() > 0:
        values, idx = values.contiguous(), idx.contiguous()
        out = torch.empty_like(idx)
        if fn(values.data_ptr(), idx.data_ptr(), idx.numel(), int(descending), out.data_ptr()) == 0:
            return out
    return idx[torch.argsort(values[idx], descending=descending, stable=True)]
