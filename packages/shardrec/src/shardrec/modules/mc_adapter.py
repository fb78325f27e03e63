"""Managed-collision adapters (TorchRec path `torchrec.modules.mc_adapter`)."""

from shardrec_embedding.mc import McEmbeddingBagCollectionAdapter, McEmbeddingCollectionAdapter

__all__ = ["McEmbeddingBagCollectionAdapter", "McEmbeddingCollectionAdapter"]
