"""Fused-optimizer collections (TorchRec path `torchrec.modules.fused_embedding_modules`)."""

from shardrec_embedding import FusedEmbeddingBagCollection

__all__ = ["FusedEmbeddingBagCollection"]
