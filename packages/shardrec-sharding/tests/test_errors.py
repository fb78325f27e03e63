"""Bad plans are rejected before any collective, naming the table; bad input raises on the rank
that got it (naming feature, table and id) and a PeerError on every other rank (no hang)."""

from __future__ import annotations

import pytest
import torch

from shardrec_collectives import PeerError, ShardingEnv
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import (
    EmbeddingComputeKernel,
    EmbeddingShardingPlanner,
    EnumerableShardingSpec,
    ParameterSharding,
    PlannerSharder,
    ShardingType,
    ShardMetadata,
    Topology,
    construct_module_sharding_plan,
    data_parallel,
    row_wise,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder, ShardedEmbeddingBagCollection
from shardrec_testing import RankContext

TABLES = [("users", 10, 4, ["user"]), ("products", 6, 4, ["item"])]


def make_ebc(weighted: bool = False) -> EmbeddingBagCollection:
    return EmbeddingBagCollection(
        [
            EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=f)
            for n, r, d, f in TABLES
        ],
        is_weighted=weighted,
    )


def row_plan(rows: int, blocks: list[tuple[int, int]], ranks: list[int]) -> ParameterSharding:
    shards = tuple(
        ShardMetadata(shard_offsets=(o, 0), shard_sizes=(n, 4), placement=f"rank:{r}/cpu")
        for (o, n), r in zip(blocks, ranks, strict=True)
    )
    return ParameterSharding(
        sharding_type=ShardingType.ROW_WISE,
        compute_kernel=EmbeddingComputeKernel.FUSED,
        ranks=tuple(ranks),
        sharding_spec=EnumerableShardingSpec(shards=shards),
    )


def good_plan() -> dict[str, ParameterSharding]:
    return dict(
        construct_module_sharding_plan(
            make_ebc(), {"users": row_wise(), "products": table_wise(rank=1)}, world_size=2
        )
    )


# An env without a process group: any collective would raise, so these pass only if the plan is
# rejected first.
LOCAL = ShardingEnv.from_local(2, 0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ghost": good_plan()["users"]}, "'ghost'"),
        ({"products": None}, "'products'"),
        ({"users": row_plan(10, [(0, 5), (5, 5)], [0, 2])}, "table 'users': ranks [2]"),
        ({"users": row_plan(10, [(0, 5), (5, 4)], [0, 1])}, "table 'users': the shard sizes"),
        ({"users": row_plan(10, [(0, 6), (5, 5)], [0, 1])}, "table 'users': shards at"),
        ({"users": row_plan(10, [(0, 5), (5, 6)], [0, 1])}, "table 'users' (10 x 4): shard"),
    ],
    ids=["unknown-table", "missing-table", "rank-outside", "not-covering", "overlap", "outside"],
)
def test_bad_plan_is_rejected_before_communicating(change, message):  # type: ignore[no-untyped-def]
    plan = {**good_plan(), **change}
    plan = {k: v for k, v in plan.items() if v is not None}
    with pytest.raises(ValueError) as info:
        ShardedEmbeddingBagCollection(make_ebc(), plan, LOCAL)
    assert message in str(info.value)


def test_sharder_satisfies_the_planner_protocol() -> None:
    sharder: PlannerSharder = EmbeddingBagCollectionSharder({"optimizer": "exact_sgd"})
    assert sharder.module_type is EmbeddingBagCollection
    assert set(sharder.sharding_types("cpu")) == {t.value for t in ShardingType} - {"grid_shard"}
    assert sharder.compute_kernels("data_parallel", "cpu") == ["dense"]
    assert "fused" in sharder.compute_kernels("row_wise", "cuda")
    params = sharder.shardable_parameters(make_ebc())
    assert list(params) == ["users", "products"]
    plan = EmbeddingShardingPlanner(topology=Topology(world_size=2, compute_device="cpu")).plan(
        make_ebc(), [sharder]
    )
    assert set(plan.plan[""]) == {"users", "products"}
    with pytest.raises(ValueError, match="unknown fused_params"):
        EmbeddingBagCollectionSharder({"optimizer": "exact_sgd", "bogus": 1})


