"""Sharding types and environment (TorchRec path `torchrec.distributed.types`)."""

from shardrec_collectives import Awaitable, LazyAwaitable, LazyNoWait, NoWait, ShardingEnv
from shardrec_embedding import DataType
from shardrec_planner import (
    EmbeddingModuleShardingPlan,
    EnumerableShardingSpec,
    ModuleSharder,
    ParameterSharding,
    ShardingPlan,
    ShardingType,
    ShardMetadata,
)
from shardrec_planner.cache_params import (
    BoundsCheckMode,
    CacheAlgorithm,
    CacheParams,
    KeyValueParams,
)
from shardrec_planner.sharder_data import StorageUsageType

__all__ = [
    "Awaitable",
    "BoundsCheckMode",
    "CacheAlgorithm",
    "CacheParams",
    "DataType",
    "EmbeddingModuleShardingPlan",
    "EnumerableShardingSpec",
    "KeyValueParams",
    "LazyAwaitable",
    "LazyNoWait",
    "ModuleSharder",
    "NoWait",
    "ParameterSharding",
    "ShardMetadata",
    "ShardingEnv",
    "ShardingPlan",
    "ShardingType",
    "StorageUsageType",
]
