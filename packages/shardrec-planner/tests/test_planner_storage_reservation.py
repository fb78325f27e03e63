"""Our planner with a TorchRec storage reservation: the tables get what the reservation leaves."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import pytest
from _planner_models import make_ebc, sharder
from torch import nn

from shardrec_planner import (
    EmbeddingShardingPlanner,
    FixedAbsoluteStorageReservation,
    FixedPercentageStorageReservation,
    ParameterConstraints,
    PlannerError,
    PlannerErrorType,
    PlannerSharder,
    Topology,
)

GiB = 1024**3


class UnevenReservation:
    """A user's own reservation: rank r keeps back (r + 1) GiB; records how it was called."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def reserve(
        self,
        topology: Topology,
        batch_size: int,
        module: nn.Module,
        sharders: Sequence[PlannerSharder],
        constraints: Mapping[str, ParameterConstraints] | None = None,
    ) -> Topology:
        self.calls.append((batch_size, len(sharders)))
        out = copy.deepcopy(topology)
        for d in out.devices:
            d.storage.hbm -= (d.rank + 1) * GiB
            d.storage.ddr -= GiB
        return out


def _cap(planner: EmbeddingShardingPlanner) -> tuple[int, int]:
    plan = planner.plan(make_ebc([("t", 1000, 64)]), [sharder()])
    assert plan.stats is not None
    return plan.stats.ranks[0].memory_cap_bytes, len(plan.stats.ranks)


def test_user_reservation_is_asked_and_the_smallest_rank_bounds_all() -> None:
    topo = Topology(world_size=3, compute_device="cuda", hbm_cap=8 * GiB, ddr_cap=32 * GiB)
    res = UnevenReservation()
    planner = EmbeddingShardingPlanner(topo, 96, storage_reservation=res)
    cap, ranks = _cap(planner)
    assert res.calls == [(96, 1)] and ranks == 3
    assert cap == 8 * GiB - 3 * GiB  # rank 2 kept back the most
    assert planner.host_memory_cap == 31 * GiB


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_fixed_reservations_replace_the_default_fraction(device: str) -> None:
    topo = Topology(world_size=2, compute_device=device, hbm_cap=8 * GiB, ddr_cap=16 * GiB)
    default_cap, _ = _cap(EmbeddingShardingPlanner(topo, 64))
    mem = 8 * GiB if device == "cuda" else 16 * GiB
    assert default_cap == int(0.85 * mem)
    pct = EmbeddingShardingPlanner(
        topo, 64, storage_reservation=FixedPercentageStorageReservation(0.5)
    )
    # A percentage reservation holds back HBM only, as TorchRec's does: on cpu DDR is whole.
    assert _cap(pct)[0] == (4 * GiB if device == "cuda" else 16 * GiB)
    none = EmbeddingShardingPlanner(
        topo, 64, storage_reservation=FixedPercentageStorageReservation(0.0)
    )
    assert _cap(none)[0] == mem


def test_a_reservation_that_leaves_too_little_is_a_storage_error() -> None:
    topo = Topology(world_size=2, compute_device="cuda", hbm_cap=2 * GiB)
    ebc = make_ebc([("big", 3_000_000, 128)])  # 1.4 GiB of weights: fits 2 GiB, not 0.5 GiB
    EmbeddingShardingPlanner(
        topo, 64, storage_reservation=FixedPercentageStorageReservation(0.0)
    ).plan(ebc, [sharder(sharding_types=["table_wise"], compute_kernels=["fused"])])
    tight = EmbeddingShardingPlanner(
        topo, 64, storage_reservation=FixedAbsoluteStorageReservation.from_gb(1.5)
    )
    with pytest.raises(PlannerError, match="FixedAbsoluteStorageReservation") as info:
        tight.plan(ebc, [sharder(sharding_types=["table_wise"], compute_kernels=["fused"])])
    assert info.value.error_type is PlannerErrorType.INSUFFICIENT_STORAGE
    nothing = EmbeddingShardingPlanner(
        topo, 64, storage_reservation=FixedAbsoluteStorageReservation.from_gb(3)
    )
    with pytest.raises(PlannerError, match=r"\(3 GB per device of HBM\) left 0 bytes per rank"):
        nothing.plan(ebc, [sharder()])


def test_error_type_says_whether_the_cluster_or_the_constraints_are_short() -> None:
    topo = Topology(world_size=2, compute_device="cuda", hbm_cap=2 * GiB)
    one_big = make_ebc([("big", 3_000_000, 128)])  # 1.4 GiB: fits the cluster, not one rank
    tw_only = [sharder(sharding_types=["table_wise"], compute_kernels=["fused"])]
    res = FixedPercentageStorageReservation(0.5)
    with pytest.raises(PlannerError, match=r"50% of HBM per device") as info:
        EmbeddingShardingPlanner(topo, 64, storage_reservation=res).plan(one_big, tw_only)
    assert info.value.error_type is PlannerErrorType.STRICT_CONSTRAINTS
    four_big = make_ebc([(f"b{i}", 3_000_000, 128) for i in range(4)])  # 5.7 GiB > 2 x 1 GiB
    with pytest.raises(PlannerError) as info:
        EmbeddingShardingPlanner(topo, 64, storage_reservation=res).plan(four_big, tw_only)
    assert info.value.error_type is PlannerErrorType.INSUFFICIENT_STORAGE


def test_bad_reservations_and_timeout_alias() -> None:
    topo = Topology(world_size=1, compute_device="cpu")
    with pytest.raises(TypeError, match="reserve"):
        EmbeddingShardingPlanner(topo, storage_reservation=object())  # type: ignore[arg-type]

    class Wrong:
        def reserve(self, *args: object, **kwargs: object) -> object:
            return {"hbm": 1}

    planner = EmbeddingShardingPlanner(topo, storage_reservation=Wrong())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Wrong\.reserve returned dict, not a Topology"):
        planner.plan(make_ebc([("t", 10, 8)]), [sharder()])
    assert EmbeddingShardingPlanner(topo, timeout_seconds=2.5).time_budget_s == 2.5
