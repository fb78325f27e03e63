"""Unsharded embedding collections (TorchRec path `torchrec.modules.embedding_modules`)."""

from shardrec_embedding import EmbeddingBagCollection, EmbeddingCollection

__all__ = ["EmbeddingBagCollection", "EmbeddingCollection"]
