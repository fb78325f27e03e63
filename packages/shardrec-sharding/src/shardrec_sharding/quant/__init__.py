"""Sharded quantized inference over the devices of one process."""

from shardrec_sharding.quant.embedding_bag import (
    ShardedPooledLookup,
    ShardedQuantEmbeddingBagCollection,
)
from shardrec_sharding.quant.shard import shard_quant_model
from shardrec_sharding.quant.sharder import (
    QUANT_SHARDING_TYPES,
    QuantEmbeddingBagCollectionSharder,
)

__all__ = [
    "QUANT_SHARDING_TYPES",
    "QuantEmbeddingBagCollectionSharder",
    "ShardedPooledLookup",
    "ShardedQuantEmbeddingBagCollection",
    "shard_quant_model",
]
