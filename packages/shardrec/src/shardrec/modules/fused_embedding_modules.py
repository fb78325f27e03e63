"""Fused-optimizer collections (TorchRec path `torchrec.modules.fused_embedding_modules`)."""

from shardrec_embedding import FusedEmbeddingBagCollection
from shardrec_embedding.fused import fuse_embedding_optimizer

__all__ = ["FusedEmbeddingBagCollection", "fuse_embedding_optimizer"]
