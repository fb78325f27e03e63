"""Shard geometry, as TorchRec computes it.

    row_wise, 10 rows on 4 ranks          column_wise, dim 512, blocks of 128
    rows 0-2  -> rank 0                   cols   0-127 | 128-255 | 256-383 | 384-511
    rows 3-5  -> rank 1
    rows 6-8  -> rank 2                   grid_shard: every column block is split
    row  9    -> rank 3  (3,3,3,1)        row-wise over the ranks of one host

Row blocks are ceil(rows / n) long, so trailing ranks may get a short or empty block (5 rows on
4 ranks: 2,2,1,0). Column blocks are the smallest width >= 128 (or a requested minimum) that is a
multiple of 4 and divides the dim; a dim with no such divisor stays whole.
"""

from __future__ import annotations

import math
from typing import NamedTuple, NotRequired, TypedDict, Unpack

import numpy as np
import numpy.typing as npt

from shardrec_planner.enums import ShardingType

MIN_CW_DIM = 128
"""Narrowest column block the planner proposes (TorchRec's MIN_CW_DIM)."""

Shard = tuple[tuple[int, int], tuple[int, int]]
"""((rows, cols), (row_offset, col_offset))."""


def row_block_sizes(rows: int, num_blocks: int) -> list[int]:
    """Rows per block when `rows` are split into `num_blocks` blocks of ceil(rows / num_blocks)."""
    if num_blocks < 1:
        raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    if rows == 0:
        return [0] * num_blocks
    block = math.ceil(rows / num_blocks)
    return [max(0, min(block, rows - i * block)) for i in range(num_blocks)]


def column_block_size(dim: int, min_block: int = MIN_CW_DIM) -> int:
    """Column block width: smallest multiple of 4 in [min_block, dim) dividing dim, else dim."""
    if min_block < 1:
        raise ValueError(f"column block minimum must be >= 1, got {min_block}")
    for width in range(min_block, dim):
        if dim % width == 0 and width % 4 == 0:
            return width
    return dim


class ShardArrays(NamedTuple):
    """Shards as parallel arrays (one entry per shard), for planning thousands of tables."""

    rows: npt.NDArray[np.int64]
    cols: npt.NDArray[np.int64]
    row_offsets: npt.NDArray[np.int64]
    col_offsets: npt.NDArray[np.int64]

    def to_list(self) -> list[Shard]:
        return [
            ((r, c), (ro, co))
            for r, c, ro, co in zip(
                self.rows.tolist(),
                self.cols.tolist(),
                self.row_offsets.tolist(),
                self.col_offsets.tolist(),
                strict=True,
            )
        ]


def _row_blocks(rows: int, num_blocks: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    block = -(-rows // num_blocks) if rows else 0
    starts = np.minimum(np.arange(num_blocks, dtype=np.int64) * block, rows)
    sizes = np.minimum(starts + block, rows) - starts
    return sizes, starts


def shard_arrays(
    sharding_type: ShardingType,
    rows: int,
    dim: int,
    *,
    world_size: int,
    local_world_size: int,
    column_block: int | None = None,
) -> ShardArrays:
    """`shard_geometry` as arrays (same shards, same order)."""
    st = ShardingType(sharding_type)
    if st in (ShardingType.DATA_PARALLEL, ShardingType.TABLE_WISE):
        n = world_size if st is ShardingType.DATA_PARALLEL else 1
        zeros = np.zeros(n, dtype=np.int64)
        return ShardArrays(
            np.full(n, rows, dtype=np.int64), np.full(n, dim, dtype=np.int64), zeros, zeros
        )
    if st in (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE):
        n = world_size if st is ShardingType.ROW_WISE else local_world_size
        sizes, starts = _row_blocks(rows, n)
        zeros = np.zeros(n, dtype=np.int64)
        return ShardArrays(sizes, np.full(n, dim, dtype=np.int64), starts, zeros)
    width = column_block if column_block is not None else column_block_size(dim)
    if dim % width != 0:
        raise ValueError(f"column block {width} does not divide embedding dim {dim}")
    nblocks = dim // width
    col_offsets = np.arange(nblocks, dtype=np.int64) * width
    if st in (ShardingType.COLUMN_WISE, ShardingType.TABLE_COLUMN_WISE):
        return ShardArrays(
            np.full(nblocks, rows, dtype=np.int64),
            np.full(nblocks, width, dtype=np.int64),
            np.zeros(nblocks, dtype=np.int64),
            col_offsets,
        )
    assert st is ShardingType.GRID_SHARD
    sizes, starts = _row_blocks(rows, local_world_size)
    return ShardArrays(
        np.tile(sizes, nblocks),
        np.full(nblocks * local_world_size, width, dtype=np.int64),
        np.tile(starts, nblocks),
        np.repeat(col_offsets, local_world_size),
    )


class ShardSplit(TypedDict):
    """How a table is split, the keyword arguments of `shard_arrays` and `shard_geometry`: the
    job's ranks, and for column-split types the block width (default `column_block_size(dim)`)."""

    world_size: int
    local_world_size: int
    column_block: NotRequired[int | None]


def shard_geometry(
    sharding_type: ShardingType, rows: int, dim: int, **split: Unpack[ShardSplit]
) -> list[Shard]:
    """The shards of a `rows x dim` table in TorchRec's order.

    data_parallel returns one full-table "shard" per rank; column-split types use blocks of
    `column_block` (default `column_block_size(dim)`); grid_shard lists, for each column block, the
    row blocks of one host.
    """
    return shard_arrays(sharding_type, rows, dim, **split).to_list()
