"""Native passes of an MCH eviction round (`_native/mc_round.c`), each with a torch path.

Each function returns exactly what its torch path returns (the tests compare both on random
streams): the window's distinct ids with counts and max metadata (`torch.unique` +
`scatter_reduce(amax)`), the stable descending order of counts (`torch.argsort`), and stable
sorts of a subset by int64 or float32 keys. The native path runs for contiguous CPU tensors
when the kernels are built (`SHARDREC_NATIVE=0` turns them off).
"""

from __future__ import annotations

import ctypes
import enum
from typing import NamedTuple

import torch
from torch import Tensor

from shardrec_embedding._native.loader import native_library_of

__all__ = [
    "AppliedRound",
    "ScoreKind",
    "apply_round",
    "argsort_subset",
    "coalesce_window",
    "coalesce_window_inverse",
    "copy_at_",
    "gather",
    "match_slots",
    "merge_slots_",
    "order_by_count",
    "update_and_score",
]

_INT64_MAX = torch.iinfo(torch.int64).max


class ScoreKind(enum.IntEnum):
    """The built-in scores the fused kernel computes (decay exponent 1)."""

    LFU = 0
    LRU = 1
    DISTANCE_LFU = 2


_TYPED: set[int] = set()  # libraries whose functions got their ctypes signatures


def _lib() -> ctypes.CDLL | None:
    lib = native_library_of("mc_round.c")
    if lib is not None and id(lib) not in _TYPED:
        for name in ("sr_mc_coalesce", "sr_mc_order_by_count"):
            getattr(lib, name).restype = ctypes.c_int
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        lib.sr_mc_coalesce.argtypes = [ptr, ptr, i64, ptr, ptr, ptr, ptr, ptr]
        lib.sr_mc_order_by_count.argtypes = [ptr, i64, i64, ptr]
        for name in ("sr_mc_argsort_i64", "sr_mc_argsort_f32"):
            fn = getattr(lib, name)
            fn.restype = ctypes.c_int
            fn.argtypes = [ptr, ptr, i64, ctypes.c_int, ptr]
        lib.sr_mc_update_scores.restype = i64
        lib.sr_mc_update_scores.argtypes = [i64, ptr, ptr, ptr, ptr, ptr, ptr, ptr, i64, i64]
        lib.sr_mc_update_scores.argtypes += [ctypes.c_int, ptr, ptr, ptr, ptr, ptr]
        lib.sr_mc_copy_at.restype = None
        lib.sr_mc_copy_at.argtypes = [ptr, ptr, ptr, ptr, i64]
        lib.sr_mc_merge_slots.restype = i64
        lib.sr_mc_merge_slots.argtypes = [ptr, ptr, i64, i64, ptr, i64, i64, ptr]
        lib.sr_mc_match_slots.restype = i64
        lib.sr_mc_match_slots.argtypes = [ptr, i64, ptr, i64, ptr, ptr, ptr, ptr]
        lib.sr_mc_gather.restype = None
        lib.sr_mc_gather.argtypes = [ptr, ptr, i64, ptr]
        lib.sr_mc_apply_round.restype = i64
        lib.sr_mc_apply_round.argtypes = [ptr, ptr, ptr, i64, ptr, ptr, ptr, ptr, ptr, i64, i64]
        lib.sr_mc_apply_round.argtypes += [ptr, ptr, ptr, ptr, ptr]
        _TYPED.add(id(lib))
    return lib


def _native_ok(*tensors: Tensor) -> ctypes.CDLL | None:
    if not all(t.device.type == "cpu" and t.dim() == 1 for t in tensors):
        return None
    return _lib()


