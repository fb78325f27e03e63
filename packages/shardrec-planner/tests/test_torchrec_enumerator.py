"""TorchRec's enumerator and shard estimators, against TorchRec's documented formulas by hand.

One table of 50 rows x 16 float32 columns (3200 bytes), batch 10, pooling factor 2, on 4 ranks
of 2 per host. Row-wise blocks are ceil(50 / 4) = 13 rows: 13, 13, 13, 11.

Storage of a shard = its part of the table ceil(3200 * rows * cols / 800), plus on the device
its inputs (ids at 8 bytes) and outputs (float32) for one batch:
  row_wise  in ceil(2 * 10 / 4 * 4 * 8) = 160, out ceil(10 * 4 * 16 * 4) = 2560
  dp        in ceil(2 * 10 * 8) = 160,         out ceil(10 * 16 * 4) = 640
"""

from __future__ import annotations

import math

import pytest
import torch
from _planner_models import make_ebc, sharder

from shardrec_planner import ParameterConstraints, Storage, Topology
from shardrec_planner.constants import (
    BWD_COMPUTE_MULTIPLIER,
    CROSS_NODE_BANDWIDTH,
    HBM_MEM_BW,
    QUARTER_BLOCK_PENALTY,
)
from shardrec_planner.enumerators import EmbeddingEnumerator, get_partition_by_type
from shardrec_planner.shard_storage import (
    PipelineType,
    calculate_pipeline_io_cost,
    calculate_shard_storages,
)

TOPO = Topology(world_size=4, compute_device="cuda", local_world_size=2)
CONS = {"t": ParameterConstraints(pooling_factors=[2.0])}


def _enumerate(
    types: list[str],
    kernels: list[str],
    topo: Topology = TOPO,
    constraints: dict[str, ParameterConstraints] | None = None,
) -> list:  # type: ignore[type-arg]
    model = make_ebc([("t", 50, 16)])
    enum = EmbeddingEnumerator(
        topology=topo, batch_size=10, constraints=CONS if constraints is None else constraints
    )
    return enum.enumerate(model, [sharder(sharding_types=types, compute_kernels=kernels)])


def test_row_wise_storage_by_hand() -> None:
    (option,) = _enumerate(["row_wise"], ["fused"])
    assert [s.size for s in option.shards] == [[13, 16]] * 3 + [[11, 16]]
    assert [s.offset for s in option.shards] == [[0, 0], [13, 0], [26, 0], [39, 0]]
    block = [math.ceil(3200 * r * 16 / 800) for r in (13, 13, 13, 11)]
    assert [s.storage for s in option.shards] == [Storage(hbm=b + 160 + 2560, ddr=0) for b in block]
    assert option.partition_by == "uniform"


def test_cpu_counts_everything_in_ddr() -> None:
    cpu = Topology(world_size=4, compute_device="cpu", local_world_size=2)
    (option,) = _enumerate(["row_wise"], ["fused"], topo=cpu)
    assert option.shards[0].storage == Storage(hbm=0, ddr=832 + 160 + 2560)


def test_data_parallel_storage_by_hand() -> None:
    (option,) = _enumerate(["data_parallel"], ["dense"])
    assert len(option.shards) == 4
    assert all(s.storage == Storage(hbm=3200 + 160 + 640, ddr=0) for s in option.shards)


def test_uvm_caching_keeps_the_table_in_ddr_and_the_cache_in_hbm() -> None:
    cons = {"t": ParameterConstraints(pooling_factors=[2.0])}
    (option,) = _enumerate(["row_wise"], ["fused_uvm_caching"], constraints=cons)
    # default load factor 0.2: the HBM cache holds round(3200 * 0.2) = 640 bytes of the table;
    # the cache bookkeeping costs ceil(rows * (4 + 0.2 * 16)) bytes.
    cache = math.ceil(640 * 208 / 800)
    aux = math.ceil(13 * (4 + 0.2 * 16))
    assert option.shards[0].storage == Storage(hbm=cache + aux + 160 + 2560, ddr=832)


