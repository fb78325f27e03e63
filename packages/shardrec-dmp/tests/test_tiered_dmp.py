"""A DistributedModelParallel whose row_wise table runs tiered (`key_value`): its
`fused_optimizer` includes the tiered lookups, so a `WarmupOptimizer` over it sets their learning
rate too, and on 2 gloo ranks the tiered table trains exactly as the same plan held in memory."""

from __future__ import annotations

import dataclasses
import pathlib

import torch
from torch import nn

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import WarmupOptimizer, WarmupPolicy, WarmupStage
from shardrec_planner import (
    CacheParams,
    KeyValueParams,
    ShardingPlan,
    construct_module_sharding_plan,
    row_wise,
    table_wise,
)
from shardrec_sharding import tiered_lookups
from shardrec_testing import RankContext, random_lengths, seeded_generator

STEPS = 5


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection(
            [
                EmbeddingBagConfig(
                    name="big", num_embeddings=60, embedding_dim=4, feature_names=["f"]
                ),
                EmbeddingBagConfig(
                    name="small", num_embeddings=6, embedding_dim=4, feature_names=["g"]
                ),
            ]
        )


def train(ctx: RankContext, kernel: str, store: str) -> tuple[torch.Tensor, list[float]]:
    """This rank's rows of "big" after `STEPS` warmup steps, and the learning rates."""
    env = ShardingEnv.from_process_group(ctx.pg)
    model = Model()
    g = seeded_generator("tiered-dmp-init")
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    sub = construct_module_sharding_plan(
        model.sparse,
        {"big": row_wise(compute_kernel=kernel), "small": table_wise(rank=0)},
        world_size=env.world_size,
    )
    if kernel == "key_value":
        sub["big"] = dataclasses.replace(
            sub["big"],
            key_value_params=KeyValueParams(ssd_storage_directory=store),
            cache_params=CacheParams(load_factor=0.5),
        )
    dmp = DistributedModelParallel(model, env=env, plan=ShardingPlan(plan={"sparse": sub}))
    warmup = WarmupOptimizer(
        dmp.fused_optimizer,
        [WarmupStage(policy=WarmupPolicy.LINEAR, max_iters=2 * STEPS, value=0.1)],
        lr=0.3,
    )
    for step in range(STEPS):
        gen = seeded_generator("tiered-dmp-batch", ctx.rank, step)
        lengths = random_lengths(6, 3, gen)
        a, b = int(lengths[:3].sum()), int(lengths[3:].sum())
        values = torch.cat(
            [torch.randint(0, 60, (a,), generator=gen), torch.randint(0, 6, (b,), generator=gen)]
        )
        out = dmp.module.sparse(KeyedJaggedTensor(["f", "g"], values, lengths=lengths))
        (out.values() * torch.randn(out.values().shape, generator=gen)).sum().backward()
        warmup.step()
    lrs = [float(group["lr"]) for group in dmp.fused_optimizer.param_groups]
    lookups = tiered_lookups(dmp)
    if kernel == "key_value":
        [lookup] = lookups
        lookup.flush()
        return lookup.read_table("big")[0], lrs
    assert lookups == []
    weight = dict(dmp.named_parameters())["sparse.embedding_bags.big.weight"]
    return weight.detach().clone(), lrs


def test_warmup_reaches_tiered_tables(rank_pool, tmp_path: pathlib.Path) -> None:  # type: ignore[no-untyped-def]
    tiered = rank_pool.run(train, "key_value", str(tmp_path))
    plain = rank_pool.run(train, "fused", str(tmp_path / "unused"))
    for rank in range(2):
        (t_weight, t_lrs), (p_weight, p_lrs) = tiered[rank], plain[rank]
        assert len(t_lrs) == len(p_lrs) >= 1
        assert t_lrs == p_lrs and len(set(t_lrs)) == 1 and t_lrs[0] != 0.3
        assert torch.equal(t_weight, p_weight), f"rank {rank}"
