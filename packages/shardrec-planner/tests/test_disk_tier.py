"""The disk tier in the planner: LRU hit-rate estimates against a Python LRU, tiered placement
(fits in memory / tiered / too big even for the disk), storage and miss-traffic formulas, the
report lines, and the disk part of calibration."""

from __future__ import annotations

import collections
import dataclasses
import json
import pathlib

import numpy as np
import pytest
from _planner_models import make_ebc

from shardrec_planner import (
    CacheParams,
    Calibration,
    EmbeddingShardingPlanner,
    EmbeddingTableSharder,
    ParameterConstraints,
    PlannerError,
    ShardingPlan,
    Topology,
)
from shardrec_planner.cache_stats import (
    FIRST_ACCESS,
    SampledCacheStatistics,
    lru_hit_rate,
    lru_stack_distances,
)
from shardrec_planner.calibration import measure_disk_read_bandwidth
from shardrec_planner.disk_tier import (
    MAP_BYTES_PER_ROW,
    SLOT_META_BYTES,
    STORE_HEADER_BYTES,
    auto_load_factors,
)

GiB = 1024**3
DIM = 64
ROW = (DIM + 1) * 4  # weight + rowwise Adagrad state, float32
SHARDERS = [
    EmbeddingTableSharder(
        type(make_ebc([("x", 1, 4)])), fused_params={"optimizer": "rowwise_adagrad"}
    )
]


def lru_reference(ids: list[int], cache_rows: int) -> float:
    """An LRU cache of `cache_rows` rows as an OrderedDict: the share of accesses that hit."""
    cache: collections.OrderedDict[int, None] = collections.OrderedDict()
    hits = 0
    for x in ids:
        if x in cache:
            hits += 1
            cache.move_to_end(x)
            continue
        cache[x] = None
        if len(cache) > cache_rows:
            cache.popitem(last=False)
    return hits / len(ids) if ids else 0.0


# -- the hit-rate estimator ---------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("skew", [1.05, 1.3, 2.0])
def test_lru_hit_rate_matches_an_ordered_dict_lru_on_zipf_ids(seed: int, skew: float) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 4000))
    ids = rng.zipf(skew, n) % int(rng.integers(1, 2000))
    for cache_rows in (0, 1, 2, 7, 64, 500, 5000):
        assert lru_hit_rate(ids, cache_rows) == lru_reference(ids.tolist(), cache_rows)


def test_lru_named_edge_cases() -> None:
    assert lru_hit_rate([], 10) == 0.0
    assert lru_hit_rate([5], 10) == 0.0
    assert lru_hit_rate([3, 3, 3, 3], 1) == 0.75  # duplicate ids
    assert lru_hit_rate([3, 3, 3, 3], 0) == 0.0
    assert lru_hit_rate(list(range(100)) * 2, 100) == 0.5  # cyclic, exactly fits
    assert lru_hit_rate(list(range(100)) * 2, 99) == 0.0  # cyclic, one short: LRU thrashes
    dist = lru_stack_distances([1, 2, 1, 3, 2, 2])
    assert dist.tolist() == [FIRST_ACCESS, FIRST_ACCESS, 1, FIRST_ACCESS, 2, 0]
    with pytest.raises(ValueError, match="cache_rows must be an int >= 0"):
        lru_hit_rate([1], -1)
    with pytest.raises(ValueError, match="1-d"):
        lru_hit_rate([[1, 2]], 1)


def test_sampled_statistics_match_the_lru_of_each_batchs_distinct_ids() -> None:
    rng = np.random.default_rng(7)
    rows, per_batch = 3000, 256
    ids = rng.zipf(1.1, 20 * per_batch) % rows
    stats = SampledCacheStatistics(ids, num_rows=rows, ids_per_batch=per_batch)
    lookups: list[int] = []
    for lo in range(0, len(ids), per_batch):
        lookups += list(dict.fromkeys(ids[lo : lo + per_batch].tolist()))
    assert stats.expected_lookups == len(lookups) / 20
    for clf in (0.0, 0.01, 0.05, 0.3, 1.0):
        ref = 1.0 - lru_reference(lookups, round(clf * rows))
        assert stats.expected_miss_rate(clf) == pytest.approx(ref)
    assert stats.expected_miss_rate(0.0) == 1.0
    assert stats.cacheability == pytest.approx(stats.expected_miss_rate(1.0))
    with pytest.raises(ValueError, match=r"ids must be in \[0, 10\)"):
        SampledCacheStatistics([3, 10], num_rows=10, ids_per_batch=1)
    with pytest.raises(ValueError, match="non-empty"):
        SampledCacheStatistics([], num_rows=10, ids_per_batch=1)


