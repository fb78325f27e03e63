"""Sharded EmbeddingBagCollection (TorchRec path `torchrec.distributed.embeddingbag`)."""

from shardrec_sharding import EmbeddingBagCollectionSharder, ShardedEmbeddingBagCollection

__all__ = ["EmbeddingBagCollectionSharder", "ShardedEmbeddingBagCollection"]
