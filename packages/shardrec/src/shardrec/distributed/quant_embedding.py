"""Sharded quantized EmbeddingCollection (TorchRec path `torchrec.distributed.quant_embedding`)."""

from shardrec_sharding import QuantEmbeddingCollectionSharder, ShardedQuantEmbeddingCollection

__all__ = ["QuantEmbeddingCollectionSharder", "ShardedQuantEmbeddingCollection"]
