"""The planner's automatic tiering, end to end: on a rank whose memory does not hold a table,
`EmbeddingShardingPlanner(auto_tier=True)` places it `key_value` with a cache that fits, the
sharder builds the tiered lookup with that cache, and training gives the weights of the same
table planned in memory."""

from __future__ import annotations

import pathlib

import torch

from shardrec_collectives import ShardingEnv
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import (
    EmbeddingShardingPlanner,
    KeyValueParams,
    ParameterConstraints,
    Topology,
    construct_module_sharding_plan,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import random_lengths, seeded_generator
from shardrec_tiered import TieredFusedEmbeddingBag

SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
ROWS, DIM = 20_000, 8
CONFIGS = [
    EmbeddingBagConfig(name="big", num_embeddings=ROWS, embedding_dim=DIM, feature_names=["a"]),
    EmbeddingBagConfig(name="small", num_embeddings=7, embedding_dim=DIM, feature_names=["b"]),
]


def _ebc() -> EmbeddingBagCollection:
    ebc = EmbeddingBagCollection(CONFIGS)
    g = seeded_generator("tiered-auto-init")
    with torch.no_grad():
        for c in CONFIGS:
            ebc.embedding_bags[c.name].weight.copy_(torch.randn(c.num_embeddings, DIM, generator=g))
    return ebc


def test_auto_tier_plans_a_table_that_does_not_fit_and_it_trains_as_in_memory(
    tmp_path: pathlib.Path,
) -> None:
    sharder = EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())
    # 512 KiB per rank (435 KiB for tables): the 720 KB table (rows + rowwise state) does not fit
    topo = Topology(world_size=1, compute_device="cpu", ddr_cap=512 * 1024, ssd_cap=10**9)
    constraints = {
        "big": ParameterConstraints(
            key_value_params=KeyValueParams(ssd_storage_directory=str(tmp_path))
        )
    }
    planner = EmbeddingShardingPlanner(topo, 4, constraints, auto_tier=True, stats=[])
    plan = planner.plan(_ebc(), [sharder])
    ps = plan.plan[""]["big"]
    assert ps.compute_kernel.value == "key_value"
    assert ps.cache_params is not None and ps.cache_params.load_factor == 0.2
    assert plan.plan[""]["small"].compute_kernel.value == "fused"
    assert "big: tier disk (key_value)" in plan.report()

    tiered = sharder.shard(_ebc(), plan.plan[""], ShardingEnv.from_local(1, 0))
    disk = [
        g.module
        for s in tiered._strategies
        for g in s.lookup.groups
        if isinstance(g.module, TieredFusedEmbeddingBag)
    ]
    assert [c.slots for m in disk for c in m.caches] == [ROWS // 5]
    reference = construct_module_sharding_plan(
        _ebc(), {"big": table_wise(rank=0), "small": table_wise(rank=0)}, world_size=1
    )
    plain = sharder.shard(_ebc(), reference, ShardingEnv.from_local(1, 0))
    for step in range(4):
        g = seeded_generator("tiered-auto-batch", step)
        lengths = random_lengths(8, 6, g)
        a = int(lengths[:4].sum())
        values = torch.cat(
            [
                torch.randint(0, ROWS, (a,), generator=g),
                torch.randint(0, 7, (int(lengths[4:].sum()),), generator=g),
            ]
        )
        kjt = KeyedJaggedTensor(["a", "b"], values, lengths=lengths)
        coefficients = torch.randn(4, 2 * DIM, generator=g)
        for m in (plain, tiered):
            (m(kjt).wait().values() * coefficients).sum().backward()
    weight, _ = disk[0].read_table("big")
    assert torch.equal(weight, plain.embedding_bags["big"].weight.detach())
