"""The planner prices a managed-collision table as its rows plus the MC module's per-row state
(raw id, row, policy metadata; HashZch identities and expiry), per shard."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_embedding.mc import (
    DistanceLFU_EvictionPolicy,
    HashZchEvictionConfig,
    HashZchEvictionPolicyName,
    HashZchManagedCollisionModule,
    LFU_EvictionPolicy,
    ManagedCollisionCollection,
    ManagedCollisionEmbeddingBagCollection,
    ManagedCollisionModule,
    MCHManagedCollisionModule,
)
from shardrec_planner import EmbeddingTableSharder, Topology
from shardrec_planner.enumerators import EmbeddingEnumerator
from shardrec_planner.mc_storage import mc_bytes_per_row

ROWS, DIM = 1000, 16
META = torch.device("meta")


def _tables() -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(name="t", embedding_dim=DIM, num_embeddings=ROWS, feature_names=["f"])
    ]


def _mch(policy: object) -> ManagedCollisionModule:
    return MCHManagedCollisionModule(
        zch_size=ROWS,
        device=META,
        eviction_policy=policy,
        eviction_interval=1,  # type: ignore[arg-type]
    )


def _hash() -> ManagedCollisionModule:
    return HashZchManagedCollisionModule(
        zch_size=ROWS,
        device=META,
        total_num_buckets=2,
        eviction_policy_name=HashZchEvictionPolicyName.SINGLE_TTL_EVICTION,
        eviction_config=HashZchEvictionConfig(features=["f"], single_ttl=1),
    )


class _Model(nn.Module):
    def __init__(self, sparse: nn.Module) -> None:
        super().__init__()
        self.sparse = sparse


def _ddr_per_shard(module: nn.Module) -> list[int]:
    sharder = EmbeddingTableSharder(
        type(module), sharding_types=["row_wise"], compute_kernels=["fused"]
    )
    topology = Topology(world_size=2, compute_device="cpu")
    options = EmbeddingEnumerator(topology=topology, batch_size=64).enumerate(
        _Model(module), [sharder]
    )
    assert len(options) == 1
    return [shard.storage.ddr for shard in options[0].shards]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("make", "per_row"),
    [
        (lambda: _mch(LFU_EvictionPolicy()), 8 + 8 + 8),
        (lambda: _mch(DistanceLFU_EvictionPolicy()), 8 + 8 + 8 + 8),
        (_hash, 8 + 4),
    ],
)
def test_shard_storage_adds_the_mc_state_per_row(make: object, per_row: int) -> None:
    plain = EmbeddingBagCollection(tables=_tables(), device=META)
    mc_module = make()  # type: ignore[operator]
    mc = ManagedCollisionEmbeddingBagCollection(
        EmbeddingBagCollection(tables=_tables(), device=META),
        ManagedCollisionCollection({"t": mc_module}, _tables()),
    )
    assert mc_bytes_per_row(mc, "t") == per_row
    base, with_map = _ddr_per_shard(plain), _ddr_per_shard(mc)
    assert [m - b for m, b in zip(with_map, base, strict=True)] == [per_row * ROWS // 2] * 2


def test_plain_collections_have_no_mc_state() -> None:
    assert mc_bytes_per_row(EmbeddingBagCollection(tables=_tables(), device=META), "t") == 0
