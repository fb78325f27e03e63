"""validate_compute_kernels lists every kernel choice inconsistent with its shards; TorchRec-only
kernels are named, allowed in constraints, never chosen, and refused in a plan."""

from __future__ import annotations

import pytest
import torch
from _planner_models import hand_option, make_ebc, sharder

from shardrec_planner import (
    CacheParams,
    EmbeddingComputeKernel,
    EmbeddingShardingPlanner,
    ParameterConstraints,
    ParameterSharding,
    PlannerError,
    PlannerErrorType,
    Shard,
    ShardingOption,
    Storage,
    Topology,
)
from shardrec_planner.kernel_validation import validate_compute_kernels


def _opt(
    kernel: str,
    st: str = "table_wise",
    load: float | None = None,
    storage: Storage | None = None,
) -> ShardingOption:
    shards = [Shard(size=[10, 4], offset=[0, 0], storage=storage or Storage(hbm=1, ddr=1))]
    cache = None if load is None else CacheParams(load_factor=load)
    module = ("ebc", torch.nn.Module())
    return hand_option(
        "t", st, shards, (10, 4), module=module, compute_kernel=kernel, cache_params=cache
    )


@pytest.mark.parametrize(
    "option",
    [
        _opt("fused"),
        _opt("dense", "data_parallel"),
        _opt("fused_uvm_caching", load=0.5),
        _opt("fused_uvm_caching"),  # load factor left to the sharder's fused params
        _opt("key_value"),
        _opt("quant_uvm_caching", load=0.2),
    ],
)
def test_consistent_choices_pass(option: ShardingOption) -> None:
    validate_compute_kernels([option])


@pytest.mark.parametrize(
    ("options", "needles"),
    [
        ([_opt("nope")], ["1 violation(s)", "unknown compute kernel 'nope'"]),
        ([_opt("dense", "row_wise")], ["DENSE kernel requires DATA_PARALLEL", "'row_wise'"]),
        ([_opt("fused_uvm_caching", load=1.0)], ["cache_load_factor in (0, 1), got 1.0"]),
        ([_opt("fused_uvm_caching", load=0.0)], ["cache_load_factor in (0, 1), got 0.0"]),
        (
            [_opt("fused_uvm_caching", storage=Storage(hbm=-1, ddr=-2))],
            ["2 violation(s)", "negative HBM", "negative DDR"],
        ),
        ([_opt("dense"), _opt("bad")], ["2 violation(s)"]),
    ],
)
def test_every_violation_is_listed(options: list[ShardingOption], needles: list[str]) -> None:
    with pytest.raises(PlannerError) as info:
        validate_compute_kernels(options)
    assert info.value.error_type is PlannerErrorType.INVALID_COMPUTE_KERNEL
    for needle in needles:
        assert needle in str(info.value)


@pytest.mark.parametrize("kernel", ["ssd_virtual_table", "quant_uvm", "customized_kernel"])
def test_torchrec_only_kernels_are_refused_where_a_plan_would_run_them(kernel: str) -> None:
    assert EmbeddingComputeKernel(kernel).value == kernel
    with pytest.raises(ValueError, match=rf"'{kernel}' is a TorchRec kernel.*use 'fused'"):
        ParameterSharding(sharding_type="data_parallel", compute_kernel=kernel, ranks=(0,))
    # A constraint may list it (TorchRec configurations do); the search never picks it.
    both = {"t": ParameterConstraints(compute_kernels=["fused", kernel])}
    topo = Topology(world_size=2, compute_device="cuda")
    plan = EmbeddingShardingPlanner(topo, 8, both).plan(make_ebc([("t", 100, 8)]), [sharder()])
    assert plan.plan[""]["t"].compute_kernel is EmbeddingComputeKernel.FUSED
    only = {"t": ParameterConstraints(compute_kernels=[kernel])}
    with pytest.raises(PlannerError, match="'t'"):
        EmbeddingShardingPlanner(topo, 8, only).plan(make_ebc([("t", 100, 8)]), [sharder()])
