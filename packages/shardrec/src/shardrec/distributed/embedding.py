"""Sharded EmbeddingCollection (TorchRec path `torchrec.distributed.embedding`)."""

from shardrec_sharding import EmbeddingCollectionSharder, ShardedEmbeddingCollection

__all__ = ["EmbeddingCollectionSharder", "ShardedEmbeddingCollection"]
