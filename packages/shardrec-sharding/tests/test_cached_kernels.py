"""A table planned with TorchRec's `fused_uvm_caching` kernel and a `CacheParams` trains, on two
gloo ranks, exactly as the same table planned with `fused` (shardrec runs both with the fused
kernel), both equal a single-process fused module trained on every rank's batches, and the plan
report names the mapping and what became of the cache option."""

from __future__ import annotations

import pytest
import torch

from shardrec_collectives import ShardingEnv
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_embedding.fused import FusedEmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import (
    CacheParams,
    EmbeddingShardingPlanner,
    ParameterConstraints,
    ShardingPlan,
    Topology,
)
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, assert_close, random_lengths, seeded_generator

SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
CONFIGS = [
    EmbeddingBagConfig(name="cached", num_embeddings=13, embedding_dim=4, feature_names=["a"]),
    EmbeddingBagConfig(name="plain", num_embeddings=7, embedding_dim=4, feature_names=["b"]),
]
STEPS = 3


def initial() -> dict[str, torch.Tensor]:
    g = seeded_generator("cached-kernels-init")
    return {c.name: torch.randn(c.num_embeddings, 4, generator=g) for c in CONFIGS}


def batch(rank: int, step: int) -> tuple[KeyedJaggedTensor, torch.Tensor]:
    g = seeded_generator("cached-kernels-batch", rank, step)
    lengths = random_lengths(6, 3, g)  # features a, b; 3 samples each
    a, b = int(lengths[:3].sum()), int(lengths[3:].sum())
    values = torch.cat(
        [torch.randint(0, 13, (a,), generator=g), torch.randint(0, 7, (b,), generator=g)]
    )
    return KeyedJaggedTensor(["a", "b"], values, lengths=lengths), torch.randn(3, 8, generator=g)


def constraints(kernel: str) -> dict[str, ParameterConstraints]:
    return {
        "cached": ParameterConstraints(
            sharding_types=["row_wise"],
            compute_kernels=[kernel],
            cache_params=CacheParams(load_factor=0.2) if kernel != "fused" else None,
        )
    }


def train(ctx: RankContext, kernel: str) -> tuple[str, str, torch.Tensor, torch.Tensor]:
    """Plan on every rank (rank 0 plans, the plan is broadcast), train, gather both tables."""
    env = ShardingEnv.from_process_group(ctx.pg)
    ebc = EmbeddingBagCollection(CONFIGS)
    with torch.no_grad():
        for name, w in initial().items():
            ebc.embedding_bags[name].weight.copy_(w)
    sharder = EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())
    planner = EmbeddingShardingPlanner(
        Topology(world_size=ctx.world_size, compute_device="cpu"), 3, constraints(kernel)
    )
    plan = planner.collective_plan(ebc, [sharder], ctx.pg)
    sharded = sharder.shard(ebc, plan.plan[""], env)
    for step in range(STEPS):
        kjt, coefficients = batch(ctx.rank, step)
        (sharded(kjt).wait().values() * coefficients).sum().backward()
    tables = {}
    for name in ("cached", "plain"):
        full = torch.zeros(next(c.num_embeddings for c in CONFIGS if c.name == name), 4)
        value = sharded.state_dict()[f"embedding_bags.{name}.weight"]
        if hasattr(value, "local_shards"):
            for s in value.local_shards():
                (r0, c0), (nr, nc) = s.metadata.shard_offsets, s.metadata.shard_sizes
                full[r0 : r0 + nr, c0 : c0 + nc] = s.tensor.detach()
            torch.distributed.all_reduce(full, group=ctx.pg)  # each entry lives on one rank
        else:
            full = value.detach().clone()
        tables[name] = full
    ps = plan.plan[""]["cached"]
    return ps.compute_kernel.value, plan.report(), tables["cached"], tables["plain"]


def reference() -> dict[str, torch.Tensor]:
    ref = FusedEmbeddingBagCollection(CONFIGS, SPEC)
    with torch.no_grad():
        for name, w in initial().items():
            ref.embedding_bags[name].weight.copy_(w)
    for step in range(STEPS):
        pairs = [batch(r, step) for r in range(2)]
        kjts = [k.to_dict() for k, _ in pairs]
        values = torch.cat([kjts[r][f].values() for f in ("a", "b") for r in range(2)])
        lengths = torch.cat([kjts[r][f].lengths() for f in ("a", "b") for r in range(2)])
        out = ref(KeyedJaggedTensor(["a", "b"], values, lengths=lengths))
        (out.values() * torch.cat([c for _, c in pairs])).sum().backward()
    return {name: ref.embedding_bags[name].weight.detach() for name in ("cached", "plain")}


@pytest.mark.parametrize("kernel", ["fused_uvm_caching", "fused_uvm"])  # key_value: tiered
def test_cached_kernel_trains_as_fused_and_the_report_says_so(rank_pool, kernel):  # type: ignore[no-untyped-def]
    asked = rank_pool.run(train, kernel)
    fused = rank_pool.run(train, "fused")
    expected = reference()
    for rank in range(2):
        got_kernel, report, cached, plain = asked[rank]
        assert got_kernel == kernel  # the plan keeps what was asked
        assert f"{kernel}->fused" in report
        assert f"cached: kernel {kernel} runs as fused" in report
        if kernel == "fused_uvm_caching":
            assert "cache_params.load_factor=0.2 unused on cpu (estimated as fused)" in report
        assert torch.equal(cached, fused[rank][2])
        assert torch.equal(plain, fused[rank][3])
        assert_close(cached, expected["cached"], scale=10, msg=f"{kernel} rank {rank}")
        assert_close(plain, expected["plain"], scale=10, msg=f"{kernel} rank {rank}")
    assert "->" not in fused[0][1].split("per-table decisions")[1].split("\n\n")[0]


def test_the_plan_json_keeps_the_kernel_and_cache_params() -> None:
    ebc = EmbeddingBagCollection(CONFIGS, device="meta")
    sharder = EmbeddingBagCollectionSharder()
    plan = EmbeddingShardingPlanner(
        Topology(world_size=2, compute_device="cpu"), 3, constraints("fused_uvm_caching")
    ).plan(ebc, [sharder])
    back = ShardingPlan.from_json(plan.to_json())
    ps = back.plan[""]["cached"]
    assert ps.compute_kernel.value == "fused_uvm_caching"
    assert ps.cache_params == CacheParams(load_factor=0.2)
