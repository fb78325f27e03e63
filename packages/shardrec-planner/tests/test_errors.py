"""Every user error names the offending table, value or constraint and what to change."""

from __future__ import annotations

import pytest
from _planner_models import make_ebc, sharder

from shardrec_planner import (
    EmbeddingShardingPlanner,
    ParameterConstraints,
    PlannerError,
    Topology,
)

GiB = 1024**3


def test_table_that_fits_nowhere() -> None:
    ebc = make_ebc([("big", 10_000_000, 256), ("ok", 100, 8)])
    topo = Topology(world_size=2, compute_device="cuda", hbm_cap=4 * GiB)
    cons = {"big": ParameterConstraints(sharding_types=["table_wise", "column_wise"])}
    with pytest.raises(PlannerError) as info:
        EmbeddingShardingPlanner(topo, 64, cons).plan(ebc, [sharder(compute_kernels=["fused"])])
    msg = str(info.value)
    assert "['big']" in msg and "'ok'" not in msg
    assert "10,000,000 x 256" in msg
    assert "3.4 GiB for tables" in msg  # 4 GiB minus the 15% reserve
    assert "needs 4.8 GiB on one rank" in msg  # one 128-column block
    assert "allow row_wise" in msg


def test_row_wise_table_that_needs_more_ranks() -> None:
    ebc = make_ebc([("big", 30_000_000, 64)])  # 7.2 GiB: 3.6 GiB per rank on 2 ranks
    topo = Topology(world_size=2, compute_device="cuda", hbm_cap=4 * GiB)
    with pytest.raises(PlannerError, match=r"'big'.*row_wise.*use at least 3 ranks"):
        EmbeddingShardingPlanner(topo, 64).plan(
            ebc, [sharder(sharding_types=["row_wise"], compute_kernels=["fused"])]
        )


def test_model_too_big_in_total() -> None:
    ebc = make_ebc([(f"t{i}", 4_000_000, 128) for i in range(6)])  # 1.9 GiB each
    topo = Topology(world_size=2, compute_device="cuda", hbm_cap=4 * GiB)
    with pytest.raises(PlannerError, match=r"cannot place .* table\(s\).*needs at least"):
        EmbeddingShardingPlanner(topo, 64, memory_reserve_fraction=0.0).plan(
            ebc, [sharder(sharding_types=["table_wise"], compute_kernels=["fused"])]
        )


def test_constraint_type_the_sharder_does_not_offer() -> None:
    ebc = make_ebc([("t3", 100, 8)])
    cons = {"t3": ParameterConstraints(sharding_types=["row_wise"])}
    with pytest.raises(
        PlannerError, match=r"table 't3'.*sharding_types=\['row_wise'\].*\['table_wise'\]"
    ):
        EmbeddingShardingPlanner(Topology(world_size=2), 8, cons).plan(
            ebc, [sharder(sharding_types=["table_wise"])]
        )


def test_constraint_kernel_the_sharder_does_not_offer() -> None:
    ebc = make_ebc([("t1", 100, 8)])
    cons = {"t1": ParameterConstraints(sharding_types=["table_wise"], compute_kernels=["dense"])}
    with pytest.raises(PlannerError, match=r"table 't1'.*compute_kernels=\['dense'\]"):
        EmbeddingShardingPlanner(Topology(world_size=2), 8, cons).plan(
            ebc, [sharder(compute_kernels=["fused"])]
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"sharding_types": ["row_wize", "table_wise"]},
            r"sharding_types names unknown \['row_wize'\]",
        ),
        ({"compute_kernels": ["slow"]}, r"compute_kernels names unknown \['slow'\]"),
    ],
)
def test_unknown_constraint_names_are_refused_by_the_planner(
    kwargs: dict[str, object], message: str
) -> None:
    # Accepted when built (TorchRec's constraints are hashed and copied with any string); the
    # planner refuses them rather than silently ignoring a typo.
    ebc = make_ebc([("t1", 100, 8)])
    cons = {"t1": ParameterConstraints(**kwargs)}  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"table 't1': constraint " + message):
        EmbeddingShardingPlanner(Topology(world_size=2), 8, cons).plan(ebc, [sharder()])


def test_constraints_for_unknown_tables() -> None:
    ebc = make_ebc([("a", 100, 8)])
    cons = {"typo": ParameterConstraints()}
    with pytest.raises(PlannerError, match=r"not in the model: \['typo'\].*\['a'\]"):
        EmbeddingShardingPlanner(Topology(world_size=2), 8, cons).plan(ebc, [sharder()])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sharding_types": []}, "sharding_types must not be empty"),
        ({"min_partition": 0}, "min_partition must be >= 1, got 0"),
        ({"pooling_factors": [-1.0]}, r"pooling_factors must be >= 0, got \[-1.0\]"),
        ({"pooling_factors": [1.0, 2.0], "num_poolings": [1.0]}, "equal lengths"),
    ],
)
def test_bad_constraint_values(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ParameterConstraints(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"world_size": 0}, "world_size must be >= 1, got 0"),
        ({"world_size": 4, "local_world_size": 3}, "local_world_size 3 must be >= 1 and divide"),
        ({"world_size": 2, "compute_device": "tpu"}, "'tpu'"),
        ({"world_size": 2, "hbm_cap": 0}, "hbm_cap must be > 0, got 0"),
        ({"world_size": 2, "inter_host_bw": -1.0}, "inter_host_bw must be > 0"),
    ],
)
def test_bad_topology(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Topology(**kwargs)  # type: ignore[arg-type]


def test_bad_planner_arguments() -> None:
    topo = Topology(world_size=2)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        EmbeddingShardingPlanner(topo, 0)
    with pytest.raises(ValueError, match="memory_reserve_fraction must be in"):
        EmbeddingShardingPlanner(topo, 8, memory_reserve_fraction=1.0)
    with pytest.raises(TypeError, match=r"constraints\['t'\] must be a ParameterConstraints"):
        EmbeddingShardingPlanner(topo, 8, {"t": {"sharding_types": ["row_wise"]}})  # type: ignore[dict-item]
