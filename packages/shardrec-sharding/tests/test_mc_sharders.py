"""The managed-collision sharders as the planner sees them: row-wise only, TorchRec's kernels on
cuda, the embedding module's weights; a plan for an MC collection; the bare collection does not
shard."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from shardrec_collectives import ShardingEnv
from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
)
from shardrec_embedding.mc import (
    LRU_EvictionPolicy,
    ManagedCollisionCollection,
    ManagedCollisionEmbeddingBagCollection,
    ManagedCollisionEmbeddingCollection,
    MCHManagedCollisionModule,
)
from shardrec_planner import EmbeddingShardingPlanner, Topology
from shardrec_sharding.mc import (
    ManagedCollisionCollectionSharder,
    ManagedCollisionEmbeddingBagCollectionSharder,
    ManagedCollisionEmbeddingCollectionSharder,
)

META = torch.device("meta")


def _mcc(configs: list) -> ManagedCollisionCollection:  # type: ignore[type-arg]
    module = MCHManagedCollisionModule(
        zch_size=100, device=META, eviction_policy=LRU_EvictionPolicy(), eviction_interval=1
    )
    return ManagedCollisionCollection({"t": module}, configs)


def _mc_ebc() -> ManagedCollisionEmbeddingBagCollection:
    configs = [
        EmbeddingBagConfig(name="t", embedding_dim=8, num_embeddings=100, feature_names=["f"])
    ]
    return ManagedCollisionEmbeddingBagCollection(
        EmbeddingBagCollection(tables=configs, device=META), _mcc(configs)
    )


def _mc_ec() -> ManagedCollisionEmbeddingCollection:
    configs = [EmbeddingConfig(name="t", embedding_dim=8, num_embeddings=100, feature_names=["f"])]
    return ManagedCollisionEmbeddingCollection(
        EmbeddingCollection(tables=configs, device=META), _mcc(configs)
    )


@pytest.mark.parametrize(
    "sharder",
    [ManagedCollisionEmbeddingBagCollectionSharder(), ManagedCollisionEmbeddingCollectionSharder()],
)
def test_row_wise_only_with_torchrecs_kernels(sharder: object) -> None:
    assert sharder.sharding_types("cuda") == ["row_wise"]  # type: ignore[attr-defined]
    assert sharder.sharding_types("cpu") == ["row_wise"]  # type: ignore[attr-defined]
    assert sharder.compute_kernels("row_wise", "cuda") == [  # type: ignore[attr-defined]
        "fused",
        "fused_uvm_caching",
        "fused_uvm",
        "key_value",
    ]
    assert sharder.compute_kernels("row_wise", "cpu") == ["fused"]  # type: ignore[attr-defined]


def test_shardable_parameters_are_the_embedding_modules() -> None:
    ebc, ec = _mc_ebc(), _mc_ec()
    bag = ManagedCollisionEmbeddingBagCollectionSharder().shardable_parameters(ebc)
    seq = ManagedCollisionEmbeddingCollectionSharder().shardable_parameters(ec)
    assert list(bag) == ["t"] and bag["t"] is ebc._embedding_module.embedding_bags["t"].weight
    assert list(seq) == ["t"] and seq["t"].shape == (100, 8)
    with pytest.raises(TypeError, match="ManagedCollisionEmbeddingBagCollection"):
        ManagedCollisionEmbeddingBagCollectionSharder().shardable_parameters(ec)


def test_the_planner_plans_an_mc_collection_row_wise() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bags = _mc_ebc()
            self.seq = _mc_ec()

    planner = EmbeddingShardingPlanner(topology=Topology(world_size=2, compute_device="cpu"))
    sharders = [
        ManagedCollisionEmbeddingBagCollectionSharder(),
        ManagedCollisionEmbeddingCollectionSharder(),
    ]
    plan = planner.plan(Model(), sharders)  # type: ignore[arg-type]
    for path in ("bags", "seq"):
        assert plan.plan[path]["t"].sharding_type == "row_wise"  # type: ignore[index]
        assert plan.plan[path]["t"].compute_kernel == "fused"  # type: ignore[index]


def test_shard_is_not_implemented_and_qcomm_is_refused() -> None:
    env = ShardingEnv(world_size=1, rank=0, pg=None)
    for sharder, module in ((ManagedCollisionCollectionSharder(), _mcc([])),):
        with pytest.raises(NotImplementedError, match="not implemented yet"):
            sharder.shard(module, {}, env)
    with pytest.raises(ValueError, match="qcomm"):
        ManagedCollisionEmbeddingBagCollectionSharder(qcomm_codecs_registry={"fwd": object()})
