"""A table planned with TorchRec's `key_value` kernel (table-wise, one rank) runs on the tiered
lookup (rows on disk behind a cache sized by `CacheParams.load_factor`, in the store directory
of `KeyValueParams`) and trains exactly as the same table planned `fused`."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest
import torch

from shardrec_collectives import ShardingEnv
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import (
    CacheParams,
    EmbeddingShardingPlanner,
    KeyValueParams,
    ParameterConstraints,
    ParameterSharding,
    Topology,
    construct_module_sharding_plan,
    kernel_notes,
    table_wise,
)
from shardrec_planner.cache_params import CacheAlgorithm
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import random_lengths, seeded_generator
from shardrec_tiered import TieredFusedEmbeddingBag

SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
CONFIGS = [
    EmbeddingBagConfig(name="disk", num_embeddings=50, embedding_dim=4, feature_names=["a"]),
    EmbeddingBagConfig(name="ram", num_embeddings=7, embedding_dim=4, feature_names=["b"]),
]


def build(
    kernel: str, store: pathlib.Path, algorithm: CacheAlgorithm
) -> tuple[torch.nn.Module, dict[str, ParameterSharding]]:
    ebc = EmbeddingBagCollection(CONFIGS)
    g = seeded_generator("tiered-sharded-init")
    with torch.no_grad():
        for c in CONFIGS:
            ebc.embedding_bags[c.name].weight.copy_(torch.randn(c.num_embeddings, 4, generator=g))
    plan = construct_module_sharding_plan(
        ebc,
        {"disk": table_wise(rank=0, compute_kernel=kernel), "ram": table_wise(rank=0)},
        world_size=1,
    )
    if kernel == "key_value":
        plan["disk"] = dataclasses.replace(
            plan["disk"],
            key_value_params=KeyValueParams(ssd_storage_directory=str(store)),
            cache_params=CacheParams(load_factor=0.4, algorithm=algorithm),
        )
    sharder = EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())
    return sharder.shard(ebc, plan, ShardingEnv.from_local(1, 0)), plan


@pytest.mark.parametrize("algorithm", [CacheAlgorithm.LRU, CacheAlgorithm.LFU])
def test_key_value_table_trains_as_fused(tmp_path: pathlib.Path, algorithm: CacheAlgorithm) -> None:
    plain, _ = build("fused", tmp_path, algorithm)
    tiered, plan = build("key_value", tmp_path, algorithm)
    lookups = [g.module for s in tiered._strategies for g in s.lookup.groups]
    disk = [m for m in lookups if isinstance(m, TieredFusedEmbeddingBag)]
    assert len(disk) == 1 and [c.slots for c in disk[0].caches] == [20]
    assert (tmp_path / "rank-0" / "disk.tier").is_file()
    for step in range(5):
        g = seeded_generator("tiered-sharded-batch", step)
        lengths = random_lengths(8, 4, g)
        a = int(lengths[:4].sum())
        values = torch.cat(
            [
                torch.randint(0, 50, (a,), generator=g),
                torch.randint(0, 7, (int(lengths[4:].sum()),), generator=g),
            ]
        )
        kjt = KeyedJaggedTensor(["a", "b"], values, lengths=lengths)
        coefficients = torch.randn(4, 8, generator=g)
        for m in (plain, tiered):
            (m(kjt).wait().values() * coefficients).sum().backward()
    weight, _ = disk[0].read_table("disk")
    assert torch.equal(weight, plain.embedding_bags["disk"].weight.detach())
    assert torch.equal(tiered.embedding_bags["ram"].weight, plain.embedding_bags["ram"].weight)
    assert disk[0].stats()["disk"]["misses"] > 0
    report = "\n".join(kernel_notes(plan["disk"]))
    assert (
        f"kernel key_value runs tiered: rows and optimizer state in {tmp_path}/rank-<r>" in report
    )
    assert f"a {algorithm.name} cache of 0.4 of the rows in memory" in report
    # The tiered table's state_dict and fused optimizer state: the in-memory table's keys and
    # values (checkpoints: packages/shardrec-dmp/tests/test_tiered_checkpoint.py).
    # (Without a process group, as here, the lookups' own: the sharded module's are
    # ShardedTensors.)
    fused = next(
        g.module for s in plain._strategies for g in s.lookup.groups if "disk" in g.module.tables
    )
    assert torch.equal(disk[0].state_dict()["tables.disk.weight"], weight)
    mine_opt = disk[0].fused_optimizer.state_dict()["state"]["disk.weight"]
    theirs_opt = fused.fused_optimizer.state_dict()["state"]["disk.weight"]
    assert mine_opt.keys() == theirs_opt.keys()
    for name, value in theirs_opt.items():
        assert torch.equal(mine_opt[name], value), name


def test_planner_constraints_reach_the_tier(tmp_path: pathlib.Path) -> None:
    ebc = EmbeddingBagCollection(CONFIGS)
    constraints = {
        "disk": ParameterConstraints(
            sharding_types=["table_wise"],
            compute_kernels=["key_value"],
            key_value_params=KeyValueParams(ssd_storage_directory=str(tmp_path)),
            cache_params=CacheParams(load_factor=0.5, algorithm=CacheAlgorithm.LFU),
        )
    }
    sharder = EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())
    planner = EmbeddingShardingPlanner(Topology(world_size=1, compute_device="cpu"), 4, constraints)
    plan = planner.plan(ebc, [sharder])
    assert "kernel key_value runs tiered" in plan.report()
    sharded = sharder.shard(ebc, plan.plan[""], ShardingEnv.from_local(1, 0))
    tiered = [
        g.module
        for s in sharded._strategies
        for g in s.lookup.groups
        if isinstance(g.module, TieredFusedEmbeddingBag)
    ]
    assert [c.slots for m in tiered for c in m.caches] == [25]
    assert [c.policy.value for m in tiered for c in m.caches] == ["lfu"]
    kjt = KeyedJaggedTensor(
        ["a", "b"], torch.tensor([1, 2, 49, 3]), lengths=torch.tensor([2, 1, 0, 0, 1, 0, 0, 0])
    )
    sharded(kjt).wait().values().sum().backward()
    assert tiered[0].stats()["disk"]["misses"] == 3