# -- placement ----------------------------------------------------------------------------------
def _planner(ddr: int, ssd: int, **kwargs: object) -> EmbeddingShardingPlanner:
    topo = Topology(world_size=1, compute_device="cpu", ddr_cap=ddr, ssd_cap=ssd)
    return EmbeddingShardingPlanner(topo, batch_size=512, stats=[], **kwargs)  # type: ignore[arg-type]


BIG = make_ebc([("big", 10_000_000, DIM), ("small", 50_000, DIM)])


def test_tables_that_fit_stay_in_memory_even_with_auto_tier() -> None:
    plan = _planner(8 * GiB, 100 * GiB, auto_tier=True).plan(BIG, SHARDERS)
    for ps in plan.plan[""].values():
        assert ps.compute_kernel.value == "fused"
    assert plan.stats is not None and all(t.tier is None for t in plan.stats.tables)
    assert "disk tier" not in plan.report()


def test_a_table_that_does_not_fit_is_tiered_with_a_cache_that_fits() -> None:
    planner = _planner(2 * GiB, 100 * GiB, auto_tier=True)
    plan = planner.plan(BIG, SHARDERS)
    ps = plan.plan[""]["big"]
    assert ps.compute_kernel.value == "key_value"
    assert ps.sharding_type.value == "table_wise"
    assert ps.cache_params is not None and ps.cache_params.load_factor is not None
    lf = ps.cache_params.load_factor
    assert lf in auto_load_factors(10_000_000, 512)
    assert plan.plan[""]["small"].compute_kernel.value == "fused"
    assert plan.stats is not None
    rank = plan.stats.ranks[0]
    assert rank.memory_bytes <= planner.memory_cap
    assert rank.disk_bytes == STORE_HEADER_BYTES + 10_000_000 * ROW
    tier = next(t.tier for t in plan.stats.tables if t.table == "big")
    assert tier is not None
    # the storage formula: cache rows x (row + state + metadata) + the id map, in memory
    cache_rows = round(lf * 10_000_000)
    assert tier.cache_rows == cache_rows
    assert tier.cache_bytes == cache_rows * (ROW + SLOT_META_BYTES) + 10_000_000 * MAP_BYTES_PER_ROW
    # uniform ids: hit rate = load factor; misses = the batch's ids x miss rate, read + written
    assert tier.hit_rate == pytest.approx(lf)
    assert tier.read_bytes_per_step == pytest.approx(512 * (1 - lf) * ROW)
    assert tier.write_bytes_per_step == pytest.approx(tier.read_bytes_per_step)
    topo = planner.topology
    assert tier.disk_seconds_per_step == pytest.approx(2 * tier.read_bytes_per_step / topo.disk_bw)
    # the plan keeps the cache size through JSON, stats included
    back = ShardingPlan.from_json(plan.to_json())
    assert back.plan[""]["big"].cache_params == ps.cache_params
    assert back.stats is not None and back.stats.tables == plan.stats.tables


def test_the_largest_cache_that_fits_is_chosen() -> None:
    # room for about a third of the rows: the 0.2 cache fits, the 0.5 one does not
    planner = _planner(1500 * 1024**2, 100 * GiB, auto_tier=True)
    ps = planner.plan(make_ebc([("big", 10_000_000, DIM)]), SHARDERS).plan[""]["big"]
    assert ps.cache_params is not None and ps.cache_params.load_factor == 0.2


def test_report_lines_of_a_tiered_table() -> None:
    report = _planner(2 * GiB, 100 * GiB, auto_tier=True).plan(BIG, SHARDERS).report()
    assert "key_value (tiered)" in report
    assert "disk tier (largest per-rank store total 2.4 GiB)" in report
    line = next(x for x in report.splitlines() if x.startswith("  big: tier disk"))
    assert "store 2.4 GiB; cache" in line
    assert "expected hit rate" in line and "uniform ids assumed" in line
    assert "disk per step" in line and "read +" in line and "written" in line
    assert "kernel key_value runs tiered" in report


