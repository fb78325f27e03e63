"""The planner plans TorchRec's virtual tables (`use_virtual_table=True`) as TorchRec 1.8 does:
the sharders offer `ssd_virtual_table` / `dram_virtual_table` on cuda for the sharding types the
raw-id tier runs, the search lists them only where a constraint names them, the plan names them,
and the stats report their storage per kernel (TorchRec's test_planners
`test_planner_with_virtual_table`, by our names)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from shardrec_embedding import (
    DynamicTableConfig,
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
)
from shardrec_planner import (
    EmbeddingShardingPlanner,
    ParameterConstraints,
    PlannerError,
    Topology,
)
from shardrec_planner.cache_params import KeyValueParams
from shardrec_planner.embedding_stats import EmbeddingStats
from shardrec_planner.kernel_choice import runs_virtual_tiered
from shardrec_planner.offload_scaleup import EmbeddingOffloadScaleupProposer
from shardrec_sharding import EmbeddingBagCollectionSharder, EmbeddingCollectionSharder

BUCKETS = 3_991_680  # TorchRec's count in its test
SPACE = BUCKETS * 2**20  # a virtual id space of whole buckets
VIRTUAL = ("dram_virtual_table", "ssd_virtual_table")
CUDA = Topology(world_size=2, hbm_cap=2 * 1024**3, ddr_cap=256 * 1024**3, compute_device="cuda")
CPU = Topology(world_size=2, ddr_cap=256 * 1024**3, compute_device="cpu")


class _Holder(nn.Module):
    def __init__(self, coll: nn.Module) -> None:
        super().__init__()
        self.coll = coll


def _model(pooled: bool, capacity: int | None = None, buckets: int = BUCKETS) -> _Holder:
    """Two virtual tables (of the whole id space, or of `capacity` slots) and a plain one."""
    cls: Any = EmbeddingBagConfig if pooled else EmbeddingConfig
    dynamic = None if capacity is None else DynamicTableConfig(capacity=capacity)
    virtual = [
        cls(name=f"v{i}", num_embeddings=SPACE, embedding_dim=16, feature_names=[f"fv{i}"],
            use_virtual_table=True, total_num_buckets=buckets, dynamic=dynamic)
        for i in range(2)
    ]  # fmt: skip
    plain = [cls(name="p", num_embeddings=1000, embedding_dim=16, feature_names=["fp"])]
    coll_cls: Any = EmbeddingBagCollection if pooled else EmbeddingCollection
    return _Holder(coll_cls(tables=virtual + plain, device=torch.device("meta")))


def _sharder(pooled: bool) -> Any:
    return EmbeddingBagCollectionSharder() if pooled else EmbeddingCollectionSharder()


def _constraints(
    kernel: str, sharding_type: str = "row_wise", both: bool = False
) -> dict[str, ParameterConstraints]:
    """v0 (and v1 where `both`) asks for `kernel`; v1 otherwise only for `sharding_type`."""
    kernels = [kernel]
    return {
        "v0": ParameterConstraints(sharding_types=[sharding_type], compute_kernels=kernels),
        "v1": ParameterConstraints(
            sharding_types=[sharding_type], compute_kernels=kernels if both else None
        ),
    }


def _check_kernels(plan: Any, kernel: str, both: bool = False) -> None:
    entries = plan.plan["coll"]
    assert entries["v0"].compute_kernel.value == kernel
    assert (entries["v1"].compute_kernel.value == kernel) is both
    # Guarded as in TorchRec: without a constraint naming it, the search never picks it.
    assert entries["p"].compute_kernel.value not in VIRTUAL


@pytest.mark.parametrize("pooled", [True, False])
@pytest.mark.parametrize("kernel", VIRTUAL)
def test_torchrec_loop_plans_virtual_kernel(pooled: bool, kernel: str) -> None:
    # TorchRec's loop (its offload proposer), TorchRec's scale: no capacity, the whole id space.
    planner = EmbeddingShardingPlanner(
        topology=CUDA,
        proposer=EmbeddingOffloadScaleupProposer(),
        constraints=_constraints(kernel, both=True),
    )
    plan = planner.plan(_model(pooled), [_sharder(pooled)])
    _check_kernels(plan, kernel, both=True)
    # Row-wise by whole buckets: half of the buckets, and of the id space, on each rank.
    spec = plan.plan["coll"]["v0"].sharding_spec
    assert spec is not None
    half = SPACE // 2
    assert [s.shard_offsets for s in spec.shards] == [[0, 0], [half, 0]]
    assert [s.shard_sizes for s in spec.shards] == [[half, 16], [half, 16]]
    # The stats name each kernel with its summed storage, as TorchRec's do.
    stats = planner._stats[0]
    assert isinstance(stats, EmbeddingStats)
    lines = stats._stats_table
    title = "Compute Kernels Total Estimated Memory (weights + optimizer + IO + pipeline):"
    assert any(title in line for line in lines)
    assert any(f"   {kernel}: HBM: " in line and " SSD: " in line for line in lines)
    assert any("Max HBM: " in line and "on ranks [0, 1]" in line for line in lines)


@pytest.mark.parametrize("pooled", [True, False])
def test_default_search_plans_virtual_kernel(pooled: bool) -> None:
    # Our own search, on a table with a capacity (the slots it runs with).
    for kernel in VIRTUAL:
        planner = EmbeddingShardingPlanner(topology=CUDA, constraints=_constraints(kernel))
        plan = planner.plan(_model(pooled, capacity=4096, buckets=8), [_sharder(pooled)])
        _check_kernels(plan, kernel)
        spec = plan.plan["coll"]["v0"].sharding_spec
        assert spec is not None
        assert [s.shard_sizes for s in spec.shards] == [[2048, 16]] * 2
        # ... and the sharded modules run it on the raw-id tier.
        assert runs_virtual_tiered(plan.plan["coll"]["v0"])


@pytest.mark.parametrize("kernel", VIRTUAL)
def test_l1_cache_bounds_the_device_storage(kernel: str) -> None:
    # TorchRec's rule: a key-value / virtual shard holds on the device the smaller of
    # max_l1_cache_size MB and the table's rows at the cache load factor; nothing in DDR.
    constraints = {
        f"v{i}": ParameterConstraints(
            sharding_types=["row_wise"],
            compute_kernels=[kernel],
            key_value_params=KeyValueParams(max_l1_cache_size=128),
        )
        for i in range(2)
    }
    planner = EmbeddingShardingPlanner(
        topology=CUDA, proposer=EmbeddingOffloadScaleupProposer(), constraints=constraints
    )
    planner.plan(_model(pooled=False), [_sharder(False)])
    stats = planner._stats[0]
    assert isinstance(stats, EmbeddingStats)
    line = next(x for x in stats._stats_table if f"   {kernel}: HBM: " in x)
    hbm = float(line.split("HBM: ")[1].split(" GB")[0])
    ddr = float(line.split("DDR: ")[1].split(" GB")[0])
    assert 0.5 <= hbm < 0.51  # 2 tables x 2 shards x 128 MB, plus the ids in flight
    assert ddr == 0.0


@pytest.mark.parametrize("pooled", [True, False])
def test_virtual_kernel_offered_only_where_it_runs(pooled: bool) -> None:
    sharder = _sharder(pooled)
    for st in ("table_wise", "row_wise", "column_wise", "table_column_wise"):
        assert set(VIRTUAL) <= set(sharder.compute_kernels(st, "cuda"))
        assert not set(VIRTUAL) & set(sharder.compute_kernels(st, "cpu"))
    for st in ("table_row_wise", "grid_shard", "data_parallel"):
        assert not set(VIRTUAL) & set(sharder.compute_kernels(st, "cuda"))
    # On cpu (TorchRec offers them on cuda only) or on a type that does not run them, a
    # constraint asking for a virtual kernel is refused naming the table.
    planner = EmbeddingShardingPlanner(topology=CPU, constraints=_constraints("dram_virtual_table"))
    with pytest.raises((ValueError, PlannerError), match="'v0'"):
        planner.plan(_model(pooled), [sharder])
    for proposer in (None, EmbeddingOffloadScaleupProposer()):
        planner = EmbeddingShardingPlanner(
            topology=CUDA,
            proposer=proposer,
            constraints=_constraints("dram_virtual_table", "table_row_wise"),
        )
        with pytest.raises((ValueError, PlannerError), match="'v0'"):
            planner.plan(_model(pooled), [sharder])
