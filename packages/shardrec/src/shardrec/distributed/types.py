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

__all__ = [
    "Awaitable",
    "DataType",
    "EmbeddingModuleShardingPlan",
    "EnumerableShardingSpec",
    "LazyAwaitable",
    "LazyNoWait",
    "ModuleSharder",
    "NoWait",
    "ParameterSharding",
    "ShardMetadata",
    "ShardingEnv",
    "ShardingPlan",
    "ShardingType",
]
