"""TorchRec's managed-collision modules with the arguments its ZCH example and docs give them
(`HashZchManagedCollisionModule(is_inference=..., zch_size=..., input_hash_size=...,
total_num_buckets=..., eviction_policy_name=SINGLE_TTL_EVICTION, eviction_config=...)`;
`MCHManagedCollisionModule(zch_size=..., input_hash_size=..., eviction_interval=...,
eviction_policy=DistanceLFU_EvictionPolicy())`; `return_remapped_features=True`) in a
ManagedCollisionEmbeddingCollection, wrapped by DistributedModelParallel on 2 gloo ranks with
the MC sharder, row_wise, fused SGD: HashZch gives every id the global row the unsharded module
gives it (buckets spread over the ranks), MCH rows stay in range, and both train on every rank.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel
from shardrec_embedding import EmbeddingCollection, EmbeddingConfig
from shardrec_embedding.mc import (
    DistanceLFU_EvictionPolicy,
    HashZchEvictionConfig,
    HashZchEvictionPolicyName,
    HashZchManagedCollisionModule,
    ManagedCollisionCollection,
    ManagedCollisionEmbeddingCollection,
    ManagedCollisionModule,
    MCHManagedCollisionModule,
)
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import ShardingPlan, construct_module_sharding_plan, row_wise
from shardrec_sharding.mc import ManagedCollisionEmbeddingCollectionSharder
from shardrec_testing import RankContext, seeded_generator

ROWS, HASH, BUCKETS, STEPS = 16, 4000, 4, 3
FEATURES = ["feature_0", "feature_1"]


def tables() -> list[EmbeddingConfig]:
    return [
        EmbeddingConfig(name=f"table_{i}", embedding_dim=8, num_embeddings=ROWS, feature_names=[f])
        for i, f in enumerate(FEATURES)
    ]


def mc_module(kind: str, feature: str) -> ManagedCollisionModule:
    if kind == "mpzch":
        return HashZchManagedCollisionModule(
            is_inference=False,
            zch_size=ROWS,
            input_hash_size=HASH,
            device=torch.device("cpu"),
            total_num_buckets=BUCKETS,
            eviction_policy_name=HashZchEvictionPolicyName.SINGLE_TTL_EVICTION,
            eviction_config=HashZchEvictionConfig(features=[feature], single_ttl=1),
        )
    return MCHManagedCollisionModule(
        zch_size=ROWS,
        input_hash_size=HASH,
        device=torch.device("cpu"),
        eviction_interval=1,
        eviction_policy=DistanceLFU_EvictionPolicy(),
    )


def mc_ec(kind: str) -> ManagedCollisionEmbeddingCollection:
    t = tables()
    modules = {c.name: mc_module(kind, c.feature_names[0]) for c in t}
    return ManagedCollisionEmbeddingCollection(
        EmbeddingCollection(tables=t),
        ManagedCollisionCollection(managed_collision_modules=modules, embedding_configs=t),
        return_remapped_features=True,
    )


class SparseArch(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.mc_ec = mc_ec(kind)

    def forward(self, kjt: KeyedJaggedTensor) -> tuple[Tensor, KeyedJaggedTensor]:
        out, remapped = self.mc_ec(kjt)
        loss: Tensor = sum(jt.values().sum() for jt in out.values())
        return loss, remapped


def batch(rank: int, step: int) -> KeyedJaggedTensor:
    g = seeded_generator("zch-example", rank, step)
    lengths = torch.randint(0, 4, (4,), generator=g)
    values = torch.randint(0, HASH, (int(lengths.sum()),), generator=g)
    return KeyedJaggedTensor(FEATURES, values, lengths=lengths, stride=2)


def train(ctx: RankContext, kind: str) -> list[dict[str, list[int]]]:
    model = SparseArch(kind)
    plan = construct_module_sharding_plan(
        model.mc_ec._embedding_module,
        {"table_0": row_wise(), "table_1": row_wise()},
        world_size=ctx.world_size,
    )
    sharder = ManagedCollisionEmbeddingCollectionSharder(
        fused_params={"optimizer": "exact_sgd", "learning_rate": 0.1}
    )
    dmp = DistributedModelParallel(
        model,
        env=ShardingEnv.from_process_group(ctx.pg),
        plan=ShardingPlan(plan={"mc_ec": plan}),
        sharders=[sharder],
    )
    rows = []
    for step in range(STEPS):
        loss, remapped = dmp(batch(ctx.rank, step))
        loss.backward()
        rows.append({f: remapped[f].values().tolist() for f in FEATURES})
    return rows


@pytest.mark.parametrize("kind", ["mpzch", "mch"])
def test_torchrec_zch_example_arguments_shard_row_wise(pool_factory, kind):  # type: ignore[no-untyped-def]
    per_rank = pool_factory(2).run(train, kind)
    reference = mc_ec(kind)
    for step in range(STEPS):
        for f in FEATURES:
            got = [per_rank[r][step][f] for r in range(2)]
            assert all(0 <= row < ROWS for rows in got for row in rows), (kind, step, f, got)
        if kind != "mpzch":
            continue
        # HashZch: every id's row is its bucket's, wherever the bucket lives: the unsharded
        # module fed rank 0's then rank 1's ids of each feature gives the same rows
        kjts = [batch(r, step) for r in range(2)]
        for f in FEATURES:
            ids = torch.cat([k[f].values() for k in kjts])
            lengths = torch.cat([k[f].lengths() for k in kjts])
            other = next(g for g in FEATURES if g != f)  # no ids this time
            both = KeyedJaggedTensor(
                [f, other],
                ids,
                lengths=torch.cat([lengths, torch.zeros(4, dtype=torch.int64)]),
                stride=4,
            )
            _, remapped = reference(both)
            want = remapped[f].values().tolist()
            assert per_rank[0][step][f] + per_rank[1][step][f] == want, (step, f)
