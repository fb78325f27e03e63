"""The DMP flows of TorchRec's tutorials (docs/tutorials.md), on CPU with gloo, every type.

- torchrec_intro_tutorial: `DistributedModelParallel(ebc, device=...)` with the default plan,
  `model(kjt).wait()`, the fused optimizer and `in_backward_optimizer_filter`;
- sharding_tutorial: `planner.collective_plan(module, sharders, pg)` with per-table constraints,
  then `DistributedModelParallel(module, env=..., plan=plan, sharders=sharders, device=...)`,
  for every sharding type.

Each rank checks the sharded output against the unsharded module on its own batch.
"""

from __future__ import annotations

import copy

import pytest
import torch

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import CombinedOptimizer, in_backward_optimizer_filter
from shardrec_planner import (
    EmbeddingComputeKernel,
    EmbeddingShardingPlanner,
    ParameterConstraints,
    Topology,
)
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, assert_close

TYPES = [
    "table_wise",
    "row_wise",
    "column_wise",
    "table_row_wise",
    "data_parallel",
    "table_column_wise",
]


def tables() -> list[EmbeddingBagConfig]:
    large = [
        EmbeddingBagConfig(
            name=f"large_table_{i}",
            embedding_dim=256,
            num_embeddings=64,
            feature_names=[f"large_table_feature_{i}"],
            pooling=PoolingType.SUM,
        )
        for i in range(2)
    ]
    small = [
        EmbeddingBagConfig(
            name=f"small_table_{i}",
            embedding_dim=64,
            num_embeddings=16,
            feature_names=[f"small_table_feature_{i}"],
            pooling=PoolingType.SUM,
        )
        for i in range(2)
    ]
    return large + small


def sample_batch(rank: int) -> KeyedJaggedTensor:
    g = torch.Generator().manual_seed(rank)
    keys = [t.feature_names[0] for t in tables()]
    rows = [t.num_embeddings for t in tables()]
    lengths = torch.randint(0, 5, (len(keys) * 3,), generator=g)
    per_key = lengths.view(len(keys), 3).sum(1).tolist()
    values = torch.cat(
        [torch.randint(0, r, (n,), generator=g) for r, n in zip(rows, per_key, strict=True)]
    )
    return KeyedJaggedTensor(keys, values, lengths=lengths, stride=3)


def intro_tutorial(ctx: RankContext) -> set[str]:
    torch.manual_seed(0)
    ebc = EmbeddingBagCollection(tables())
    unsharded = copy.deepcopy(ebc)
    model = DistributedModelParallel(ebc, device=torch.device("cpu"))
    kjt = sample_batch(ctx.rank)
    out = model(kjt)
    assert_close(out.wait().values(), unsharded(kjt).values())
    assert isinstance(model.fused_optimizer, CombinedOptimizer)
    # Only embedding tables: nothing is left for a dense optimizer, as the tutorial prints.
    dense = dict(in_backward_optimizer_filter(model.named_parameters()))
    assert all("embedding_bags" in k for k in dense), sorted(dense)
    return set(model.fused_optimizer.params) | set(dense)


def sharding_tutorial(ctx: RankContext, sharding_type: str) -> str:
    torch.manual_seed(0)
    module = EmbeddingBagCollection(tables())
    unsharded = copy.deepcopy(module)
    kernel = (
        EmbeddingComputeKernel.DENSE
        if sharding_type == "data_parallel"
        else EmbeddingComputeKernel.FUSED
    )
    constraints = {
        t.name: ParameterConstraints(sharding_types=[sharding_type], compute_kernels=[kernel.value])
        for t in tables()
    }
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=ctx.world_size, compute_device="cpu"),
        constraints=constraints,
    )
    sharders = [EmbeddingBagCollectionSharder()]
    plan = planner.collective_plan(module, sharders, ctx.pg)
    sharded_model = DistributedModelParallel(
        module,
        env=ShardingEnv.from_process_group(ctx.pg),
        plan=plan,
        sharders=sharders,
        device=torch.device("cpu"),
    )
    batch = sample_batch(ctx.rank)
    assert_close(sharded_model(batch).wait().values(), unsharded(batch).values())
    return f"rank:{ctx.rank},sharding plan: {plan}"


@pytest.mark.parametrize("rank_pool", [2], indirect=True)
def test_intro_tutorial_dmp(rank_pool: object) -> None:
    keys = rank_pool.run(intro_tutorial)  # type: ignore[attr-defined]
    # Each rank's fused optimizer holds its own tables; together they hold every table.
    assert keys[0] | keys[1] == {f"embedding_bags.{t.name}.weight" for t in tables()}


@pytest.mark.parametrize("rank_pool", [2], indirect=True)
def test_sharding_tutorial_dmp(rank_pool: object) -> None:
    for sharding_type in TYPES:
        printed = rank_pool.run(sharding_tutorial, sharding_type)  # type: ignore[attr-defined]
        assert printed[0].startswith("rank:0,sharding plan:")
        assert sharding_type in printed[0], printed[0]
