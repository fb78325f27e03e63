"""TorchRec's bucket routing of a row-wise sharded raw-id table that declares
`total_num_buckets` (part of `shardrec_sharding.dynamic_routing`).

The id space `[0, S)` (`S`: the config's `id_space`, a virtual table's `num_embeddings`; else
its `num_embeddings`) is cut into `B = total_num_buckets` equal buckets of `S / B` ids, and
the table's capacity into `B` equal buckets of slots. The row parts (row-wise shards, in row
order) take whole buckets: `B // P` each and one more on the first `B % P` parts (TorchRec's
`_calculate_rw_shard_sizes_and_offsets` / `_get_bucketize_row_pos`). Part p owns the ids of
its buckets, `bounds[p] <= id < bounds[p + 1]` with `bounds[p] = (S / B) x (buckets of the
parts before p)`.

An id's part is fbgemm's `block_bucketize_sparse_features` rule, which TorchRec 1.8's
row-wise input dist runs for virtual tables: the id read as an unsigned 64-bit number `u`;
`u < bounds[P]`: the part whose range holds it; otherwise (ids past the space, negative ids)
`u mod P`. So an id reaches the same rank as in TorchRec.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["bucket_bounds", "bucket_part", "buckets_per_part"]

_FIX = "docs/dynamic.md, Bucket routing"


def buckets_per_part(buckets: int, parts: int) -> list[int]:
    """Whole buckets of each of `parts` row parts: `buckets // parts`, one more on the first
    `buckets % parts` (TorchRec's uneven rule)."""
    base, extra = divmod(buckets, parts)
    return [base + (p < extra) for p in range(parts)]


def bucket_bounds(
    table: str, buckets: int, id_space: int, capacity: int, part_rows: Sequence[int]
) -> tuple[int, ...]:
    """The `P + 1` id bounds of a table's `P = len(part_rows)` row parts (module docstring).
    Raises ValueError naming `table`, the value and the fix when the buckets cannot be cut:
    fewer buckets than parts, buckets that do not divide the id space or the capacity, or
    parts whose rows are not their whole buckets of slots."""
    parts = len(part_rows)
    if buckets < parts:
        raise ValueError(
            f"table {table!r}: total_num_buckets {buckets} is less than its {parts} row-wise "
            f"shards; a bucket cannot be split across ranks: give at least {parts} buckets (a "
            f"multiple of {parts} spreads them evenly) or shard it on fewer ranks ({_FIX})"
        )
    if id_space % buckets:
        raise ValueError(
            f"table {table!r}: id space {id_space} is not a multiple of total_num_buckets "
            f"{buckets}; buckets hold equal id ranges: pick a bucket count that divides "
            f"{id_space} ({_FIX})"
        )
    if capacity % buckets:
        raise ValueError(
            f"table {table!r}: capacity {capacity} is not a multiple of total_num_buckets "
            f"{buckets}; each bucket holds an equal share of the slots: pick a capacity that "
            f"is a multiple of {buckets} ({_FIX})"
        )
    counts = buckets_per_part(buckets, parts)
    slots = capacity // buckets
    expected = [c * slots for c in counts]
    if list(part_rows) != expected:
        raise ValueError(
            f"table {table!r}: its row-wise shards hold {list(part_rows)} rows, not whole "
            f"buckets: with total_num_buckets {buckets} over {parts} shards they must hold "
            f"{expected}; plan it with shardrec's planner (or EmbeddingShardingPlanner), "
            f"which cuts row-wise shards at buckets ({_FIX})"
        )
    width = id_space // buckets
    bounds = [0]
    for c in counts:
        bounds.append(bounds[-1] + c * width)
    return tuple(bounds)


def bucket_part(ids: Tensor, bounds: Sequence[int] | Tensor) -> Tensor:
    """`(N,)` int64 part of each int64 id under `bounds` (module docstring; torch ops, the
    reference of the native packing)."""
    b = torch.as_tensor(bounds, dtype=torch.int64)
    parts = b.numel() - 1
    ids = ids.to(torch.int64)
    inside = (ids >= 0) & (ids < b[-1])
    within = torch.searchsorted(b[1:], ids, right=True)
    # unsigned u = id + 2^64 for a negative id: u mod P = (id mod P + 2^64 mod P) mod P
    wrap = torch.remainder(ids, parts)
    wrap = torch.where(ids < 0, torch.remainder(wrap + (1 << 64) % parts, parts), wrap)
    return torch.where(inside, within, wrap)