def coalesce_window(window: Tensor, meta: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
    """`(torch.unique(window, return_counts=True)` ids and counts, the max of `meta` over each
    id's entries or None)` for int64 `window` and `meta` of the same length."""
    uniq, counts, meta_max, _ = _coalesce(window, meta, inverse=False)
    return uniq, counts, meta_max


def coalesce_window_inverse(
    window: Tensor, meta: Tensor | None
) -> tuple[Tensor, Tensor, Tensor | None, Tensor]:
    """`coalesce_window` and the index of each window entry's id among the distinct ids
    (`torch.unique`'s `return_inverse`), `(N,)` int64."""
    uniq, counts, meta_max, inverse = _coalesce(window, meta, inverse=True)
    assert inverse is not None
    return uniq, counts, meta_max, inverse


def _coalesce(
    window: Tensor, meta: Tensor | None, *, inverse: bool
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
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
        inv = torch.empty(n, dtype=torch.int64) if inverse else None
        n_uniq = torch.zeros(1, dtype=torch.int64)
        rc = lib.sr_mc_coalesce(
            window.data_ptr(),
            _ptr(meta),
            n,
            uniq.data_ptr(),
            counts.data_ptr(),
            _ptr(meta_max),
            _ptr(inv),
            n_uniq.data_ptr(),
        )
        if rc == 0:
            u = int(n_uniq)
            return uniq[:u], counts[:u], None if meta_max is None else meta_max[:u], inv
    uniq, inv, counts = torch.unique(window, return_inverse=True, return_counts=True)
    if meta is None:
        return uniq, counts, None, inv if inverse else None
    per_id = torch.zeros_like(counts).scatter_reduce_(
        0, inv, meta.to(torch.int64), reduce="amax", include_self=False
    )
    return uniq, counts, per_id, inv if inverse else None


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


def _ptr(t: Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def update_and_score(
    kind: ScoreKind,
    current_iter: int,
    mch_size: int,
    argsort_mapping: Tensor,
    sorted_counts: Tensor,
    held: Tensor,
    held_slots: Tensor,
    mch_metadata: dict[str, Tensor],
    window_metadata: dict[str, Tensor],
) -> tuple[Tensor, dict[str, Tensor], bool] | None:
    """The base policy's metadata update and the built-in scores in one native pass: returns
    `(scores over [slots | new ids], the new ids' metadata, whether a score may be NaN)`
    after updating `mch_metadata` in place as the torch path does, or None (nothing done)
    when the kernels cannot run here."""
    counts, last = mch_metadata.get("counts"), mch_metadata.get("last_access_iter")
    win_last = window_metadata.get("last_access_iter")
    if set(mch_metadata) - {"counts", "last_access_iter"} or (last is None) != (win_last is None):
        return None
    if (kind is ScoreKind.LFU) != (counts is not None and last is None) or (
        kind is ScoreKind.DISTANCE_LFU and (counts is None or last is None)
    ):
        return None
    tensors = [argsort_mapping, sorted_counts, held, held_slots]
    tensors += [t for t in (counts, last, win_last) if t is not None]
    lib = _native_ok(*tensors)
    if lib is None or not all(t.is_contiguous() for t in (counts, last) if t is not None):
        return None
    if (
        any(t.dtype is not torch.int64 for t in tensors if t is not held)
        or held.dtype != torch.bool
    ):
        return None
    u = sorted_counts.numel()
    mapping, window_counts = argsort_mapping.contiguous(), sorted_counts.contiguous()
    held_c, slots_c = held.contiguous(), held_slots.contiguous()
    win_last_c = None if win_last is None else win_last.contiguous()
    new_counts = torch.empty(u, dtype=torch.int64) if counts is not None else None
    new_last = torch.empty(u, dtype=torch.int64) if last is not None else None
    dtype = torch.int64 if kind is ScoreKind.LFU else torch.float32
    scores = torch.empty(mch_size + u, dtype=dtype)
    nan_seen = torch.zeros(1, dtype=torch.int64)
    m = lib.sr_mc_update_scores(
        mch_size,
        _ptr(counts),
        _ptr(last),
        window_counts.data_ptr(),
        held_c.data_ptr(),
        slots_c.data_ptr(),
        _ptr(win_last_c),
        mapping.data_ptr(),
        u,
        current_iter,
        int(kind),
        scores.data_ptr() if dtype is torch.float32 else None,
        scores.data_ptr() if dtype is torch.int64 else None,
        _ptr(new_counts),
        _ptr(new_last),
        nan_seen.data_ptr(),
    )
    for buffer in (counts, last):
        if buffer is not None:
            torch.autograd.graph.increment_version(buffer)  # written through a pointer
    new: dict[str, Tensor] = {}
    if new_counts is not None:
        new["counts"] = new_counts[:m]
    if new_last is not None:
        new["last_access_iter"] = new_last[:m]
    return scores[: mch_size + m], new, bool(nan_seen)


def copy_at_(dst: Tensor, dst_at: Tensor, src: Tensor, src_at: Tensor) -> None:
    """`dst[dst_at] = src[src_at]` for int64 vectors and int64 indices (in range, `dst_at`
    distinct), in place."""
    tensors = (dst, dst_at, src, src_at)
    lib = _native_ok(*tensors)
    if (
        lib is None
        or dst_at.numel() != src_at.numel()
        or not all(t.dtype is torch.int64 and t.is_contiguous() for t in tensors)
    ):
        dst[dst_at] = src[src_at]
        return
    lib.sr_mc_copy_at(
        dst.data_ptr(), dst_at.data_ptr(), src.data_ptr(), src_at.data_ptr(), dst_at.numel()
    )
    torch.autograd.graph.increment_version(dst)  # written through a pointer


def merge_slots_(
    sorted_ids: Tensor,
    others: list[Tensor],
    evicted: Tensor,
    row_offset: int,
    position: Tensor | None,
    by_key: Tensor | None = None,
) -> bool:
    """Re-sort `sorted_ids` (sorted but at the slots `evicted`, which hold new distinct ids)
    and the buffers `others` (the rows first, then metadata) in the order of a stable argsort
    of the ids, in place, and set `position[row - row_offset]` to each row's new slot (when
    `position` is given; `by_key`, if given, is `evicted` in the order of its new ids). False
    (nothing done) when the kernels cannot run on these tensors."""
    buffers = [sorted_ids, *others]
    z = sorted_ids.numel()
    lib = _native_ok(*buffers, evicted)
    if (
        lib is None
        or not others
        or not all(b.dtype is torch.int64 and b.is_contiguous() and b.numel() == z for b in buffers)
    ):
        return False
    if position is not None and (
        position.dtype is not torch.int64 or not position.is_contiguous() or position.numel() != z
    ):
        return False
    if evicted.numel() == 0:
        return True  # nothing new: the buffers are sorted as they are
    if by_key is None:  # else given: `evicted` ordered by their new ids
        by_key = argsort_subset(sorted_ids, evicted, descending=False)
    pointers = (ctypes.c_void_p * len(others))(*[b.data_ptr() for b in others])
    done = lib.sr_mc_merge_slots(
        sorted_ids.data_ptr(),
        ctypes.cast(pointers, ctypes.c_void_p),
        len(others),
        z,
        by_key.data_ptr(),
        by_key.numel(),
        row_offset,
        None if position is None else position.data_ptr(),
    )
    if done < 0:
        return False
    for b in buffers:
        torch.autograd.graph.increment_version(b)  # written through a pointer
    return True


def match_slots(
    sorted_ids: Tensor, uniq_ids: Tensor, order: Tensor
) -> tuple[Tensor, Tensor, Tensor] | None:
    """`(ids, held, held_slots)` of the window ids `uniq_ids[order]` (`uniq_ids` ascending,
    distinct) against the sorted slots, as `slot = torch.searchsorted(sorted_ids[:-1], ids)`,
    `held = sorted_ids[slot] == ids`, `slot[held]` give them; None when the kernels cannot run
    on these tensors."""
    z, u = sorted_ids.numel(), uniq_ids.numel()
    lib = _native_ok(sorted_ids, uniq_ids, order)
    if (
        lib is None
        or z == 0
        or not all(
            t.dtype is torch.int64 and t.is_contiguous() for t in (sorted_ids, uniq_ids, order)
        )
    ):
        return None
    ids = torch.empty(u, dtype=torch.int64)
    held = torch.empty(u, dtype=torch.bool)
    slots = torch.empty(u, dtype=torch.int64)
    h = lib.sr_mc_match_slots(
        sorted_ids.data_ptr(),
        z,
        uniq_ids.data_ptr(),
        u,
        order.data_ptr(),
        held.data_ptr(),
        slots.data_ptr(),
        ids.data_ptr(),
    )
    if h < 0:
        return None
    return ids, held, slots[:h]


class AppliedRound(NamedTuple):
    """What `apply_round` wrote and found (see there)."""

    old_ids: Tensor
    rows: Tensor
    new_ids: Tensor
    by_key: Tensor
    uniq_rows: Tensor | None
    evictions: int


def apply_round(
    sorted_ids: Tensor,
    mapping: Tensor,
    uniq_ids: Tensor,
    by_count: Tensor,
    held: Tensor,
    held_slots: Tensor,
    evicted: Tensor,
    selected: Tensor,
    miss_row: int | None,
) -> AppliedRound | None:
    """The writes of a round that admitted new ids, natively, as these torch ops:

        old_ids, rows = sorted_ids[evicted], mapping[evicted]
        new_at = by_count[~held][selected]          # the new ids' places in uniq_ids
        sorted_ids[evicted] = new_ids = uniq_ids[new_at]
        by_key = evicted ordered by new_at          # the freed slots in their new ids' order
        evictions = int((old_ids != int64 max).sum())

    and, with `miss_row`, `uniq_rows`: the row each of `uniq_ids` reads after the round
    (held ids keep their slot's row unless the slot went to a new id; the rest miss). None
    (nothing written) when the kernels cannot run on these tensors."""
    tensors = (sorted_ids, mapping, uniq_ids, by_count, held_slots, evicted, selected)
    lib = _native_ok(*tensors, held)
    e, u = evicted.numel(), uniq_ids.numel()
    if (
        lib is None
        or e == 0
        or held.dtype is not torch.bool
        or not held.is_contiguous()
        or not all(t.dtype is torch.int64 and t.is_contiguous() for t in tensors)
    ):
        return None
    old_ids, rows, new_at, by_key = (torch.empty(e, dtype=torch.int64) for _ in range(4))
    uniq_rows = None if miss_row is None else torch.empty(u, dtype=torch.int64)
    real = lib.sr_mc_apply_round(
        sorted_ids.data_ptr(),
        mapping.data_ptr(),
        uniq_ids.data_ptr(),
        u,
        by_count.data_ptr(),
        held.data_ptr(),
        held_slots.data_ptr(),
        evicted.data_ptr(),
        selected.data_ptr(),
        e,
        0 if miss_row is None else miss_row,
        old_ids.data_ptr(),
        rows.data_ptr(),
        new_at.data_ptr(),
        by_key.data_ptr(),
        _ptr(uniq_rows),
    )
    if real < 0:
        return None
    torch.autograd.graph.increment_version(sorted_ids)  # written through a pointer
    return AppliedRound(old_ids, rows, uniq_ids[new_at], by_key, uniq_rows, int(real))


def gather(src: Tensor, idx: Tensor) -> Tensor:
    """`src[idx]` for an int64 vector `src` and int64 indices into it (in range: the caller's
    own; `idx` of a window's `inverse`)."""
    lib = _native_ok(src, idx)
    if (
        lib is None
        or src.dtype is not torch.int64
        or idx.dtype is not torch.int64
        or not src.is_contiguous()
        or not idx.is_contiguous()
    ):
        return src[idx]
    out = torch.empty(idx.numel(), dtype=torch.int64)
    lib.sr_mc_gather(src.data_ptr(), idx.data_ptr(), idx.numel(), out.data_ptr())
    return out