def test_without_auto_tier_a_table_too_big_for_memory_is_an_error_naming_the_switch() -> None:
    with pytest.raises(PlannerError, match=r"auto_tier=True"):
        _planner(2 * GiB, 100 * GiB).plan(BIG, SHARDERS)


def test_a_constraint_opts_one_table_in() -> None:
    cons = {"big": ParameterConstraints(compute_kernels=["fused", "key_value"])}
    plan = _planner(2 * GiB, 100 * GiB, constraints=cons).plan(BIG, SHARDERS)
    assert plan.plan[""]["big"].compute_kernel.value == "key_value"


def test_too_big_even_for_the_disk_is_a_clear_error() -> None:
    with pytest.raises(PlannerError, match=r"even tiered on disk.*ssd_cap") as err:
        _planner(2 * GiB, 1 * GiB, auto_tier=True).plan(BIG, SHARDERS)
    assert "'big'" in str(err.value) and "2.4 GiB" in str(err.value)


def test_two_tiered_tables_share_the_disk_of_their_ranks() -> None:
    ebc = make_ebc([("a", 10_000_000, DIM), ("b", 10_000_000, DIM)])
    topo = Topology(world_size=2, compute_device="cpu", ddr_cap=2 * GiB, ssd_cap=3 * GiB)
    tw = {n: ParameterConstraints(sharding_types=["table_wise"]) for n in ("a", "b")}
    plan = EmbeddingShardingPlanner(
        topo, batch_size=512, stats=[], auto_tier=True, constraints=tw
    ).plan(ebc, SHARDERS)
    ranks = {name: ps.ranks[0] for name, ps in plan.plan[""].items()}
    assert all(ps.compute_kernel.value == "key_value" for ps in plan.plan[""].values())
    assert ranks["a"] != ranks["b"]  # 2 x 2.4 GiB stores do not fit one rank's 3 GiB
    with pytest.raises(PlannerError, match=r"'b'.*tiered on disk, its store needs 2.4 GiB"):
        topo1 = Topology(world_size=1, compute_device="cpu", ddr_cap=2 * GiB, ssd_cap=3 * GiB)
        EmbeddingShardingPlanner(topo1, batch_size=512, stats=[], auto_tier=True).plan(
            ebc, SHARDERS
        )


def test_explicit_cache_params_and_statistics_drive_the_estimate() -> None:
    rng = np.random.default_rng(0)
    rows = 10_000_000
    sample = (rng.zipf(1.05, 50 * 512) * 2654435761) % rows  # skewed, hot ids spread out
    stats = SampledCacheStatistics(sample, num_rows=rows, ids_per_batch=512)
    cons = {
        "big": ParameterConstraints(
            compute_kernels=["key_value"], cache_params=CacheParams(load_factor=0.01, stats=stats)
        )
    }
    plan = _planner(8 * GiB, 100 * GiB, constraints=cons).plan(BIG, SHARDERS)
    ps = plan.plan[""]["big"]
    assert ps.cache_params is not None and ps.cache_params.load_factor == 0.01
    assert ps.cache_params.stats is stats
    assert plan.stats is not None
    tier = next(t.tier for t in plan.stats.tables if t.table == "big")
    assert tier is not None and tier.hit_rate_source == "CacheParams.stats"
    assert tier.hit_rate == pytest.approx(1.0 - stats.expected_miss_rate(0.01))
    assert tier.hit_rate > 0.01  # skewed ids: better than uniform
    lookups = stats.expected_lookups
    assert tier.read_bytes_per_step == pytest.approx(lookups * (1 - tier.hit_rate) * ROW)


def test_auto_cache_sizes_hold_two_batches() -> None:
    assert min(auto_load_factors(1000, 400)) == 0.8
    assert auto_load_factors(100, 1000) == [1.0]
    assert min(auto_load_factors(10**9, 10)) == 0.001


# -- topology and calibration -------------------------------------------------------------------
def test_topology_disk_defaults_and_refusals() -> None:
    topo = Topology(world_size=1, compute_device="cpu", ddr_cap=GiB)
    assert topo.disk_bw == topo.ssd_mem_bw * 1000
    assert topo.disk_cap == 2 * 1024 * GiB  # TorchRec's SSD_CAP
    with pytest.raises(ValueError, match="disk_bw must be > 0"):
        Topology(world_size=1, compute_device="cpu", ddr_cap=GiB, disk_bw=0.0)


