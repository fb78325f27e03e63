"""Sharded quantized inference over the devices of one process."""

from shardrec_sharding.quant.embedding import (
    ShardedQuantEmbeddingCollection,
    ShardedSequenceLookup,
)
from shardrec_sharding.quant.embedding_bag import (
    ShardedPooledLookup,
    ShardedQuantEmbeddingBagCollection,
)
from shardrec_sharding.quant.shard import shard_quant_model
from shardrec_sharding.quant.sharder import (
    QUANT_SHARDING_TYPES,
    QuantEmbeddingBagCollectionSharder,
    QuantEmbeddingCollectionSharder,
)

__all__ = [
    "QUANT_SHARDING_TYPES",
    "QuantEmbeddingBagCollectionSharder",
    "QuantEmbeddingCollectionSharder",
    "ShardedPooledLookup",
    "ShardedQuantEmbeddingBagCollection",
    "ShardedQuantEmbeddingCollection",
    "ShardedSequenceLookup",
    "shard_quant_model",
]
