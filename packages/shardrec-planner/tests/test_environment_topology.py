"""A planner without a topology builds TorchRec's from the environment; collective_plan's
defaults (the default process group; the registered default sharders)."""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from _planner_models import make_ebc, sharder

from shardrec_planner import EmbeddingShardingPlanner, ParameterConstraints
from shardrec_planner import default_sharders as defaults
from shardrec_planner.environment_topology import topology_from_environment
from shardrec_testing import RankContext, shared_pool

SPEC = [("t0", 1000, 16), ("t1", 50, 8), ("t2", 7000, 32)]


@pytest.mark.parametrize(
    ("environ", "world", "local", "pod"),
    [
        ({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}, 4, 2, None),
        # TorchRec's get_local_size: a local size that does not divide the world -> the world.
        ({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "3"}, 4, 4, None),
        ({"WORLD_SIZE": "6"}, 6, 6, None),
        ({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "2", "TOPOLOGY_DOMAIN_MULTIPLE": "2"}, 8, 2, 2),
    ],
)
def test_topology_from_environment(
    environ: dict[str, str], world: int, local: int, pod: int | None
) -> None:
    topo = topology_from_environment(environ=environ)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert (topo.world_size, topo.local_world_size, topo.compute_device, topo.pod_size) == (
        world,
        local,
        device,
        pod,
    )


def test_topology_from_environment_refusals() -> None:
    with pytest.raises(ValueError, match=r"the world size is unknown.*WORLD_SIZE is not set"):
        topology_from_environment(environ={})
    for bad in ("0", "two", "-1"):
        with pytest.raises(ValueError, match=f"WORLD_SIZE must be a positive integer, got '{bad}'"):
            topology_from_environment(environ={"WORLD_SIZE": bad})


def test_planner_without_topology_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    cons = {"t1": ParameterConstraints(sharding_types=["table_wise"])}
    planner = EmbeddingShardingPlanner(constraints=cons)
    assert planner.topology == topology_from_environment()
    assert planner.batch_size == 512  # TorchRec's BATCH_SIZE
    plan = planner.plan(make_ebc(SPEC), [sharder()])
    assert plan.plan[""]["t1"].sharding_type == "table_wise"


def _planned_with_defaults(ctx: RankContext) -> tuple[int, str, str]:
    defaults.set_default_sharders(lambda: [sharder()])
    cons = {"t1": ParameterConstraints(sharding_types=["table_wise"])}
    planner = EmbeddingShardingPlanner(constraints=cons)  # world size: the default group's
    implicit = planner.collective_plan(make_ebc(SPEC))
    explicit = planner.collective_plan(make_ebc(SPEC), [sharder()], ctx.pg)
    assert implicit.plan == explicit.plan
    return planner.topology.world_size, planner.topology.compute_device, str(implicit.plan.keys())


def test_collective_plan_defaults() -> None:
    got = shared_pool(2).run(_planned_with_defaults)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert got == [(2, device, "dict_keys([''])")] * 2


def test_collective_plan_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    planner = EmbeddingShardingPlanner(topology_from_environment(environ={"WORLD_SIZE": "2"}))
    monkeypatch.setattr(defaults, "_factory", None)
    with pytest.raises(ValueError, match="no default sharders are registered: pass sharders="):
        planner.collective_plan(make_ebc(SPEC))
    with pytest.raises(RuntimeError, match="collective_plan needs the default process group"):
        planner.collective_plan(make_ebc(SPEC), [sharder()])
