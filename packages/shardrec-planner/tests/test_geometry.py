"""Shard geometry against naive references (and TorchRec's own helper when it is installed)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shardrec_planner import ShardingType, column_block_size, row_block_sizes, shard_geometry


def _naive_rows(rows: int, n: int) -> list[int]:
    block = math.ceil(rows / n) if rows else 0
    out, left = [], rows
    for _ in range(n):
        take = min(block, left)
        out.append(take)
        left -= take
    return out


def _naive_block(dim: int, lower: int) -> int:
    candidates = [w for w in range(lower, dim) if dim % w == 0 and w % 4 == 0]
    return candidates[0] if candidates else dim


def test_named_examples() -> None:
    assert row_block_sizes(10, 4) == [3, 3, 3, 1]
    assert row_block_sizes(5, 4) == [2, 2, 1, 0]
    assert row_block_sizes(0, 3) == [0, 0, 0]
    assert row_block_sizes(7, 1) == [7]
    assert column_block_size(512) == 128
    assert column_block_size(384) == 128
    assert column_block_size(64) == 64  # narrower than 128: stays whole
    assert column_block_size(260) == 260  # no multiple of 4 in [128, 260) divides 260
    assert column_block_size(256, 64) == 64


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(0, 5000), n=st.integers(1, 64))
def test_row_blocks_match_naive(rows: int, n: int) -> None:
    assert row_block_sizes(rows, n) == _naive_rows(rows, n)


@settings(max_examples=200, deadline=None)
@given(dim=st.integers(1, 1024), lower=st.integers(1, 300))
def test_column_block_matches_naive(dim: int, lower: int) -> None:
    assert column_block_size(dim, lower) == _naive_block(dim, lower)


@settings(max_examples=100, deadline=None)
@given(
    st_=st.sampled_from([t for t in ShardingType if t is not ShardingType.DATA_PARALLEL]),
    rows=st.integers(0, 40),
    dim=st.sampled_from([4, 8, 256, 384, 512]),
    hosts=st.integers(1, 3),
    local=st.integers(1, 4),
)
def test_shards_tile_the_table_exactly(
    st_: ShardingType, rows: int, dim: int, hosts: int, local: int
) -> None:
    grid = torch.zeros(rows, dim, dtype=torch.int64)
    shards = shard_geometry(st_, rows, dim, world_size=hosts * local, local_world_size=local)
    for (r, c), (o0, o1) in shards:
        grid[o0 : o0 + r, o1 : o1 + c] += 1
    assert bool((grid == 1).all())
    if st_ is ShardingType.ROW_WISE:
        assert len(shards) == hosts * local
    if st_ is ShardingType.TABLE_ROW_WISE:
        assert len(shards) == local


def test_data_parallel_is_one_full_copy_per_rank() -> None:
    assert (
        shard_geometry(ShardingType.DATA_PARALLEL, 5, 8, world_size=3, local_world_size=3)
        == [((5, 8), (0, 0))] * 3
    )


@pytest.mark.parametrize("st_", [t.value for t in ShardingType])
def test_matches_torchrec_helper(st_: str) -> None:
    sharding_plan = pytest.importorskip("torchrec.distributed.sharding_plan")
    for rows, dim, world, local in [(10, 512, 4, 2), (5, 256, 4, 4), (1000, 384, 8, 4)]:
        sizes, offsets = sharding_plan.calculate_shard_sizes_and_offsets(
            torch.empty(rows, dim, device="meta"), world, local, st_
        )
        ours = shard_geometry(
            ShardingType(st_), rows, dim, world_size=world, local_world_size=local
        )
        assert [list(s) for s, _ in ours] == [list(s) for s in sizes]
        assert [list(o) for _, o in ours] == [list(o) for o in offsets]
