"""TorchRec's partitioners on hand-made options (storage and perf set by hand).

Two hosts of two ranks, 100 bytes of HBM each. The greedy rules (partitioners.py docstring)
give the placements worked out in each test.
"""

from __future__ import annotations

import pytest
from _planner_models import hand_option, hand_shard

from shardrec_planner import PlannerError, ShardingOption, Topology
from shardrec_planner.enumerators import get_partition_by_type
from shardrec_planner.partitioners import GreedyPerfPartitioner, MemoryBalancedPartitioner

TOPO = Topology(world_size=4, local_world_size=2, compute_device="cuda", hbm_cap=100)


def _option(name: str, sharding_type: str, shards: list[tuple[int, float]]) -> ShardingOption:
    return hand_option(
        name,
        sharding_type,
        [hand_shard([8, 8], hbm, perf) for hbm, perf in shards],
        (8, 8),
        partition_by=get_partition_by_type(sharding_type),
        is_pooled=True,
    )


def test_greedy_places_uniform_then_device_by_load() -> None:
    rw = _option("rw", "row_wise", [(10, 1.0), (10, 2.0), (10, 3.0), (10, 4.0)])
    big = _option("big", "table_wise", [(60, 5.0)])
    small = _option("small", "table_wise", [(20, 1.0)])
    partitioner = GreedyPerfPartitioner()
    partitioner.partition([small, rw, big], TOPO)
    # row-wise shard i on rank i: ranks carry perf 1, 2, 3, 4. The larger table goes first, to
    # the least loaded rank (0, now 6); then the smaller to rank 1 (2 < 3 < 4 < 6).
    assert rw.get_shards_assignment() == [0, 1, 2, 3]
    assert big.get_shards_assignment() == [0]
    assert small.get_shards_assignment() == [1]
    placed = partitioner._topology
    assert placed is not None
    assert [d.storage.hbm for d in placed.devices] == [30, 70, 90, 90]
    assert [d.storage.hbm for d in TOPO.devices] == [100] * 4  # the input is not changed


def test_greedy_host_level_option_stays_on_one_host() -> None:
    twrw = _option("twrw", "table_row_wise", [(50, 1.0), (50, 1.0)])
    loaded = _option("tw", "table_wise", [(10, 9.0)])
    GreedyPerfPartitioner().partition([twrw, loaded], TOPO)
    # twrw goes first (larger), onto host 0 (both idle; first in order): ranks 0 and 1
    assert twrw.get_shards_assignment() == [0, 1]
    assert loaded.get_shards_assignment() == [2]


def test_greedy_refuses_a_shard_that_fits_nowhere() -> None:
    huge = _option("huge", "table_wise", [(101, 1.0)])
    with pytest.raises(PlannerError, match="'huge'"):
        GreedyPerfPartitioner().partition([huge], TOPO)


def test_memory_balanced_prefers_less_hbm_at_equal_perf() -> None:
    topo = Topology(world_size=2, local_world_size=2, compute_device="cuda", hbm_cap=1 << 30)
    a = _option("a", "table_wise", [(300 << 20, 1.0)])
    b = _option("b", "table_wise", [(300 << 20, 1.0)])
    plan = MemoryBalancedPartitioner().partition([a, b], topo)
    # perf ties, so a plan with one table per rank (~300 MiB each) keeps the greedy perf
    ranks = sorted(o.shards[0].rank for o in plan)
    assert ranks == [0, 1]
