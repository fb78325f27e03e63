"""The plan data model: string enums, shard metadata, ParameterSharding, ShardingPlan JSON."""

from __future__ import annotations

import json

import pytest
from _planner_models import make_ebc, sharder
from hypothesis import given, settings
from hypothesis import strategies as st

from shardrec_planner import (
    EmbeddingComputeKernel,
    EmbeddingShardingPlanner,
    EnumerableShardingSpec,
    ParameterSharding,
    ShardingPlan,
    ShardingType,
    ShardMetadata,
    Topology,
    placement,
    shard_geometry,
)


def test_sharding_type_is_a_string_enum() -> None:
    assert ShardingType("row_wise") is ShardingType.ROW_WISE
    assert ShardingType.GRID_SHARD.value == "grid_shard"
    # TorchRec's member names and values, in TorchRec's order
    assert [(t.name, t.value) for t in ShardingType] == [
        ("DATA_PARALLEL", "data_parallel"),
        ("TABLE_WISE", "table_wise"),
        ("COLUMN_WISE", "column_wise"),
        ("ROW_WISE", "row_wise"),
        ("TABLE_ROW_WISE", "table_row_wise"),
        ("TABLE_COLUMN_WISE", "table_column_wise"),
        ("GRID_SHARD", "grid_shard"),
    ]


def test_unknown_sharding_type_names_value_and_choices() -> None:
    with pytest.raises(ValueError, match=r"'rowwise'.*'row_wise'"):
        ShardingType("rowwise")


def test_kernel_accepts_tutorial_spellings() -> None:
    assert EmbeddingComputeKernel("fused") is EmbeddingComputeKernel.FUSED
    assert EmbeddingComputeKernel("batched_fused") is EmbeddingComputeKernel.FUSED
    assert EmbeddingComputeKernel.BATCHED_FUSED.value == "fused"
    assert EmbeddingComputeKernel("batched_dense") is EmbeddingComputeKernel.DENSE
    with pytest.raises(ValueError, match="'quantum'"):
        EmbeddingComputeKernel("quantum")


