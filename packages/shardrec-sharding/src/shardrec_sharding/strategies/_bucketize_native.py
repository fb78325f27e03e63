"""Row bucketization in one C pass over the ids (`_native/bucketize.c`), when it builds.

The torch path of `RowBucketizer` runs a division, a remainder, a per-rank running count and a
scatter over every id (about 5 ms at 266k ids on 2 ranks); the C pass reads each id once and
appends its local row to its rank's row of the output, in the wire's integer type, counting
ids per (rank, segment, bag) on the way. Same ids in the same order, same counts: the result
is the torch path's exactly (tests/test_bucketize.py compares both). Built on first use like the
embedding kernels (`SHARDREC_NATIVE=0` turns it off: the torch path runs).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
from pathlib import Path

import torch
from torch import Tensor

from shardrec_embedding._native.loader import native_library_at

__all__ = ["NativeBuckets", "ShardTable", "native_bucketize"]

_I64 = ctypes.c_int64
_INT = ctypes.c_int
_PTR = ctypes.c_void_p
_MAX_WORLD = 64  # the C pass keeps one running count per rank on its stack


@functools.cache
def _lib() -> ctypes.CDLL | None:
    lib = native_library_at(Path(__file__).parent.parent / "_native" / "bucketize.c")
    if lib is None:
        return None
    lib.sr_row_bucketize.argtypes = (
        *(_PTR, _INT, _PTR, _PTR, _PTR, _I64, _I64, _PTR, _PTR, _PTR, _PTR, _PTR, _PTR),
        *(_I64, _I64, _PTR, _INT, _PTR, _PTR, _PTR, _PTR, _PTR),
    )
    lib.sr_row_bucketize.restype = _I64
    return lib


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class ShardTable:
    """Per segment j: `block[j]` (uniform block rows, 0: search the starts), `first[j]` and
    `count[j]` (its shards' index range); per shard: `starts`, `ends` (rows of its table) and
    `rank`. All int64 CPU tensors."""

    block: Tensor
    first: Tensor
    count: Tensor
    starts: Tensor
    ends: Tensor
    rank: Tensor


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class NativeBuckets:
    """`ids[d, :sent[d]]`: rank d's local rows in (segment, bag) order; `counts (world, S * B)`
    ids per (rank, segment, bag); `totals (world, S)`; `weights` like `ids` or None; `order`
    (segment-major position of each sent id, ranks in order) or None."""

    ids: Tensor
    counts: Tensor
    totals: Tensor
    weights: Tensor | None
    order: Tensor | None


def native_bucketize(
    values: Tensor,
    seg_start: list[int],
    seg_ids: list[int],
    lengths: Tensor,
    table: ShardTable,
    world: int,
    wire: torch.dtype,
    weights: Tensor | None,
    with_order: bool,
) -> NativeBuckets | None:
    """The C pass over `values` (segment j's `seg_ids[j]` ids from `seg_start[j]`, in bags
    `lengths[j]`, `(S, B)` int64, whose row sums are `seg_ids`), or None where it does not
    apply (not built, not CPU, other dtypes, weights needing a gradient, an id outside its
    table's shards, bags not covering the segments): the caller's torch path then runs, and
    reports what it reports."""
    if (
        values.device.type != "cpu"
        or values.dtype not in (torch.int64, torch.int32)
        or wire not in (torch.int64, torch.int32)
        or world > _MAX_WORLD
        or (weights is not None and weights.dtype != torch.float32)
        or (weights is not None and weights.requires_grad and torch.is_grad_enabled())
    ):
        return None
    lib = _lib()
    if lib is None:
        return None
    values = values.contiguous()
    lengths = lengths.contiguous()
    segments, batch = lengths.shape
    n = sum(seg_ids)  # segments may read one key twice: n is not values.numel()
    if len(seg_start) != segments or any(
        a < 0 or a + k > values.numel() for a, k in zip(seg_start, seg_ids, strict=True)
    ):
        return None
    starts = torch.tensor(seg_start, dtype=torch.int64)
    counts_in = torch.tensor(seg_ids, dtype=torch.int64)
    ids = torch.empty((world, n), dtype=wire)
    counts = torch.empty((world, segments * batch), dtype=torch.int64)
    totals = torch.empty((world, segments), dtype=torch.int64)
    out_weights = None
    if weights is not None:
        weights = weights.contiguous()
        out_weights = torch.empty((world, n), dtype=torch.float32)
    order = torch.empty(n, dtype=torch.int64) if with_order else None
    got = lib.sr_row_bucketize(
        values.data_ptr(),
        int(values.dtype == torch.int32),
        starts.data_ptr(),
        counts_in.data_ptr(),
        lengths.data_ptr(),
        segments,
        batch,
        table.block.data_ptr(),
        table.first.data_ptr(),
        table.count.data_ptr(),
        table.starts.data_ptr(),
        table.ends.data_ptr(),
        table.rank.data_ptr(),
        world,
        n,
        ids.data_ptr(),
        int(wire == torch.int32),
        0 if weights is None else weights.data_ptr(),
        0 if out_weights is None else out_weights.data_ptr(),
        counts.data_ptr(),
        totals.data_ptr(),
        0 if order is None else order.data_ptr(),
    )
    if got < 0:
        return None
    return NativeBuckets(ids=ids, counts=counts, totals=totals, weights=out_weights, order=order)
