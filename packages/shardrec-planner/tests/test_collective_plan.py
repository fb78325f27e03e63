"""collective_plan on real gloo process groups: every rank gets rank 0's plan."""

from __future__ import annotations

import pathlib
import sys

import pytest

# The rank pool loads this file by path in fresh processes, without conftest.py: make the helper
# module next to it importable there too.
sys.path.insert(0, str(pathlib.Path(__file__).parent))

from _planner_models import make_ebc, sharder

from shardrec_planner import (
    EmbeddingShardingPlanner,
    ParameterConstraints,
    PlannerError,
    ShardingPlan,
    Topology,
)
from shardrec_testing import RankContext, shared_pool

SPEC = [(f"t{i}", 1000 * (i + 1) ** 3, [32, 64, 128, 256][i % 4]) for i in range(12)]


def _planner(
    world: int, constraints: dict[str, ParameterConstraints] | None = None
) -> EmbeddingShardingPlanner:
    topo = Topology(world_size=world, compute_device="cuda", local_world_size=min(world, 2))
    cons = constraints or {
        name: ParameterConstraints(pooling_factors=[float(i % 7 + 1)])
        for i, (name, _, _) in enumerate(SPEC)
    }
    return EmbeddingShardingPlanner(topo, 128, cons)


def _collective_job(ctx: RankContext) -> str:
    plan = _planner(ctx.world_size).collective_plan(make_ebc(SPEC), [sharder()], ctx.pg)
    return plan.to_json()


def _failing_job(ctx: RankContext) -> str:
    cons = {"t0": ParameterConstraints(sharding_types=["row_wise"])}
    planner = _planner(ctx.world_size, cons)
    try:
        planner.collective_plan(make_ebc(SPEC), [sharder(sharding_types=["table_wise"])], ctx.pg)
    except PlannerError as err:
        return str(err)
    return "no error"


@pytest.mark.parametrize("world", [2, 4])
def test_every_rank_gets_the_same_plan(world: int) -> None:
    texts = shared_pool(world).run(_collective_job)
    assert len(texts) == world
    assert all(t == texts[0] for t in texts)
    received = ShardingPlan.from_json(texts[0])
    local = _planner(world).plan(make_ebc(SPEC), [sharder()])
    assert received.plan == local.plan  # stats differ only in the measured search time


def test_rank_zero_error_is_raised_everywhere() -> None:
    messages = shared_pool(2).run(_failing_job)
    assert all("table 't0'" in m and "sharding_types=['row_wise']" in m for m in messages)
