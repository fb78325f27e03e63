"""Planner-made tiered plans of every splitting kind train as the in-memory plan: on 2 gloo
ranks, `EmbeddingShardingPlanner` places a `key_value` table row_wise / column_wise /
table_row_wise (each rank's shard a tiered table behind its own cache, evicting every step) and
prices it on the disk tier; DistributedModelParallel trains it through the same batches as the
same plan with the table in memory (`fused`), and every step's pooled outputs and the trained
model's outputs are equal."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest
import torch
from torch import Tensor, nn

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import (
    CacheParams,
    EmbeddingComputeKernel,
    EmbeddingShardingPlanner,
    KeyValueParams,
    ParameterConstraints,
    ShardingPlan,
    Topology,
)
from shardrec_sharding import EmbeddingBagCollectionSharder, tiered_lookups
from shardrec_testing import RankContext, random_lengths, seeded_generator

SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
ROWS, DIM, BATCH, STEPS = 400, 8, 4, 6
LOAD_FACTOR = 0.15
"""A row_wise shard's 200 rows get a 30-row cache, a column block's 400 rows 60: at least the
up to 2 ranks x 3 x BATCH = 24 distinct rows of a step, far fewer than the rows the steps touch."""


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection(
            [
                EmbeddingBagConfig(
                    name="big", num_embeddings=ROWS, embedding_dim=DIM, feature_names=["a"]
                ),
                EmbeddingBagConfig(name="small", num_embeddings=9, embedding_dim=DIM,
                                   feature_names=["b"]),
            ]
        )  # fmt: skip
        g = seeded_generator("tiered-planned-init")
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))


def batch(rank: int, step: int) -> tuple[KeyedJaggedTensor, Tensor]:
    g = seeded_generator("tiered-planned", rank, step)
    lengths = torch.cat([torch.full((BATCH,), 3), random_lengths(BATCH, 3, g)])
    values = torch.cat(
        [
            torch.randint(0, ROWS, (3 * BATCH,), generator=g),
            torch.randint(0, 9, (int(lengths[BATCH:].sum()),), generator=g),
        ]
    )
    return KeyedJaggedTensor(["a", "b"], values, lengths=lengths), torch.randn(
        BATCH, 2 * DIM, generator=g
    )


def planned(sharding_type: str, store: str) -> ShardingPlan:
    """The planner's plan: "big" tiered (`key_value`) as `sharding_type`, "small" in memory."""
    constraints = {
        "big": ParameterConstraints(
            sharding_types=[sharding_type],
            compute_kernels=["key_value"],
            cache_params=CacheParams(load_factor=LOAD_FACTOR),
            key_value_params=KeyValueParams(ssd_storage_directory=store),
            min_partition=DIM // 2,
        ),
        "small": ParameterConstraints(sharding_types=["table_wise"], compute_kernels=["fused"]),
    }
    planner = EmbeddingShardingPlanner(
        Topology(world_size=2, compute_device="cpu"),
        batch_size=BATCH,
        constraints=constraints,
        stats=[],
    )
    return planner.plan(
        Model(), [EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())]
    )


def in_memory(plan: ShardingPlan) -> ShardingPlan:
    """`plan` with every table's rows in memory (`fused`, no cache or store)."""
    return ShardingPlan(
        plan={
            path: {
                name: dataclasses.replace(
                    ps,
                    compute_kernel=EmbeddingComputeKernel.FUSED,
                    cache_params=None,
                    key_value_params=None,
                )
                for name, ps in sub.items()
            }
            for path, sub in plan.plan.items()
        }
    )


def train(ctx: RankContext, plan: ShardingPlan) -> dict[str, object]:
    dmp = DistributedModelParallel(
        Model(),
        env=ShardingEnv.from_process_group(ctx.pg),
        plan=plan,
        sharders=[EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())],
    )
    sparse = dmp.module.get_submodule("sparse")
    outputs = []
    for step in range(STEPS):
        kjt, coef = batch(ctx.rank, step)
        out = sparse(kjt).values()
        (out * coef).sum().backward()
        dmp.fused_optimizer.step()
        outputs.append(out.detach().clone())
    with torch.no_grad():
        final = sparse(batch(ctx.rank, STEPS)[0]).values().clone()
    stats = [lookup.stats()["big"] for lookup in tiered_lookups(dmp)]
    return {"outputs": outputs, "final": final, "stats": stats}


def run_both(ctx: RankContext, sharding_type: str, store: str) -> tuple[object, ...]:
    plan = planned(sharding_type, store)
    return plan, train(ctx, plan), train(ctx, in_memory(plan))


@pytest.mark.parametrize("sharding_type", ["row_wise", "column_wise", "table_row_wise"])
def test_planned_tiered_shards_train_as_the_in_memory_plan(  # type: ignore[no-untyped-def]
    rank_pool, tmp_path: pathlib.Path, sharding_type: str
) -> None:
    per_rank = rank_pool.run(run_both, sharding_type, str(tmp_path))
    for rank, (plan, tiered, ref) in enumerate(per_rank):
        assert isinstance(plan, ShardingPlan) and isinstance(tiered, dict)
        ps = plan.plan["sparse"]["big"]
        assert ps.sharding_type.value == sharding_type and ps.ranks == [0, 1]
        assert ps.compute_kernel.value == "key_value"
        assert plan.stats is not None
        tier = next(t.tier for t in plan.stats.tables if t.table == "big")
        assert tier is not None and [s.rank for s in tier.shards] == [0, 1]
        [stats] = tiered["stats"]  # this rank's shard, a tiered table of its own
        assert stats["cache_rows"] == tier.shards[rank].cache_rows
        assert stats["misses"] > stats["cache_rows"] and stats["bytes_written"] > 0
        assert isinstance(ref, dict) and ref["stats"] == []
        for step, (a, b) in enumerate(zip(tiered["outputs"], ref["outputs"], strict=True)):
            assert torch.equal(a, b), f"rank {rank} step {step}"
        assert torch.equal(tiered["final"], ref["final"]), f"rank {rank}"