def test_placement_strings() -> None:
    assert placement("cpu", 3, 2) == "rank:3/cpu"
    assert placement("cuda", 11, 8) == "rank:11/cuda:3"
    meta = ShardMetadata(shard_offsets=(4, 0), shard_sizes=(4, 8), placement="rank:11/cuda:3")
    assert (meta.rank, meta.device) == (11, "cuda:3")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shard_offsets": (0,), "shard_sizes": (1, 2), "placement": "rank:0/cpu"}, "same length"),
        ({"shard_offsets": (0, -1), "shard_sizes": (1, 2), "placement": "rank:0/cpu"}, "-1"),
        ({"shard_offsets": (0, 0), "shard_sizes": (1, 2), "placement": "0/cpu"}, "'0/cpu'"),
    ],
)
def test_bad_shard_metadata(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ShardMetadata(**kwargs)  # type: ignore[arg-type]


def _spec(*ranks: int) -> EnumerableShardingSpec:
    return EnumerableShardingSpec(
        shards=tuple(
            ShardMetadata(shard_offsets=(i, 0), shard_sizes=(1, 4), placement=f"rank:{r}/cpu")
            for i, r in enumerate(ranks)
        )
    )


def test_parameter_sharding_accepts_strings() -> None:
    ps = ParameterSharding(
        sharding_type="row_wise",  # type: ignore[arg-type]
        compute_kernel="fused",  # type: ignore[arg-type]
        ranks=[0, 1],  # type: ignore[arg-type]
        sharding_spec=_spec(0, 1),
    )
    assert ps.sharding_type is ShardingType.ROW_WISE
    assert ps.ranks == [0, 1]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"sharding_type": "table_wise", "ranks": (1,), "sharding_spec": _spec(0)},
            r"\[1\].*\[0\]",
        ),
        ({"sharding_type": "table_wise", "ranks": (0,)}, "sharding_spec is required"),
        ({"sharding_type": "data_parallel", "ranks": (0,), "sharding_spec": _spec(0)}, "None"),
        ({"sharding_type": "data_parallel", "ranks": ()}, "ranks must not be empty"),
    ],
)
def test_bad_parameter_sharding(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ParameterSharding(compute_kernel=EmbeddingComputeKernel.FUSED, **kwargs)  # type: ignore[arg-type]


def _sharding(st_: ShardingType, rows: int, dim: int, world: int, local: int) -> ParameterSharding:
    shards = shard_geometry(st_, rows, dim, world_size=world, local_world_size=local)
    if st_ is ShardingType.DATA_PARALLEL:
        return ParameterSharding(
            sharding_type=st_,
            compute_kernel=EmbeddingComputeKernel.DENSE,
            ranks=tuple(range(world)),
        )
    ranks = [i % world for i in range(len(shards))]
    spec = EnumerableShardingSpec(
        shards=tuple(
            ShardMetadata(shard_offsets=o, shard_sizes=s, placement=placement("cuda", r, local))
            for (s, o), r in zip(shards, ranks, strict=True)
        )
    )
    return ParameterSharding(
        sharding_type=st_,
        compute_kernel=EmbeddingComputeKernel.FUSED,
        ranks=tuple(ranks),
        sharding_spec=spec,
    )


@settings(max_examples=40, deadline=None)
@given(
    tables=st.lists(
        st.tuples(
            st.sampled_from(list(ShardingType)),
            st.integers(0, 10_000),
            st.sampled_from([4, 64, 256, 384]),
        ),
        max_size=6,
    ),
    world=st.sampled_from([1, 2, 4, 8]),
)
def test_json_round_trip(tables: list[tuple[ShardingType, int, int]], world: int) -> None:
    local = min(world, 2)
    plan = ShardingPlan(
        plan={
            "sparse.ebc": {
                f"t{i}": _sharding(s, rows, dim, world, local)
                for i, (s, rows, dim) in enumerate(tables)
            },
            "": {},
        }
    )
    text = plan.to_json()
    assert ShardingPlan.from_json(text) == plan
    assert json.loads(text)["format"] == "shardrec-plan/1"


def test_from_json_rejects_other_documents() -> None:
    with pytest.raises(ValueError, match=r"not a shardrec plan.*'something-else'"):
        ShardingPlan.from_json('{"format": "something-else"}')


def test_plan_prints_as_table() -> None:
    plan = ShardingPlan(plan={"": {"t0": _sharding(ShardingType.ROW_WISE, 10, 8, 4, 4)}})
    text = str(plan)
    assert "module '' (root)" in text
    assert "row_wise" in text and "(9,0)+1x8@rank:3/cuda:3" in text
    assert plan.get_plan_for_module("") is plan.plan[""]
    assert plan.get_plan_for_module("missing") is None
    assert "written by hand" in plan.report()


def test_sharding_plan_takes_its_dict_positionally_as_torchrec() -> None:
    assert ShardingPlan({}) == ShardingPlan(plan={})
    # Equality is the placement, not the planner's estimates.
    planned = EmbeddingShardingPlanner(Topology(world_size=2, compute_device="cpu")).plan(
        make_ebc([("t", 100, 8)]), [sharder()]
    )
    assert planned.stats is not None and planned == ShardingPlan(planned.plan)
    with pytest.raises(TypeError):
        ShardingPlan({}, None)  # type: ignore[misc]  # stats stays keyword-only


def test_shard_dims_equal_torchrecs_lists() -> None:
    # TorchRec's ShardMetadata holds lists (`shard.shard_offsets == [0, 0]` in its tests); ours
    # stay immutable tuples that compare equal to the lists and to tuples of the same ints.
    from shardrec_planner.shard_metadata import ShardMetadata

    m = ShardMetadata(shard_offsets=[4, 0], shard_sizes=(4, 8), placement="rank:1/cpu")
    as_list = [4, 0]
    assert m.shard_offsets == as_list and as_list == m.shard_offsets  # both sides
    assert m.shard_offsets == (4, 0) and m.shard_sizes == [4, 8]
    assert m.shard_offsets != [4, 1] and m.shard_offsets != [4, 0, 0]
    assert not (m.shard_offsets != [4, 0])  # noqa: SIM202  # __ne__ itself
    assert hash(m.shard_offsets) == hash((4, 0)) and len({m, m}) == 1
    assert ShardMetadata.from_dict(m.to_dict()) == m