def test_disk_calibration(tmp_path: pathlib.Path) -> None:
    bw = measure_disk_read_bandwidth(tmp_path, file_bytes=4 << 20, reads=200, threads=2)
    assert 1e4 < bw < 1e13
    assert list(tmp_path.iterdir()) == []  # the probe file is removed
    cal = Calibration(
        compute_device="cpu",
        lookup_bw=1e10,
        intra_host_bw=1e9,
        inter_host_bw=1e9,
        machine="m",
        torch_version="t",
        measured_at="now",
        disk_bw=bw,
        disk_free_bytes=40 * GiB,
    )
    topo = Topology.from_calibration(cal.save(tmp_path / "c.json"), world_size=4)
    assert topo.disk_bw == pytest.approx(bw) and topo.ssd_cap == 10 * GiB
    # a file written before the disk fields loads, with no disk measurement
    old = json.loads((tmp_path / "c.json").read_text())
    del old["disk_bw"], old["disk_free_bytes"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert Calibration.load(tmp_path / "old.json").disk_bw is None
    assert Topology.from_calibration(tmp_path / "old.json", world_size=1).ssd_cap == 2048 * GiB
    with pytest.raises(ValueError, match="disk_bw must be a positive number"):
        dataclasses.replace(cal, disk_bw=-1.0)


def test_cache_sizes_that_buy_no_time_are_not_options() -> None:
    # every lookup of this sample is an id's first: the hit rate is 0 at any cache size, so
    # only the smallest cache is an option, and the plan does not spend memory on a larger one
    rows = 10_000_000
    stats = SampledCacheStatistics(np.arange(20 * 512), num_rows=rows, ids_per_batch=512)
    cons = {"big": ParameterConstraints(cache_params=CacheParams(stats=stats))}
    plan = _planner(2 * GiB, 100 * GiB, constraints=cons, auto_tier=True).plan(BIG, SHARDERS)
    ps = plan.plan[""]["big"]
    assert ps.compute_kernel.value == "key_value"
    assert ps.cache_params is not None and ps.cache_params.load_factor == 0.001
    assert ps.cache_params.stats is stats


def test_cli_calibrate_measures_the_disk_when_asked(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from shardrec_planner.cli import main

    out = tmp_path / "cal.json"
    assert main(["calibrate", "--quick", "--out", str(out), "--disk-dir", str(tmp_path)]) == 0
    assert "disk random reads:" in capsys.readouterr().out
    cal = Calibration.load(out)
    assert cal.disk_bw is not None and cal.disk_bw > 0
    assert cal.disk_free_bytes is not None and cal.disk_free_bytes > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.json"]
    topo = Topology.from_calibration(out, world_size=2)
    assert topo.disk_bw == cal.disk_bw and topo.ssd_cap == cal.disk_free_bytes // 2


def test_tier_store_dir_reaches_tables_without_key_value_params() -> None:
    cons = {"small": ParameterConstraints(compute_kernels=["key_value"])}
    planner = _planner(
        2 * GiB, 100 * GiB, constraints=cons, auto_tier=True, tier_store_dir="/data/run/tier"
    )
    plan = planner.plan(BIG, SHARDERS)
    for name in ("big", "small"):
        kv = plan.plan[""][name].key_value_params
        assert kv is not None and kv.ssd_storage_directory == "/data/run/tier"
    assert "rows and optimizer state in /data/run/tier/rank-<r>" in plan.report()
    with pytest.raises(ValueError, match="tier_store_dir must be a non-empty path"):
        _planner(GiB, GiB, tier_store_dir="")


def test_report_names_a_row_wise_key_value_table_tiered() -> None:
    """Row-wise `key_value` shards run tiered although the cost model prices them as fused:
    the report's kernel column says so instead of `key_value->fused`."""
    constraints = {
        "big": ParameterConstraints(sharding_types=["row_wise"], compute_kernels=["key_value"])
    }
    topo = Topology(world_size=2, compute_device="cpu", ddr_cap=64 * GiB, ssd_cap=100 * GiB)
    planner = EmbeddingShardingPlanner(topo, batch_size=512, constraints=constraints)
    report = planner.plan(BIG, SHARDERS).report()
    big = next(x for x in report.splitlines() if x.startswith("big "))
    assert "key_value (tiered)" in big and "->fused" not in big
