"""construct_module_sharding_plan and the per-type helpers."""

from __future__ import annotations

import pytest
from _planner_models import make_ebc, sharder

from shardrec_planner import EmbeddingComputeKernel, ShardingType, manual

SPEC = [("t0", 100, 64), ("t1", 10, 64), ("t2", 50, 64), ("t3", 9, 32), ("t4", 20, 16)]


def test_issue_example() -> None:
    ebc = make_ebc(SPEC)
    plan = manual.construct_module_sharding_plan(
        ebc,
        {
            "t0": manual.table_wise(rank=0),
            "t1": manual.row_wise(),
            "t2": manual.column_wise(ranks=[0, 1]),
            "t3": manual.table_row_wise(host_index=0),
            "t4": manual.data_parallel(),
        },
        world_size=4,
        local_world_size=2,
        device_type="cuda",
    )
    assert plan["t0"].ranks == [0]
    assert plan["t0"].shards[0].placement == "rank:0/cuda:0"
    assert plan["t0"].compute_kernel is EmbeddingComputeKernel.FUSED
    assert [s.shard_sizes for s in plan["t1"].shards] == [(3, 64), (3, 64), (3, 64), (1, 64)]
    assert [s.shard_offsets for s in plan["t1"].shards] == [(0, 0), (3, 0), (6, 0), (9, 0)]
    assert [s.shard_sizes for s in plan["t2"].shards] == [(50, 32), (50, 32)]
    assert [s.shard_offsets for s in plan["t2"].shards] == [(0, 0), (0, 32)]
    assert plan["t3"].ranks == [0, 1]
    assert [s.shard_sizes for s in plan["t3"].shards] == [(5, 32), (4, 32)]
    assert plan["t4"].sharding_type is ShardingType.DATA_PARALLEL
    assert plan["t4"].compute_kernel is EmbeddingComputeKernel.DENSE
    assert plan["t4"].ranks == [0, 1, 2, 3] and plan["t4"].sharding_spec is None


def test_grid_and_table_column_wise() -> None:
    ebc = make_ebc([("g", 10, 256), ("c", 4, 512)])
    plan = manual.construct_module_sharding_plan(
        ebc,
        {
            "g": manual.grid_shard(host_indexes=[1, 0]),
            "c": manual.table_column_wise(ranks=[2, 3, 2, 3]),
        },
        world_size=4,
        local_world_size=2,
        sharder=sharder(),
    )
    g = plan["g"]
    assert g.ranks == [2, 3, 0, 1]
    assert [(s.shard_offsets, s.shard_sizes) for s in g.shards] == [
        ((0, 0), (5, 128)),
        ((5, 0), (5, 128)),
        ((0, 128), (5, 128)),
        ((5, 128), (5, 128)),
    ]
    assert [s.shard_sizes for s in plan["c"].shards] == [(4, 128)] * 4


def test_column_wise_without_ranks_uses_blocks_of_128() -> None:
    ebc = make_ebc([("c", 4, 384), ("s", 4, 64)])
    plan = manual.construct_module_sharding_plan(
        ebc, {"c": manual.column_wise(), "s": manual.column_wise()}, world_size=2
    )
    assert plan["c"].ranks == [0, 1, 0]
    assert [s.shard_sizes for s in plan["c"].shards] == [(4, 128)] * 3
    assert plan["s"].ranks == [0]


@pytest.mark.parametrize(
    ("gen", "message"),
    [
        (manual.table_wise(rank=4), "rank 4 is out of range for world size 4"),
        (
            manual.column_wise(ranks=[0, 1, 2]),
            r"dim 64 cannot be split evenly across ranks \[0, 1, 2\]",
        ),
        (manual.table_row_wise(host_index=2), "host_index 2 is out of range"),
        (manual.grid_shard(host_indexes=[0, 1]), r"1 column block.*2 host index"),
        (manual.table_column_wise(ranks=[1, 2]), r"ranks \[1, 2\] span hosts \[0, 1\]"),
    ],
)
def test_bad_helper_arguments(gen: object, message: str) -> None:
    ebc = make_ebc([("t", 8, 64)])
    with pytest.raises(ValueError, match=message):
        manual.construct_module_sharding_plan(ebc, {"t": gen}, world_size=4, local_world_size=2)  # type: ignore[dict-item]


def test_every_table_must_be_named() -> None:
    ebc = make_ebc([("a", 8, 8), ("b", 8, 8)])
    with pytest.raises(ValueError, match=r"missing \['b'\], unknown \['z'\]"):
        manual.construct_module_sharding_plan(
            ebc, {"a": manual.row_wise(), "z": manual.row_wise()}, world_size=2
        )


def test_bad_world() -> None:
    ebc = make_ebc([("a", 8, 8)])
    with pytest.raises(ValueError, match="local_world_size 3 must be >= 1 and divide world_size 4"):
        manual.construct_module_sharding_plan(
            ebc, {"a": manual.row_wise()}, world_size=4, local_world_size=3
        )


def test_local_size_is_torchrecs_name_for_local_world_size() -> None:
    ebc = make_ebc([("a", 16, 8), ("b", 12, 8)])
    gens = {"a": manual.table_row_wise(host_index=1), "b": manual.row_wise()}
    ours = manual.construct_module_sharding_plan(
        ebc, gens, world_size=4, local_world_size=2, device_type="cuda"
    )
    torchrecs = manual.construct_module_sharding_plan(
        ebc, gens, world_size=4, local_size=2, device_type="cuda"
    )
    assert torchrecs == ours
    # host 1 of two hosts of two ranks: ranks 2 and 3, devices cuda:0 and cuda:1
    assert torchrecs["a"].ranks == [2, 3]
    assert [s.placement for s in torchrecs["a"].shards] == ["rank:2/cuda:0", "rank:3/cuda:1"]
    both = manual.construct_module_sharding_plan(
        ebc, gens, world_size=4, local_size=2, local_world_size=2
    )
    assert both["a"].ranks == [2, 3]
    with pytest.raises(ValueError, match="local_size 2 and local_world_size 4 differ"):
        manual.construct_module_sharding_plan(
            ebc, gens, world_size=4, local_size=2, local_world_size=4
        )
