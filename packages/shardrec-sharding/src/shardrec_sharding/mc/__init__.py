"""Sharders of the managed-collision modules (planner view; see `sharders`)."""

from shardrec_sharding.mc.sharded import (
    ShardedManagedCollisionCollection,
    ShardedManagedCollisionEmbeddingBagCollection,
    ShardedManagedCollisionEmbeddingCollection,
)
from shardrec_sharding.mc.sharders import (
    BaseManagedCollisionEmbeddingCollectionSharder,
    ManagedCollisionCollectionSharder,
    ManagedCollisionEmbeddingBagCollectionSharder,
    ManagedCollisionEmbeddingCollectionSharder,
)

__all__ = [
    "BaseManagedCollisionEmbeddingCollectionSharder",
    "ManagedCollisionCollectionSharder",
    "ManagedCollisionEmbeddingBagCollectionSharder",
    "ManagedCollisionEmbeddingCollectionSharder",
    "ShardedManagedCollisionCollection",
    "ShardedManagedCollisionEmbeddingBagCollection",
    "ShardedManagedCollisionEmbeddingCollection",
]
