"""Sharding (TorchRec path `torchrec.distributed`)."""

from shardrec_sharding import EmbeddingBagCollectionSharder, EmbeddingCollectionSharder

__all__ = ["EmbeddingBagCollectionSharder", "EmbeddingCollectionSharder"]
