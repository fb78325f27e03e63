"""Tiered (`key_value`) shards of every sharding type in the planner: each shard's cache, store
and miss traffic against the formula of disk_tier.py's docstring computed by hand, the step
time the tier adds, auto_tier placing a table row_wise on the disk tier when no rank's disk or
memory holds it whole, the report's per-shard lines, and the virtual-table kernels' sharding
types."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from _planner_models import make_ebc
from torch import nn

from shardrec_embedding import DynamicTableConfig, EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_planner import (
    CacheParams,
    EmbeddingShardingPlanner,
    EmbeddingTableSharder,
    ParameterConstraints,
    ParameterSharding,
    PlannerError,
    ShardingPlan,
    Topology,
    column_wise,
    construct_module_sharding_plan,
    row_wise,
    table_wise,
)
from shardrec_planner.cache_stats import SampledCacheStatistics
from shardrec_planner.disk_tier import (
    MAP_BYTES_PER_ROW,
    SLOT_META_BYTES,
    STORE_HEADER_BYTES,
    tier_load_factors,
)
from shardrec_planner.enums import (
    VIRTUAL_TABLE_SHARDING_TYPES,
    EmbeddingComputeKernel,
    ShardingType,
)
from shardrec_planner.shard_metadata import EnumerableShardingSpec, ShardMetadata, placement

GiB = 1024**3
SHARDERS = [
    EmbeddingTableSharder(
        type(make_ebc([("x", 1, 4)])), fused_params={"optimizer": "rowwise_adagrad"}
    )
]
ROWS, DIM, BATCH = 100_000, 256, 512
TOPO = Topology(world_size=2, local_world_size=2, compute_device="cpu", ddr_cap=64 * GiB)
# (sharding type) -> its shards' (rows, cols) on 2 ranks of one host, and each shard's share
# of the table's ids (row blocks: their share of the rows; column blocks: every id)
LAYOUTS = {
    "table_wise": ([(ROWS, DIM)], [1.0]),
    "row_wise": ([(ROWS // 2, DIM)] * 2, [0.5, 0.5]),
    "table_row_wise": ([(ROWS // 2, DIM)] * 2, [0.5, 0.5]),
    "column_wise": ([(ROWS, DIM // 2)] * 2, [1.0, 1.0]),
    "table_column_wise": ([(ROWS, DIM // 2)] * 2, [1.0, 1.0]),
}


def _plan(st: str, kernel: str, cache: CacheParams | None = None) -> ShardingPlan:
    cons = {
        "t": ParameterConstraints(
            sharding_types=[st], compute_kernels=[kernel], cache_params=cache, min_partition=128
        )
    }
    planner = EmbeddingShardingPlanner(TOPO, batch_size=BATCH, constraints=cons, stats=[])
    return planner.plan(make_ebc([("t", ROWS, DIM)]), SHARDERS)


@pytest.mark.parametrize("st", sorted(LAYOUTS))
def test_each_shards_cache_store_and_traffic_follow_the_formula(st: str) -> None:
    lf = 0.1
    tiered = _plan(st, "key_value", CacheParams(load_factor=lf))
    fused = _plan(st, "fused")
    shapes, shares = LAYOUTS[st]
    ps = tiered.plan[""]["t"]
    assert ps.sharding_type.value == st and ps.compute_kernel.value == "key_value"
    assert ps.sharding_spec is not None
    assert [tuple(s.shard_sizes) for s in ps.sharding_spec.shards] == shapes
    assert tiered.stats is not None and fused.stats is not None
    [t], [f] = tiered.stats.tables, fused.stats.tables
    tier = t.tier
    assert tier is not None and len(tier.shards) == len(shapes)
    ids = BATCH * TOPO.world_size  # distinct ids of the table per step (uniform, no stats)
    disk_bw = TOPO.disk_bw
    assert disk_bw is not None
    seconds = 0.0
    state = 0
    for shard, (r, c), q, rank in zip(tier.shards, shapes, shares, ps.ranks, strict=True):
        row = (c + 1) * 4  # float32 weights + one rowwise Adagrad value
        cache_rows = round(lf * r)
        read = min(r, q * ids) * (1 - lf) * row
        assert (shard.rank, shard.rows, shard.cols) == (rank, r, c)
        assert shard.cache_rows == cache_rows
        assert shard.cache_bytes == cache_rows * (row + SLOT_META_BYTES) + r * MAP_BYTES_PER_ROW
        assert shard.disk_bytes == STORE_HEADER_BYTES + r * row
        assert shard.read_bytes_per_step == pytest.approx(read)
        assert shard.disk_seconds_per_step == pytest.approx(2 * read / disk_bw)
        seconds += 2 * read / disk_bw
        state += r * row
    assert tier.hit_rate == pytest.approx(lf)
    assert tier.cache_rows == sum(s.cache_rows for s in tier.shards)
    assert tier.disk_bytes == sum(s.disk_bytes for s in tier.shards)
    assert tier.read_bytes_per_step == pytest.approx(
        sum(s.read_bytes_per_step for s in tier.shards)
    )
    # the tier replaces the shard's rows and state in memory by its cache, adds its disk time
    assert t.memory_bytes == f.memory_bytes - state + tier.cache_bytes
    assert t.cost_s == pytest.approx(f.cost_s + seconds)
    ranks = {r.rank: r.disk_bytes for r in tiered.stats.ranks}
    for shard in tier.shards:
        assert ranks[shard.rank] >= shard.disk_bytes


def test_sampled_statistics_scale_with_each_row_blocks_share_of_the_ids() -> None:
    rng = np.random.default_rng(3)
    sample = rng.zipf(1.2, 40 * 1024) % ROWS
    stats = SampledCacheStatistics(sample, num_rows=ROWS, ids_per_batch=1024)
    plan = _plan("row_wise", "key_value", CacheParams(load_factor=0.05, stats=stats))
    assert plan.stats is not None
    tier = plan.stats.tables[0].tier
    assert tier is not None and tier.hit_rate_source == "CacheParams.stats"
    miss = stats.expected_miss_rate(0.05)
    assert tier.hit_rate == pytest.approx(1 - miss)
    for shard in tier.shards:
        lookups = min(shard.rows, 0.5 * stats.expected_lookups)
        assert shard.read_bytes_per_step == pytest.approx(lookups * miss * (DIM + 1) * 4)


def test_auto_cache_sizes_hold_two_batches_of_the_busiest_shard() -> None:
    # two row blocks of 500 rows each seeing 200 distinct ids: at least 400 / 500 cached
    rows, shares = np.array([500, 500]), np.array([0.5, 0.5])
    assert min(tier_load_factors(rows, shares, 400.0)) == 0.8
    # column blocks see every id: 400 distinct ids need 800 of 1000 rows
    assert min(tier_load_factors(np.array([1000, 1000]), np.ones(2), 400.0)) == 0.8
    assert tier_load_factors(np.array([10, 0]), np.array([1.0, 0.0]), 50.0) == [1.0]


# -- auto_tier across sharding types --------------------------------------------------------------
BIG = make_ebc([("big", 10_000_000, 64)])  # 2.4 GiB of rows and rowwise Adagrad state


def _two_ranks(ddr: int, ssd: int, **kwargs: object) -> EmbeddingShardingPlanner:
    topo = Topology(
        world_size=2, local_world_size=2, compute_device="cpu", ddr_cap=ddr, ssd_cap=ssd
    )
    return EmbeddingShardingPlanner(topo, batch_size=BATCH, stats=[], **kwargs)  # type: ignore[arg-type]


def test_auto_tier_places_row_blocks_on_disk_when_no_rank_holds_the_table() -> None:
    # one rank's 2 GiB disk cannot hold the 2.4 GiB store (table_wise tiered), nor its 1 GiB of
    # memory half the table (row_wise in memory): row_wise tiered is the plan
    planner = _two_ranks(GiB, 2 * GiB, auto_tier=True)
    plan = planner.plan(BIG, SHARDERS)
    ps = plan.plan[""]["big"]
    assert ps.compute_kernel.value == "key_value"
    assert ps.sharding_type.value in ("row_wise", "table_row_wise")
    assert ps.cache_params is not None and ps.cache_params.load_factor is not None
    assert plan.stats is not None
    tier = plan.stats.tables[0].tier
    assert tier is not None and [s.rows for s in tier.shards] == [5_000_000, 5_000_000]
    for r in plan.stats.ranks:
        assert r.disk_bytes == STORE_HEADER_BYTES + 5_000_000 * 65 * 4 <= 2 * GiB
        assert r.memory_bytes <= planner.memory_cap
    report = plan.report()
    assert "big: tier disk (key_value), store 2.4 GiB" in report
    assert "    shard 0 on rank 0: rows 0-4,999,999 x cols 0-63; store 1.2 GiB; cache" in report
    assert "    shard 1 on rank 1: rows 5,000,000-9,999,999 x cols 0-63; store 1.2 GiB" in report
    assert "disk tier (largest per-rank store total 1.2 GiB)" in report
    back = ShardingPlan.from_json(plan.to_json())
    assert back.stats is not None and back.stats.tables == plan.stats.tables


def test_table_wise_only_is_still_too_big_for_one_ranks_disk() -> None:
    cons = {"big": ParameterConstraints(sharding_types=["table_wise"])}
    with pytest.raises(PlannerError, match=r"'big'.*even tiered on disk.*ssd_cap"):
        _two_ranks(GiB, 2 * GiB, auto_tier=True, constraints=cons).plan(BIG, SHARDERS)
    with pytest.raises(PlannerError, match=r"auto_tier=True"):
        _two_ranks(GiB, 2 * GiB).plan(BIG, SHARDERS)


def test_a_table_that_fits_in_memory_split_stays_in_memory() -> None:
    plan = _two_ranks(2 * GiB, 100 * GiB, auto_tier=True).plan(BIG, SHARDERS)
    assert plan.plan[""]["big"].compute_kernel.value == "fused"


# -- virtual-table kernels ------------------------------------------------------------------------
def _spec(shapes: list[tuple[list[int], list[int]]]) -> EnumerableShardingSpec:
    return EnumerableShardingSpec(
        shards=tuple(
            ShardMetadata(
                shard_offsets=tuple(o), shard_sizes=tuple(s), placement=placement("cpu", r, 2)
            )
            for r, (s, o) in enumerate(shapes)
        )
    )


@pytest.mark.parametrize("kernel", ["ssd_virtual_table", "dram_virtual_table"])
def test_virtual_table_kernels_run_on_the_sharding_types_of_one_set(kernel: str) -> None:
    k = EmbeddingComputeKernel(kernel)
    assert {t.value for t in VIRTUAL_TABLE_SHARDING_TYPES[k]} == {
        "table_wise",
        "row_wise",
        "column_wise",
        "table_column_wise",
    }
    ParameterSharding(
        sharding_type=ShardingType.ROW_WISE,
        compute_kernel=k,
        ranks=[0, 1],
        sharding_spec=_spec([([5, 4], [0, 0]), ([5, 4], [5, 0])]),
    )
    with pytest.raises(ValueError, match=r"placed table_wise, row_wise, column_wise or table_col"):
        ParameterSharding(
            sharding_type=ShardingType.TABLE_ROW_WISE,
            compute_kernel=k,
            ranks=[0, 1],
            sharding_spec=_spec([([10, 4], [0, 0]), ([10, 4], [0, 4])]),
        )


class _Dynamic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection(
            [
                EmbeddingBagConfig(
                    name="t",
                    embedding_dim=16,
                    num_embeddings=4096,
                    feature_names=["f"],
                    dynamic=DynamicTableConfig(),
                )
            ],
            device="meta",
        )


@pytest.mark.parametrize("st", ["table_wise", "row_wise"])
@pytest.mark.parametrize("kernel", ["ssd_virtual_table", "dram_virtual_table"])
def test_virtual_tables_cache_their_capacity_and_store_every_row(st: str, kernel: str) -> None:
    model = _Dynamic()
    sharders = [
        EmbeddingTableSharder(EmbeddingBagCollection, fused_params=SHARDERS[0].fused_params)
    ]
    planner = EmbeddingShardingPlanner(TOPO, batch_size=64, stats=[])
    placed = {"table_wise": table_wise(rank=1), "row_wise": row_wise()}[st]
    plans = {}
    for k in (kernel, "fused"):
        sub = construct_module_sharding_plan(model.sparse, {"t": placed}, world_size=2)
        sub["t"] = dataclasses.replace(sub["t"], compute_kernel=EmbeddingComputeKernel(k))
        plans[k] = planner.estimate(model, sharders, ShardingPlan(plan={"sparse": sub}))
    ours, fused = (plans[k].stats for k in (kernel, "fused"))
    assert ours is not None and fused is not None
    [t], [f] = ours.tables, fused.tables
    tier = t.tier
    assert tier is not None and tier.load_factor == 1.0 and f.tier is None
    row = (16 + 1) * 4  # float32 weights + one rowwise Adagrad value
    stores = [s.rows * row for s in tier.shards]
    assert [s.cache_rows for s in tier.shards] == [s.rows for s in tier.shards]
    assert sum(s.rows for s in tier.shards) == 4096
    assert [s.disk_bytes for s in tier.shards] == stores
    assert t.cost_s == pytest.approx(f.cost_s)  # no statistics: no misses
    disk = {r.rank: r.disk_bytes for r in ours.ranks}
    if kernel == "ssd_virtual_table":  # the slots are the cache, the store on disk
        assert t.memory_bytes == f.memory_bytes
        assert sum(disk.values()) == sum(stores)
        assert "t: tier disk (ssd_virtual_table), store 272.0 KiB; cache 4,096 rows" in (
            plans[kernel].report()
        )
    else:  # ... or in RAM
        assert t.memory_bytes == f.memory_bytes + sum(stores)
        assert set(disk.values()) == {0}
        assert "t: tier RAM (dram_virtual_table)" in plans[kernel].report()


@pytest.mark.parametrize("kernel", ["ssd_virtual_table", "dram_virtual_table"])
def test_column_split_virtual_tables_cache_every_slot_of_their_columns(kernel: str) -> None:
    """A column_wise raw-id tier: each rank's cache is every slot of its column block, its
    store those columns (and its own rowwise-Adagrad value) of every row."""
    model = _Dynamic()
    sharders = [
        EmbeddingTableSharder(EmbeddingBagCollection, fused_params=SHARDERS[0].fused_params)
    ]
    planner = EmbeddingShardingPlanner(TOPO, batch_size=64, stats=[])
    sub = construct_module_sharding_plan(
        model.sparse, {"t": column_wise(ranks=[0, 1], compute_kernel=kernel)}, world_size=2
    )
    stats = planner.estimate(model, sharders, ShardingPlan(plan={"sparse": sub})).stats
    assert stats is not None
    [t] = stats.tables
    assert t.tier is not None and t.tier.load_factor == 1.0
    assert [(s.rows, s.cache_rows) for s in t.tier.shards] == [(4096, 4096)] * 2
    assert [s.disk_bytes for s in t.tier.shards] == [4096 * (8 + 1) * 4] * 2
