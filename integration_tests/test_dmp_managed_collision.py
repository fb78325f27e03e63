"""DistributedModelParallel with TorchRec's managed-collision EmbeddingBagCollection on 2 gloo
ranks: the planner plans it with the MC sharder, DMP shards it, and each rank's pooled output
equals the unsharded EmbeddingBagCollection on the remapped ids the sharded module returns."""

from __future__ import annotations

import torch
from torch import nn

from shardrec_testing import RankContext, assert_close, seeded_generator


def _init(w: torch.Tensor) -> torch.Tensor:
    return torch.nn.init.constant_(w, 0.25)


def _dmp_case(ctx: RankContext) -> str:
    import shardrec as torchrec
    from shardrec.distributed import DistributedModelParallel
    from shardrec.distributed.mc_embeddingbag import (
        ManagedCollisionEmbeddingBagCollectionSharder,
    )
    from shardrec.modules.mc_embedding_modules import ManagedCollisionEmbeddingBagCollection
    from shardrec.modules.mc_modules import (
        LFU_EvictionPolicy,
        ManagedCollisionCollection,
        MCHManagedCollisionModule,
    )

    tables = [
        torchrec.EmbeddingBagConfig(
            name="t", embedding_dim=8, num_embeddings=64, feature_names=["f"], init_fn=_init
        )
    ]
    ebc = torchrec.EmbeddingBagCollection(tables=tables)
    with torch.no_grad():
        weight = ebc.embedding_bags["t"].weight
        weight.copy_(torch.randn(weight.shape, generator=seeded_generator("dmp-mc")))
    reference = torchrec.EmbeddingBagCollection(tables=tables)
    reference.load_state_dict(ebc.state_dict())
    mc = ManagedCollisionEmbeddingBagCollection(
        ebc,
        ManagedCollisionCollection(
            {
                "t": MCHManagedCollisionModule(
                    zch_size=64,
                    device=torch.device("cpu"),
                    eviction_policy=LFU_EvictionPolicy(),
                    eviction_interval=1,
                    input_hash_size=1 << 41,
                )
            },
            tables,
        ),
        return_remapped_features=True,
    )

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.sparse = mc

        def forward(self, kjt: torchrec.KeyedJaggedTensor) -> tuple[torch.Tensor, object]:
            pooled, remapped = self.sparse(kjt)
            return pooled.values(), remapped

    dmp = DistributedModelParallel(
        Model(),
        sharders=[ManagedCollisionEmbeddingBagCollectionSharder()],
        device=torch.device("cpu"),
    )
    # 36 ids for 62 rows: every id takes a row no id held, whose weights are kept (TorchRec's)
    for step in range(3):
        g = seeded_generator("dmp-mc-batch", ctx.rank, step)
        values = torch.randint(0, 1 << 41, (6,), generator=g)
        kjt = torchrec.KeyedJaggedTensor.from_lengths_sync(
            keys=["f"], values=values, lengths=torch.tensor([2, 3, 1])
        )
        pooled, remapped = dmp(kjt)
        assert_close(pooled, reference(remapped).values(), msg=f"step {step}")
    return type(dmp.module.sparse).__name__


def test_dmp_shards_a_managed_collision_ebc(pool_factory):  # type: ignore[no-untyped-def]
    names = pool_factory(2).run(_dmp_case)
    assert names == ["ShardedManagedCollisionEmbeddingBagCollection"] * 2