def bad_input(ctx: RankContext, kind: str, plan_kind: str) -> str:
    env = ShardingEnv.from_process_group(ctx.pg)
    ebc = make_ebc()
    if plan_kind == "dp":
        generators = {"users": data_parallel(), "products": data_parallel()}
    else:
        generators = {"users": row_wise(), "products": table_wise(rank=1)}
    plan = construct_module_sharding_plan(ebc, generators, world_size=ctx.world_size)
    sharded = EmbeddingBagCollectionSharder().shard(ebc, plan, env)
    good = KeyedJaggedTensor(
        ["user", "item"], torch.tensor([1, 2, 3]), lengths=torch.tensor([1, 1, 1, 0])
    )
    features: object = good
    if ctx.rank == 0:
        if kind == "id-too-large":
            features = KeyedJaggedTensor(
                ["user", "item"], torch.tensor([1, 2, 6]), lengths=torch.tensor([1, 1, 1, 0])
            )
        elif kind == "id-negative":
            features = KeyedJaggedTensor(
                ["user", "item"], torch.tensor([-4, 2, 3]), lengths=torch.tensor([1, 1, 1, 0])
            )
        elif kind == "offsets-decrease":  # session 12: a decrease inside key 'user'
            features = KeyedJaggedTensor.from_offsets_sync(
                ["user", "item"], torch.tensor([1, 2, 3, 1]), offsets=torch.tensor([0, 2, 1, 3, 4])
            )
        elif kind == "missing-feature":
            features = KeyedJaggedTensor(["user"], torch.tensor([1]), lengths=torch.tensor([1, 0]))
        elif kind == "weights":
            features = KeyedJaggedTensor(
                ["user", "item"],
                torch.tensor([1, 2, 3]),
                weights=torch.ones(3),
                lengths=torch.tensor([1, 1, 1, 0]),
            )
        else:
            assert kind == "not-a-kjt"
            features = {"user": torch.tensor([1])}
    sharded(features).wait()  # type: ignore[arg-type]
    raise AssertionError("bad input was accepted")


@pytest.mark.parametrize("plan_kind", ["sharded", "dp"])
@pytest.mark.parametrize(
    ("kind", "error", "message"),
    [
        ("id-too-large", IndexError, "feature 'item' id 6 is out of range for table 'products'"),
        ("id-negative", IndexError, "feature 'user' id -4 is out of range for table 'users'"),
        ("missing-feature", ValueError, "lacks feature(s) ['item']"),
        ("offsets-decrease", ValueError, "offsets decrease at index 2 (2 -> 1), in feature 'user'"),
        ("weights", ValueError, "unweighted but the KeyedJaggedTensor carries weights"),
        ("not-a-kjt", TypeError, "takes a KeyedJaggedTensor, got dict"),
    ],
)
def test_bad_input_raises_on_every_rank(pool_factory, kind, error, message, plan_kind):  # type: ignore[no-untyped-def]
    outcomes = pool_factory(2).run_outcomes(bad_input, kind, plan_kind, timeout_s=60)
    assert isinstance(outcomes[0], error), outcomes[0]
    assert message in str(outcomes[0])
    assert isinstance(outcomes[1], PeerError), outcomes[1]
    assert message in str(outcomes[1])


def test_tutorial_attributes_name_each_sharding_type_part() -> None:
    # TorchRec's intro tutorial prints `_input_dists`, `_lookups` and `_output_dists`.
    ebc = make_ebc()
    plan = construct_module_sharding_plan(
        ebc, {"users": data_parallel(), "products": table_wise(rank=0)}, world_size=1
    )
    sharded = EmbeddingBagCollectionSharder().shard(ebc, plan, ShardingEnv.from_local(1, 0))
    assert isinstance(sharded, ShardedEmbeddingBagCollection)
    for parts in (sharded._input_dists, sharded._lookups, sharded._output_dists):
        assert sorted(parts) == ["data_parallel", "table_wise"]
    assert all(callable(f) for f in sharded._input_dists.values())
    assert all(callable(f) for f in sharded._output_dists.values())
