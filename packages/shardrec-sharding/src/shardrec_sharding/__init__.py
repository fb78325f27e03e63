"""Sharders and sharded embedding modules: one strategy per sharding type."""

from shardrec_sharding import _malloc
from shardrec_sharding.defaults import (
    apply_to_all,
    get_default_sharders,
    get_module_to_default_sharders,
)
from shardrec_sharding.embedding import (
    EmbeddingCollectionSharder,
    ShardedEmbeddingCollection,
    ShardedSequenceInput,
)
from shardrec_sharding.embeddingbag import (
    DEFAULT_FUSED_OPTIMIZER,
    EmbeddingBagCollectionSharder,
    ShardedEmbeddingBagCollection,
    ShardedInput,
)
from shardrec_sharding.fused_optimizer import ShardedFusedOptimizer
from shardrec_sharding.layout import LocalTable, Segment, Shard, TableSharding, check_plan
from shardrec_sharding.quant import (
    QuantEmbeddingBagCollectionSharder,
    QuantEmbeddingCollectionSharder,
    ShardedQuantEmbeddingBagCollection,
    ShardedQuantEmbeddingCollection,
    shard_quant_model,
)
from shardrec_sharding.registry import POOLED_STRATEGIES, SEQUENCE_STRATEGIES, strategy_for
from shardrec_sharding.sharding_infos import (
    EmbeddingShardingInfo,
    add_params_from_parameter_sharding,
    create_grouped_sharding_infos,
    merge_fused_params,
)
from shardrec_sharding.state_dict import ShardedStateDict
from shardrec_sharding.tiering import tiered_lookups
from shardrec_sharding.types import (
    DistInput,
    PooledStrategy,
    SequenceInput,
    SequenceStrategy,
    TableMaker,
)

__all__ = [
    "DEFAULT_FUSED_OPTIMIZER",
    "POOLED_STRATEGIES",
    "SEQUENCE_STRATEGIES",
    "DistInput",
    "EmbeddingBagCollectionSharder",
    "EmbeddingCollectionSharder",
    "EmbeddingShardingInfo",
    "LocalTable",
    "PooledStrategy",
    "QuantEmbeddingBagCollectionSharder",
    "QuantEmbeddingCollectionSharder",
    "Segment",
    "SequenceInput",
    "SequenceStrategy",
    "Shard",
    "ShardedEmbeddingBagCollection",
    "ShardedEmbeddingCollection",
    "ShardedFusedOptimizer",
    "ShardedInput",
    "ShardedQuantEmbeddingBagCollection",
    "ShardedQuantEmbeddingCollection",
    "ShardedSequenceInput",
    "ShardedStateDict",
    "TableMaker",
    "TableSharding",
    "add_params_from_parameter_sharding",
    "apply_to_all",
    "check_plan",
    "create_grouped_sharding_infos",
    "get_default_sharders",
    "get_module_to_default_sharders",
    "merge_fused_params",
    "shard_quant_model",
    "strategy_for",
    "tiered_lookups",
]

_malloc.tune()  # freed memory kept for the next step (no page faults); see _malloc
