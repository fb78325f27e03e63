"""Sharder of the MC EmbeddingCollection (TorchRec path `torchrec.distributed.mc_embedding`)."""

from shardrec_sharding.mc import (
    ManagedCollisionEmbeddingCollectionSharder,
    ShardedManagedCollisionEmbeddingCollection,
)

__all__ = [
    "ManagedCollisionEmbeddingCollectionSharder",
    "ShardedManagedCollisionEmbeddingCollection",
]
