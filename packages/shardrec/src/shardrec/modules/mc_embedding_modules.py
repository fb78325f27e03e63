"""Managed-collision embedding collections (TorchRec path `torchrec.modules.mc_embedding_modules`).

TorchRec's module also imports `ManagedCollisionCollection` (its tests import it from here).
"""

from shardrec_embedding.mc import (
    BaseManagedCollisionEmbeddingCollection,
    ManagedCollisionCollection,
    ManagedCollisionEmbeddingBagCollection,
    ManagedCollisionEmbeddingCollection,
)

__all__ = [
    "BaseManagedCollisionEmbeddingCollection",
    "ManagedCollisionCollection",
    "ManagedCollisionEmbeddingBagCollection",
    "ManagedCollisionEmbeddingCollection",
]
