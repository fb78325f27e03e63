"""Sharder of the managed-collision collection (TorchRec path `torchrec.distributed.mc_modules`)."""

from shardrec_sharding.mc import (
    ManagedCollisionCollectionSharder,
    ShardedManagedCollisionCollection,
)

__all__ = ["ManagedCollisionCollectionSharder", "ShardedManagedCollisionCollection"]
