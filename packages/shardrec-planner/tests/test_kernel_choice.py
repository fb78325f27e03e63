"""TorchRec's UVM / key-value kernels and cache options: offered as TorchRec's sharders offer them,
planned on cpu as the fused kernel they run as, carried in the plan (and its JSON), and each one
either used (the load factor in cuda estimates) or named in the plan report."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from _planner_models import make_ebc, sharder, table_info

from shardrec_embedding import DataType
from shardrec_planner import (
    CacheAlgorithm,
    CacheParams,
    EmbeddingComputeKernel,
    EmbeddingShardingPlanner,
    KeyValueParams,
    ParameterConstraints,
    ParameterSharding,
    ShardingPlan,
    Topology,
    column_wise,
    construct_module_sharding_plan,
    executed_kernel,
    kernel_notes,
    sharded_kernels,
    table_column_wise,
    table_row_wise,
)
from shardrec_planner.cache_params import BoundsCheckMode, MultiPassPrefetchConfig
from shardrec_planner.enums import VIRTUAL_TIER_SHARDING_TYPES
from shardrec_planner.estimator import Workload, estimate_shards, kernel_bandwidth
from shardrec_planner.geometry import shard_arrays

CPU = Topology(world_size=2, compute_device="cpu", ddr_cap=10**9)
CUDA = Topology(world_size=2, compute_device="cuda", hbm_cap=10**9)
MAPPED = ["fused_uvm", "fused_uvm_caching", "key_value"]


def test_sharder_kernels_are_torchrecs() -> None:
    # TorchRec's embedding sharders: dense for data_parallel; fused, plus the UVM and key-value
    # kernels on cuda, for every other type.
    # On cuda also the virtual-table kernels, on the sharding types that run them.
    virtual = ["ssd_virtual_table", "dram_virtual_table"]
    for st in ("table_wise", "row_wise", "column_wise", "table_column_wise"):
        assert sharded_kernels(st, "cpu") == ["fused"]
        assert sharded_kernels(st, "cuda") == ["fused", *MAPPED, *virtual]
    for st in ("table_row_wise", "grid_shard"):
        assert sharded_kernels(st, "cpu") == ["fused"]
        assert sharded_kernels(st, "cuda") == ["fused", *MAPPED]
    for device in ("cpu", "cuda"):
        assert sharded_kernels("data_parallel", device) == ["dense"]
    with pytest.raises(ValueError, match="'diagonal'"):
        sharded_kernels("diagonal", "cpu")


def test_uvm_and_key_value_run_as_fused() -> None:
    for k in MAPPED:
        assert executed_kernel(k) is EmbeddingComputeKernel.FUSED
    for k in ("fused", "dense"):
        assert executed_kernel(k) is EmbeddingComputeKernel(k)
    ps = ParameterSharding(sharding_type="data_parallel", compute_kernel="key_value", ranks=(0,))
    assert ps.compute_kernel is EmbeddingComputeKernel.KEY_VALUE


def _plan(kernel: str | None, topo: Topology = CPU, **options: object) -> ShardingPlan:
    cons = {
        "t": ParameterConstraints(
            sharding_types=["row_wise"],
            compute_kernels=None if kernel is None else [kernel],
            **options,  # type: ignore[arg-type]
        )
    }
    ebc = make_ebc([("t", 1000, 16), ("u", 50, 8)])
    return EmbeddingShardingPlanner(topo, 64, cons).plan(ebc, [sharder()])


@pytest.mark.parametrize("kernel", MAPPED)
def test_cpu_plans_the_asked_kernel_with_the_fused_estimates(kernel: str) -> None:
    fused = _plan("fused")
    asked = _plan(kernel, cache_params=CacheParams(load_factor=0.25))
    ps = asked.plan[""]["t"]
    assert ps.compute_kernel.value == kernel
    assert ps.cache_params == CacheParams(load_factor=0.25)
    assert ps.ranks == fused.plan[""]["t"].ranks
    assert asked.stats is not None and fused.stats is not None
    got = {t.table: (t.memory_bytes, t.cost_s) for t in asked.stats.tables}
    want = {t.table: (t.memory_bytes, t.cost_s) for t in fused.stats.tables}
    tier = next(t.tier for t in asked.stats.tables if t.table == "t")
    if kernel == "key_value":  # a row_wise key_value table is priced on the disk tier
        assert tier is not None and tier.load_factor == 0.25 and len(tier.shards) == 2
        assert got["u"] == want["u"] and got["t"] != want["t"]
    else:
        assert tier is None
        assert got == want  # a row_wise table: estimated as the fused kernel
    report = asked.report()
    if kernel == "key_value":  # a row_wise key_value table runs tiered on every rank
        assert "key_value (tiered)" in report and "key_value->fused" not in report
        assert "t: kernel key_value runs tiered: rows and optimizer state in" in report
    else:
        assert f"{kernel}->fused" in report
        assert f"t: kernel {kernel} runs as fused" in report
    assert "->" not in fused.report()


def test_unconstrained_cpu_plans_only_fused() -> None:
    plan = _plan(None)
    assert {ps.compute_kernel for ps in plan.plan[""].values()} == {EmbeddingComputeKernel.FUSED}


def test_cuda_estimate_uses_the_tables_load_factor() -> None:
    # Our cost model by hand: the caching kernel keeps `ratio` of weights + state on the device
    # and reads rows at (ratio * lookup_bw + (1 - ratio) * hbm_to_ddr_bw) / 10.
    table = table_info(100, 8)
    shards = shard_arrays("table_wise", 100, 8, world_size=2, local_world_size=2)
    work = Workload(ids_local=10.0, bags_local=5.0, weighted=False)
    kernel = EmbeddingComputeKernel.FUSED_UVM_CACHING
    for ratio in (0.1, 0.5):
        est = estimate_shards(table, work, "table_wise", kernel, shards, CUDA, (0.0, 0.0), ratio)
        bw = (ratio * CUDA.lookup_bandwidth + (1 - ratio) * CUDA.hbm_to_ddr_bw) / 10
        assert kernel_bandwidth(kernel, CUDA, ratio) == pytest.approx(bw)
        ids, bags = 10.0 * 2, 5.0 * 2
        io = ids * 8 + bags * 4 + bags * 8 * 4
        assert est.memory_bytes[0] == math.ceil(100 * 8 * 4 * ratio + io)
        assert est.host_memory_bytes[0] == 100 * 8 * 4
        fwd = (ids * 8 * 4 + bags * 8 * 4) / bw
        assert est.compute_s[0] == pytest.approx(3 * fwd)
    default = estimate_shards(table, work, "table_wise", kernel, shards, CUDA, (0.0, 0.0))
    explicit = estimate_shards(
        table, work, "table_wise", kernel, shards, CUDA, (0.0, 0.0), CUDA.uvm_cache_ratio
    )
    assert np.array_equal(default.memory_bytes, explicit.memory_bytes)


def test_cuda_plan_reads_the_load_factor() -> None:
    small = _plan("fused_uvm_caching", CUDA, cache_params=CacheParams(load_factor=0.05))
    large = _plan("fused_uvm_caching", CUDA, cache_params=CacheParams(load_factor=0.9))
    mem = [
        next(t.memory_bytes for t in p.stats.tables if t.table == "t")  # type: ignore[union-attr]
        for p in (small, large)
    ]
    assert mem[0] < mem[1]
    assert "load_factor=0.05 sized the cache in the estimates" in small.report()


def test_every_option_is_reported() -> None:
    ps = ParameterSharding(
        sharding_type="data_parallel",
        compute_kernel="dense",
        ranks=(0, 1),
        cache_params=CacheParams(
            load_factor=0.3, algorithm=CacheAlgorithm.LFU, prefetch_pipeline=True
        ),
        enforce_hbm=True,
        stochastic_rounding=True,
        bounds_check_mode=BoundsCheckMode.WARNING,
        key_value_params=KeyValueParams(ssd_storage_directory="/tmp/x"),
    )
    notes = kernel_notes(ps, "cpu")
    assert notes == [
        "cache_params.load_factor=0.3 unused (the kernel has no cache)",
        "cache_params algorithm=LFU, prefetch_pipeline=True not applied (no device cache)",
        "enforce_hbm=True not applied (no UVM placement)",
        "key_value_params not applied (no key-value store)",
        "bounds_check_mode=WARNING: lookups raise on an out-of-range id (FATAL) instead",
        "stochastic_rounding=True not applied (updates round to nearest)",
    ]
    fatal = ParameterSharding(
        sharding_type="data_parallel",
        compute_kernel="dense",
        ranks=(0,),
        bounds_check_mode=BoundsCheckMode.FATAL,
        stochastic_rounding=False,
    )
    assert kernel_notes(fatal) == []


def test_options_reach_the_plan_and_survive_json() -> None:
    plan = _plan(
        "fused_uvm_caching",
        cache_params=CacheParams(load_factor=0.25, algorithm=CacheAlgorithm.LRU),
        bounds_check_mode=BoundsCheckMode.IGNORE,
        stochastic_rounding=True,
        enforce_hbm=False,
        key_value_params=KeyValueParams(ps_hosts=(("h", 1),)),
    )
    back = ShardingPlan.from_json(plan.to_json())
    assert back == plan
    ps = back.plan[""]["t"]
    assert ps.cache_params == CacheParams(load_factor=0.25, algorithm=CacheAlgorithm.LRU)
    assert ps.bounds_check_mode is BoundsCheckMode.IGNORE
    assert ps.stochastic_rounding is True and ps.enforce_hbm is False
    assert ps.key_value_params == KeyValueParams(ps_hosts=(("h", 1),))
    assert back.plan[""]["u"].cache_params is None


def test_bad_options_are_refused() -> None:
    with pytest.raises(TypeError, match="bounds_check_mode must be a BoundsCheckMode"):
        ParameterSharding(
            sharding_type="data_parallel", compute_kernel="dense", ranks=(0,), bounds_check_mode=2
        )
    with pytest.raises(ValueError, match="ssd_virtual_table"):
        ParameterSharding(
            sharding_type="data_parallel", compute_kernel="ssd_virtual_table", ranks=(0,)
        )
    odd = ParameterSharding(
        sharding_type="data_parallel",
        compute_kernel="dense",
        ranks=(0,),
        cache_params=CacheParams(load_factor=0.1, precision="fp16"),
    )
    with pytest.raises(ValueError, match=r"precision 'fp16' cannot be saved.*DataType"):
        odd.to_dict()


def test_cache_params_json_keeps_all_but_the_statistics() -> None:
    full = CacheParams(
        algorithm=CacheAlgorithm.LFU,
        load_factor=0.3,
        reserved_memory=1.5,
        precision=DataType.FP16,
        prefetch_pipeline=True,
        stats=object(),  # a planning input: not part of the saved plan
        multipass_prefetch_config=MultiPassPrefetchConfig(num_passes=3),
    )
    ps = ParameterSharding(
        sharding_type="data_parallel", compute_kernel="dense", ranks=(0,), cache_params=full
    )
    back = ParameterSharding.from_dict(ps.to_dict())
    assert back.cache_params == dataclasses.replace(full, stats=None)


@pytest.mark.parametrize("kernel", ["ssd_virtual_table", "dram_virtual_table"])
def test_virtual_kernels_by_sharding_type(kernel: str) -> None:
    """The raw-id tier kernels run table_wise, row_wise, column_wise and table_column_wise
    (one tier per rank's column blocks, shardrec_sharding/virtual_columns.py); a hand-written
    plan of another type is refused naming the four."""
    assert {t.value for t in VIRTUAL_TIER_SHARDING_TYPES} == {
        "table_wise",
        "row_wise",
        "column_wise",
        "table_column_wise",
    }
    ebc = make_ebc([("t", 64, 8)])
    for split in (column_wise, table_column_wise):
        plan = construct_module_sharding_plan(
            ebc, {"t": split(ranks=[0, 1], compute_kernel=kernel)}, world_size=2
        )
        assert plan["t"].compute_kernel.value == kernel
        assert "runs the raw-id tier" in kernel_notes(plan["t"])[0]
    with pytest.raises(ValueError, match=r"placed table_wise, row_wise, column_wise or table_col"):
        construct_module_sharding_plan(
            ebc, {"t": table_row_wise(0, compute_kernel=kernel)}, world_size=2
        )