def test_optimizer_state_scales_the_block() -> None:
    tensor = torch.empty(50, 16)
    tensor._optimizer_classes = [torch.optim.Adam]  # type: ignore[attr-defined]
    kwargs = dict(
        sharder=None,
        sharding_type="table_wise",
        tensor=tensor,
        compute_device="cuda",
        compute_kernel="fused",
        shard_sizes=[[50, 16]],
        batch_sizes=[10],
        world_size=4,
        local_world_size=2,
        input_lengths=[2.0],
        num_poolings=[1.0],
        caching_ratio=0.2,
        is_pooled=True,
        input_data_type_size=8,
        output_data_type_size=4,
    )
    (adam,) = calculate_shard_storages(**kwargs)  # type: ignore[arg-type]
    # table-wise: in ceil(20 * 4 * 8) = 640, out 10 * 4 * 16 * 4 = 2560; Adam keeps 2x the table
    assert adam == Storage(hbm=3200 * 3 + 640 + 2560, ddr=0)
    tensor._optimizer_classes = [torch.optim.SGD]  # type: ignore[attr-defined]
    (sgd,) = calculate_shard_storages(**kwargs)  # type: ignore[arg-type]
    assert sgd.hbm == 3200 + 640 + 2560


def test_pipeline_io_cost() -> None:
    sparse = PipelineType.TRAIN_SPARSE_DIST
    prefetch = PipelineType.TRAIN_PREFETCH_SPARSE_DIST
    assert calculate_pipeline_io_cost(100, 40, 0, PipelineType.NONE, None) == 140
    assert calculate_pipeline_io_cost(100, 40, 0, sparse, None) == 200
    assert calculate_pipeline_io_cost(100, 40, 0, sparse, None, True) == 240
    assert calculate_pipeline_io_cost(100, 40, 10, prefetch, 2) == 300 + 40
    assert calculate_pipeline_io_cost(100, 40, 10, sparse, None, is_inference=True) == 0


def test_table_wise_perf_by_hand() -> None:
    (option,) = _enumerate(["table_wise"], ["fused"])
    perf = option.shards[0].perf
    assert perf is not None
    # b = 20 ids, W = 4 > L = 2 (crosses hosts); dim 16 < 64: quarter-block penalty; the lookup
    # reads at least 32 columns.
    inp, lookup, out = math.ceil(20 * 4 * 8), 20 * 4 * 32 * 4, 10 * 4 * 16 * 4
    fwd = (inp + lookup + out) * QUARTER_BLOCK_PENALTY / HBM_MEM_BW
    assert perf.fwd_compute == pytest.approx(fwd)
    assert perf.fwd_comms == pytest.approx(out / CROSS_NODE_BANDWIDTH)
    assert perf.bwd_compute == pytest.approx(fwd * BWD_COMPUTE_MULTIPLIER)
    assert perf.bwd_comms == pytest.approx(out / CROSS_NODE_BANDWIDTH)


def test_filters_follow_torchrec() -> None:
    model = make_ebc([("t", 50, 16)])
    enum = EmbeddingEnumerator(topology=TOPO, batch_size=10)
    options = enum.enumerate(model, [sharder(compute_kernels=["fused", "dense"])])
    types = {o.sharding_type for o in options}
    assert "grid_shard" not in types  # only when a constraint names it
    assert {o.compute_kernel for o in options if o.sharding_type != "data_parallel"} == {"fused"}
    assert {o.compute_kernel for o in options if o.sharding_type == "data_parallel"} == {"dense"}
    constrained = EmbeddingEnumerator(
        topology=TOPO,
        batch_size=10,
        constraints={"t": ParameterConstraints(sharding_types=["grid_shard", "column_wise"])},
    )
    found = constrained.enumerate(model, [sharder(compute_kernels=["fused"])])
    assert {o.sharding_type for o in found} == {"grid_shard", "column_wise"}


def test_repeat_call_returns_a_copy() -> None:
    model = make_ebc([("t", 50, 16)])
    enum = EmbeddingEnumerator(topology=TOPO, batch_size=10)
    shard = sharder(sharding_types=["table_wise"], compute_kernels=["fused"])
    first = enum.enumerate(model, [shard])
    first[0].shards[0].rank = 3
    again = enum.enumerate(model, [shard])
    assert again[0].shards[0].rank is None
    assert again[0].tensor is first[0].tensor


def test_no_option_left_names_the_table() -> None:
    cons = {"t": ParameterConstraints(sharding_types=["row_wise"])}
    with pytest.raises(ValueError, match="table 't'"):
        _enumerate(["table_wise"], ["fused"], constraints=cons)


def test_partition_by_type() -> None:
    assert get_partition_by_type("table_wise") == "device"
    assert get_partition_by_type("table_row_wise") == "host"
    assert get_partition_by_type("data_parallel") == "uniform"
    with pytest.raises(ValueError, match="'diagonal'"):
        get_partition_by_type("diagonal")
