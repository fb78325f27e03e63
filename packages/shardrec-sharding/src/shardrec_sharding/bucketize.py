"""TorchRec's `bucketize_kjt_before_all2all`: split a KJT's ids into row blocks, one per rank.

The rule is fbgemm's `block_bucketize_sparse_features` (TorchRec 1.8's row-wise input dist), in
torch ops, vectorized over the ids (a loop over features only). For feature `t` with block size
`s = block_sizes[t]` and `m = num_buckets`, each id is read as an unsigned 64-bit number `u`:

- `u < s * m`: bucket `u // s`, new id `u % s`;
- with `block_bucketize_row_pos` (per feature, `m + 1` row bounds `r`): `u < r[m]`: the bucket
  `p` with `r[p] <= u < r[p + 1]` (the last such p where bounds repeat), new id `u - r[p]`;
- otherwise (ids past the blocks, negative ids): bucket `u % m`, new id `u // m`;
- `keep_original_indices`: the new id is the id itself.

The output KJT's keys are the input's repeated `num_buckets` times; its lengths run bucket by
bucket, then feature, then bag; within a bag the ids keep their order. Weights follow their
ids; `bucketize_pos` replaces them by each id's position in its bag. `output_permute` also
returns, per input id, its position in the output values (`unbucketize_permute`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from shardrec_jagged import KeyedJaggedTensor

__all__ = ["bucketize_kjt_before_all2all"]


def _outside(ids: Tensor, m: int) -> tuple[Tensor, Tensor]:
    """Bucket `u % m` and new id `u // m` (as int64) of ids read as unsigned 64-bit `u`.

    `u = 2h + low` with `h = u >> 1` (a non-negative int64) and `low` its last bit, so
    `u // m = 2 (h // m) + (2 (h % m) + low) // m` and nothing overflows but the final `2 x`
    (which wraps as uint64 -> int64 does, only when m is 1)."""
    h = (ids >> 1) & ((1 << 63) - 1)
    low = ids & 1
    q, r = torch.div(h, m, rounding_mode="floor"), torch.remainder(h, m)
    rest = 2 * r + low
    return torch.remainder(rest, m), 2 * q + torch.div(rest, m, rounding_mode="floor")


def _check(
    kjt: KeyedJaggedTensor,
    num_buckets: int,
    block_sizes: Tensor,
    total_num_blocks: Tensor | None,
    row_pos: Sequence[Tensor] | None,
) -> None:
    features = len(kjt.keys())
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, int) or num_buckets < 1:
        raise ValueError(f"num_buckets must be an int >= 1, got {num_buckets!r}")
    if block_sizes.numel() != features:
        raise ValueError(
            f"block_sizes has {block_sizes.numel()} entries for {features} features "
            f"{list(kjt.keys())}; give one block size per feature"
        )
    if features and int(block_sizes.min()) < 1 and row_pos is None:
        raise ValueError(f"block_sizes must be >= 1, got {block_sizes.tolist()}")
    if total_num_blocks is not None:
        raise ValueError(
            "total_num_blocks (two-level bucketization) is not supported; pass None and give "
            "the row bounds of each bucket as block_bucketize_row_pos instead"
        )
    if kjt.values().is_floating_point():
        raise ValueError(f"ids must be integers, got values of dtype {kjt.values().dtype}")
    if row_pos is not None:
        if len(row_pos) != features:
            raise ValueError(
                f"block_bucketize_row_pos has {len(row_pos)} tensors for {features} features; "
                "give one per feature"
            )
        for t, pos in enumerate(row_pos):
            if pos.numel() != num_buckets + 1:
                raise ValueError(
                    f"block_bucketize_row_pos[{t}] has {pos.numel()} bounds; a feature's "
                    f"{num_buckets} buckets need {num_buckets + 1} (from 0 to its rows)"
                )


def bucketize_kjt_before_all2all(
    kjt: KeyedJaggedTensor,
    num_buckets: int,
    block_sizes: Tensor,
    total_num_blocks: Tensor | None = None,
    output_permute: bool = False,
    bucketize_pos: bool = False,
    block_bucketize_row_pos: list[Tensor] | None = None,
    keep_original_indices: bool = False,
) -> tuple[KeyedJaggedTensor, Tensor | None]:
    """`kjt`'s ids in `num_buckets` row blocks (module docstring), and with `output_permute`
    each input id's position in the output values (else None). TorchRec's signature;
    `total_num_blocks` must be None (two-level bucketization is refused with the fix)."""
    _check(kjt, num_buckets, block_sizes, total_num_blocks, block_bucketize_row_pos)
    m = num_buckets
    keys = list(kjt.keys())
    ids = kjt.values().to(torch.int64)
    lengths = kjt.lengths().view(-1).to(torch.int64)
    bags = lengths.numel()
    bag = torch.repeat_interleave(torch.arange(bags), lengths)
    if kjt.variable_stride_per_key():
        per_key = torch.tensor(kjt.stride_per_key(), dtype=torch.int64)
    else:
        per_key = torch.full((len(keys),), kjt.stride(), dtype=torch.int64)
    feature = torch.repeat_interleave(torch.arange(len(keys)), per_key)[bag]
    bucket, new = _outside(ids, m)
    for t in range(len(keys)):
        mine = feature == t
        v = ids[mine]
        if block_bucketize_row_pos is not None:
            bounds = block_bucketize_row_pos[t].to(torch.int64)
            inside = (v >= 0) & (v < bounds[-1])
            p = torch.searchsorted(bounds, v, right=True) - 1
            p = p.clamp(0, m - 1)
            in_new = v - bounds[p]
        else:
            size = int(block_sizes[t])
            inside = (v >= 0) & (v < size * m)
            p = torch.div(v, size, rounding_mode="floor")
            in_new = v - p * size
        bucket[mine] = torch.where(inside, p, bucket[mine])
        new[mine] = torch.where(inside, in_new, new[mine])
    if keep_original_indices:
        new = ids
    order = torch.sort(bucket * bags + bag, stable=True).indices
    out_lengths = torch.bincount(bucket * bags + bag, minlength=m * bags)
    weights = kjt.weights_or_none()
    if bucketize_pos:
        starts = torch.cumsum(lengths, 0) - lengths
        weights = (torch.arange(ids.numel()) - starts[bag])[order]
    elif weights is not None:
        weights = weights[order]
    permute = None
    if output_permute:
        permute = torch.empty_like(order)
        permute[order] = torch.arange(order.numel())
    spkr = kjt.stride_per_key_per_rank() if kjt.variable_stride_per_key() else None
    # Keys repeat once per bucket (TorchRec's; the all-to-all splits them), which only the
    # unchecked constructor builds; everything in it derives from the checked input.
    out = KeyedJaggedTensor._unchecked(
        keys * m,
        new[order].to(kjt.values().dtype),
        weights,
        out_lengths.to(kjt.lengths().dtype),
        None,
        None if spkr is not None else kjt.stride(),
        None if spkr is None else [list(s) for s in spkr] * m,
    )
    return out, permute
