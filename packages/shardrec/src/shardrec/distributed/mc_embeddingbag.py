"""Sharder of the MC EmbeddingBagCollection (TorchRec path
`torchrec.distributed.mc_embeddingbag`)."""

from shardrec_sharding.mc import (
    ManagedCollisionEmbeddingBagCollectionSharder,
    ShardedManagedCollisionEmbeddingBagCollection,
)

__all__ = [
    "ManagedCollisionEmbeddingBagCollectionSharder",
    "ShardedManagedCollisionEmbeddingBagCollection",
]
