"""Sharded quantized EmbeddingBagCollection (TorchRec path
`torchrec.distributed.quant_embeddingbag`)."""

from shardrec_sharding import QuantEmbeddingBagCollectionSharder, ShardedQuantEmbeddingBagCollection

__all__ = ["QuantEmbeddingBagCollectionSharder", "ShardedQuantEmbeddingBagCollection"]
